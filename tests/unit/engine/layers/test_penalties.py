"""Penalties, min_tokens and log probabilities in the sampler, against TensorRT-LLM's definitions
written out by hand (docs/trtllm_reference.md, sections 9.2 and 9.3), on made-up logits."""

import math

import pytest
import torch

from pipeline.engine.execution.request_logits import sampling_tensors
from pipeline.engine.layers.sampler import Sampler
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.request.sampling_params import SamplingParams

VOCAB = 12
EOS = 2


def seq(prompt: list[int], **params) -> Sequence:
    return Sequence("r", prompt, SamplingParams(max_tokens=8, **params), eos_token_ids=(EOS,))


def sampler() -> Sampler:
    return Sampler(torch.Generator().manual_seed(0))


def reference(logits: list[float], tokens: list[int], ignore: int, temperature: float, **p):
    """TensorRT-LLM's batchApplyPenalty for one row, token by token (plain floats)."""
    out = []
    for token, logit in enumerate(logits):
        logit /= temperature
        occurrences = tokens[ignore:].count(token)
        if token in tokens:
            logit = logit * p["rep"] if logit < 0 else logit / p["rep"]
        if occurrences:
            logit -= p["presence"] + p["frequency"] * occurrences
        out.append(logit)
    return out


@pytest.mark.parametrize("ignore", [0, 2])
def test_penalties_follow_the_definition(ignore):
    prompt = [3, 3, 5, 7, 7, 7]
    row = seq(
        prompt,
        repetition_penalty=1.7,
        presence_penalty=0.4,
        frequency_penalty=0.3,
        prompt_ignore_length=ignore,
    )
    logits = torch.linspace(-3, 3, VOCAB)[None, :]
    tensors = sampling_tensors([row], torch.device("cpu"), VOCAB)
    applied = tensors.penalties.apply(logits)[0].tolist()
    want = reference(logits[0].tolist(), prompt, ignore, 1.0, rep=1.7, presence=0.4, frequency=0.3)
    assert applied == pytest.approx(want, abs=1e-6)
    untouched = [t for t in range(VOCAB) if t not in prompt]
    assert [applied[t] for t in untouched] == pytest.approx(
        [logits[0, t].item() for t in untouched]
    )


def test_temperature_comes_before_the_penalties():
    row = seq([4], presence_penalty=1.0, temperature=0.5)
    tensors = sampling_tensors([row], torch.device("cpu"), VOCAB)
    applied = tensors.penalties.apply(torch.ones(1, VOCAB))[0]
    assert applied[4].item() == pytest.approx(1.0 / 0.5 - 1.0)  # not (1 - 1) / 0.5
    assert tensors.temperatures[0].item() == 1.0  # not scaled twice


def test_sampled_tokens_count_before_the_host_reads_them():
    """Each step adds its tokens on the device, so a launch's next steps (and the next launch,
    with the tokens still pending) penalize them."""
    row = seq([1], frequency_penalty=2.0)
    logits = torch.zeros(1, VOCAB)
    logits[0, 6] = 5.0
    logits[0, 8] = 4.0
    tensors = sampling_tensors([row], torch.device("cpu"), VOCAB)
    first = sampler()(logits, tensors).item()
    second = sampler()(logits, tensors).item()  # the same launch's next step
    assert (first, second) == (6, 8)
    row.num_pending_tokens = 2  # the host has not read them: the next launch still knows them
    later = sampling_tensors([row], torch.device("cpu"), VOCAB)
    assert later.penalties.counts[0, 0, [6, 8]].tolist() == [1.0, 1.0]


def test_plain_requests_cost_nothing_extra():
    tensors = sampling_tensors([seq([1, 2]), seq([3], temperature=0.7)], torch.device("cpu"), VOCAB)
    assert tensors.penalties is None and tensors.logprobs is None


def test_min_tokens_bans_end_ids_for_that_many_steps():
    row = seq([1], min_tokens=3, stop_token_ids=(9,))
    row.append_token(4)  # one generated already
    logits = torch.zeros(1, VOCAB)
    logits[0, EOS] = 10.0
    logits[0, 9] = 9.0
    tensors = sampling_tensors([row], torch.device("cpu"), VOCAB)
    picks = [sampler()(logits, tensors).item() for _ in range(3)]
    assert EOS not in picks[:2] and 9 not in picks[:2]
    assert picks[2] == EOS


def test_log_probs_are_those_of_the_models_logits():
    # the raw distribution, before temperature and penalties (vLLM's, OpenAI's)
    greedy = seq([1], logprobs=0)
    hot = seq([1], logprobs=0, temperature=0.5, seed=3, repetition_penalty=1.5)
    logits = torch.randn(2, VOCAB, generator=torch.Generator().manual_seed(4))
    tensors = sampling_tensors([greedy, hot], torch.device("cpu"), VOCAB)
    tokens = sampler()(logits, tensors).tolist()
    for row, token in enumerate(tokens):
        want = torch.log_softmax(logits[row], -1)[token].item()
        assert tensors.logprobs.row(row) == [pytest.approx(want, abs=1e-6)]
    assert tokens[0] == logits[0].argmax().item()


def test_a_sequence_keeps_the_log_probs_of_the_tokens_it_keeps():
    row = seq([1], logprobs=0)
    tensors = sampling_tensors([row], torch.device("cpu"), VOCAB)
    logits = torch.zeros(1, VOCAB)
    logits[0, 5] = 3.0
    sampler()(logits, tensors)
    logits[0, EOS] = 9.0
    sampler()(logits, tensors)
    num_taken, reason = row.append_tokens([5, EOS])  # the end token is not kept
    assert (num_taken, reason) == (2, "stop")
    assert len(row.logprobs) == 1 and math.isclose(
        row.logprobs[0], torch.log_softmax(torch.tensor([0.0] * 5 + [3.0] + [0.0] * 6), -1)[5]
    )
