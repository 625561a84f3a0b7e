"""A request's prompt scores as chunked prefills give them positions: each position once, in
order, a restarted prefill (preemption) from the first position again, nothing after they were
reported; and the request's knobs for them."""

import numpy as np
import pytest

from pipeline.engine.scheduling.prompt_scores import PromptScoresBuilder
from pipeline.request.sampling_params import SamplingParams


class Launch:
    """What PromptScoring.entry gives: the positions' values (their own index), tops, logits."""

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi

    def entry(self, entry: int, num_top: int):
        positions = range(self.lo, self.hi)
        tops = [tuple((p, -1.0) for _ in range(num_top)) for p in positions]
        return (
            [float(p) for p in positions],
            tops,
            np.full((self.hi - self.lo, 2), self.lo, np.float32),
        )


def schedule(builder: PromptScoresBuilder, start: int, num: int) -> tuple[int, int]:
    lo, hi = builder.positions(start, num)
    if lo < hi:
        builder.expect(Launch(lo, hi), 0)
    return lo, hi


def test_chunks_give_each_position_once_and_the_last_predicts_no_prompt_token():
    builder = PromptScoresBuilder(num_prompt_tokens=5, num_top=1, keeps_logits=True)
    assert schedule(builder, 0, 2) == (0, 2) and not builder.is_complete
    assert schedule(builder, 2, 3) == (2, 5) and builder.is_complete
    scores = builder.take()
    # position p scores token p + 1: the first token has none, the last position none
    assert scores.logprobs == [None, 0.0, 1.0, 2.0, 3.0]
    assert scores.top_logprobs == [(), ((0, -1.0),), ((1, -1.0),), ((2, -1.0),), ((3, -1.0),)]
    assert scores.context_logits.shape == (5, 2)
    assert not builder.is_complete and builder.positions(0, 5) == (0, 0)  # reported once


def test_a_restarted_prefill_scores_from_the_first_position_again():
    builder = PromptScoresBuilder(num_prompt_tokens=4, num_top=0, keeps_logits=False)
    schedule(builder, 0, 2)
    assert schedule(builder, 0, 4) == (0, 4)  # preempted: the earlier launch is void
    scores = builder.take()
    assert scores.logprobs == [None, 0.0, 1.0, 2.0] and scores.top_logprobs is None
    assert scores.context_logits is None


@pytest.mark.parametrize("name", ["logprobs", "prompt_logprobs"])
def test_at_most_twenty_alternatives(name):
    assert getattr(SamplingParams(**{name: 20}), name) == 20
    with pytest.raises(ValueError, match=f"{name}=21 must be in \\[0, 20\\]"):
        SamplingParams(**{name: 21})
    assert SamplingParams(prompt_logprobs=0).scores_prompt
    assert SamplingParams(return_generation_logits=True).scores_tokens
    assert not SamplingParams().scores_prompt and not SamplingParams().scores_tokens
