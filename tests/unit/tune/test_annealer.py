"""The annealer on synthetic objectives with known optima, on a fake clock."""

import dataclasses

import pytest

from pipeline.specs.tune import AnnealOptions
from pipeline.tune.annealer import Annealer
from pipeline.tune.baselines import ListSearch, RandomSearch
from tests.unit.tune.synthetic_spaces import Bowl, Wobble

OPTIONS = AnnealOptions(seed=0, max_trials=150, max_seconds=1e9, repeats=3, restart_after=15)


def anneal(space, **changes):
    return Annealer(dataclasses.replace(OPTIONS, **changes), clock=space.clock).run(space)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_finds_the_optimum_of_a_noisy_bowl_within_the_budget(seed):
    space = Bowl(seed=seed)
    result = anneal(space, seed=seed)
    assert result.tuned == {"x": 23, "y": 7}
    assert result.is_improved and result.tuned_cost < result.default_cost / 100
    assert len(result.trials) <= OPTIONS.max_trials


def test_random_search_at_the_same_budget_measures_as_many_candidates():
    annealed = anneal(Bowl())
    space = Bowl()
    random_result = RandomSearch(OPTIONS, clock=space.clock).run(space)
    assert len(random_result.trials) == len(annealed.trials) == OPTIONS.max_trials
    assert random_result.tuned_cost > annealed.tuned_cost  # 150 of 1024 points: not the optimum


def test_the_same_seed_gives_the_same_search():
    first, second = anneal(Bowl(), max_trials=60), anneal(Bowl(), max_trials=60)
    assert [(t.settings, t.outcome, t.cost) for t in first.trials] == [
        (t.settings, t.outcome, t.cost) for t in second.trials
    ]
    other = anneal(Bowl(), max_trials=60, seed=5)
    assert [t.settings for t in other.trials] != [t.settings for t in first.trials]


def test_stops_at_the_trial_budget():
    space = Bowl()
    result = anneal(space, max_trials=10)
    assert len(result.trials) == len(space.measured) == 10
    assert result.stop_reason == "max_trials"


def test_starts_no_trial_past_the_seconds_budget():
    space = Bowl()  # each repeat takes one fake second: a trial takes 3
    result = anneal(space, max_seconds=20)
    assert result.stop_reason == "max_seconds"
    assert len(result.trials) == 7  # started at 0, 3, ..., 18 s; the 8th would start at 21 s
    assert space.clock.now_s <= 20 + 3


def test_never_keeps_a_candidate_the_gate_refuses():
    # the true optimum's whole neighbourhood is wrong: the best correct point is x = 19
    def refuse(settings):
        return settings["x"] >= 20

    space = Bowl(refuse=refuse)
    result = anneal(space)
    refused = [t for t in result.trials if t.outcome == "correctness"]
    assert refused and all(t.reason == "wrong outputs" and t.cost is None for t in refused)
    assert not any(refuse(s) for s in space.measured)  # refused before being measured
    assert not refuse(result.tuned) and result.tuned == {"x": 19, "y": 7}
    kept = [t for t in result.trials if t.outcome in ("accepted", "restart", "initial")]
    assert not any(refuse(t.settings) for t in kept)


def test_refuses_moves_inside_the_noise_band():
    space = Wobble()
    result = anneal(space, max_trials=40, restart_after=1000)  # no jumps: one step at a time
    moves = [t.outcome for t in result.trials[1:]]
    assert len(moves) == 39 and set(moves) == {"noise"}
    assert result.tuned == result.default and not result.is_improved


def test_a_default_that_fails_its_gate_is_an_error_not_a_result():
    with pytest.raises(ValueError, match="fails its own correctness gate"):
        anneal(Bowl(refuse=lambda s: s == {"x": 0, "y": 0}))


def test_list_search_measures_the_default_then_the_list_in_order():
    space = Bowl()
    points = [(5, 5), (0, 0), (23, 7), (30, 30)]
    result = ListSearch(OPTIONS, points, clock=space.clock).run(space)
    measured = [tuple(t.settings.values()) for t in result.trials]
    assert measured == [(0, 0), (5, 5), (23, 7), (30, 30)]
    assert result.stop_reason == "exhausted" and result.tuned == {"x": 23, "y": 7}


def test_trace_counts_add_up():
    result = anneal(Bowl(refuse=lambda s: s["y"] == 3), max_trials=80).to_dict()
    assert result["num_trials"] == 80
    outcomes = {"initial", "accepted", "rejected", "noise", "correctness", "restart"}
    assert {t["outcome"] for t in result["trials"]} <= outcomes
    assert result["num_accepted"] == sum(t["outcome"] == "accepted" for t in result["trials"])
    assert result["num_rejected_for_correctness"] > 0
