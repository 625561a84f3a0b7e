"""BeamGroup's rules on made-up log probabilities: the first step takes the prompt's best 2W,
an end token among the first W becomes a hypothesis scored by length ** length_penalty, and
early_stopping 1 stops at W hypotheses, 0 goes on while a live beam can still win, and > 1
scores a live beam at max_tokens."""

import numpy as np
import pytest

from pipeline.engine.scheduling.beam_group import BeamGroup

END = 0


def step(group: BeamGroup, rows: list[list[tuple[int, float]]], tokens):
    ids = np.array([[t for t, _ in row] for row in rows], np.int64)
    values = np.array([[v for _, v in row] for row in rows], np.float32)
    return group.step(values, ids, tokens)


def test_the_first_step_takes_the_prompt_s_best_tokens_and_keeps_an_early_end():
    group = BeamGroup(2, 1.0, 1, 8, frozenset([END]))
    beams = step(group, [[(END, -0.1), (5, -0.5), (6, -1.0), (7, -2.0)]], [[]])
    assert [(b.parent, b.token_id) for b in beams] == [(0, 5), (0, 6)]
    assert [(h.token_ids, h.finish_reason) for h in group.hypotheses] == [([], "stop")]
    assert group.hypotheses[0].score == pytest.approx(-0.1)


@pytest.mark.parametrize(("early_stopping", "done"), [(1, True), (0, False)])
def test_early_stopping_1_ends_at_w_hypotheses_and_0_while_a_beam_can_win(early_stopping, done):
    group = BeamGroup(2, 1.0, early_stopping, 8, frozenset([END]))
    step(group, [[(5, -0.1), (END, -0.5), (6, -0.6), (7, -2.0)]], [[]])  # [] ends second
    rows = [
        [(END, -0.2), (8, -3.0), (9, -4.0), (1, -5.0)],  # [5] ends first: -0.3 / 2
        [(4, -0.01), (3, -9.0), (2, -9.5), (1, -9.9)],  # [6, 4] lives on at -0.61
    ]
    beams = step(group, rows, [[5], [6]])
    assert [h.token_ids for h in group.hypotheses] == [[5], []]
    # the best live beam, -0.61 / 2, still beats the worst kept, -0.5 / 1
    assert group.is_done is done and len(beams) == (0 if done else 2)


@pytest.mark.parametrize(("length_penalty", "best"), [(0.0, [7]), (2.0, [7, 8])])
def test_never_scores_a_live_beam_at_max_tokens(length_penalty, best):
    """early_stopping > 1 ("never") with length_penalty > 0: a live beam is scored at
    max_tokens, so the longer one is waited for and wins by its length."""
    group = BeamGroup(1, length_penalty, 2, 3, frozenset([END]))
    step(group, [[(7, -1.0), (END, -5.0)]], [[]])
    step(group, [[(END, -0.3), (8, -0.5)]], [[7]])  # [7] ends at -1.3; [7, 8] lives at -1.5
    if not group.is_done:
        step(group, [[(END, -0.1), (9, -0.2)]], [[7, 8]])  # [7, 8] ends at -1.6 / 3 ** 2
    assert group.is_done and group.hypotheses[0].token_ids == best
