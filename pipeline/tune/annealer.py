"""Simulated annealing over any SearchSpace, on measured costs.

Each trial moves one step from the incumbent (space.neighbour), runs the correctness gate, then
measures `repeats` times. The move is taken when the candidate is better beyond the noise band
(noise.compare); when it is worse beyond it, with the Metropolis probability exp(-d / T) of its
relative cost increase d at temperature T (geometric cooling); inside the band it is refused,
so noise alone never moves the search. After `restart_after` trials without a new best the
search restarts, reheated: from a random candidate, then from the best, in turn. A candidate the
gate refuses is logged in the trace and can never become the incumbent or the best.
"""

import math
import random
import time
from collections.abc import Callable, Hashable

from pipeline.specs.tune import AnnealOptions
from pipeline.tune.evaluator import Budget, Evaluator
from pipeline.tune.noise import Verdict
from pipeline.tune.search_result import SearchResult
from pipeline.tune.search_space import SearchSpace
from pipeline.tune.tracker import Tracker

# moves drawn per trial of budget at most: a move onto a remembered gate failure runs nothing
# and spends no trial, so this bounds a search boxed in by failures
MAX_MOVES_PER_TRIAL = 20


def acceptance_probability(relative_increase: float, temperature: float) -> float:
    return math.exp(-relative_increase / temperature) if temperature > 0 else 0.0


class Annealer:
    strategy = "anneal"

    def __init__(self, options: AnnealOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self.clock = clock

    def run(self, space: SearchSpace) -> SearchResult:
        o = self.options
        rng = random.Random(o.seed)
        budget = Budget(o.max_trials, o.max_seconds, self.clock)
        evaluator = Evaluator(space, o.repeats, budget)
        tracker = Tracker(evaluator, o.confidence, o.min_gain)
        current = space.initial()
        tracker.start(current)
        temperature = o.initial_temperature
        since_best = num_restarts = 0
        stop = "max_moves"
        for _ in range(MAX_MOVES_PER_TRIAL * o.max_trials):
            if (spent := budget.spent()) is not None:
                stop = spent
                break
            is_restart = since_best >= o.restart_after
            if is_restart:
                num_restarts += 1
                since_best, temperature = 0, o.initial_temperature
                if num_restarts % 2 == 0:  # from the best: no trial needed
                    current = tracker.best
                    continue
            candidate = None if is_restart else space.neighbour(current, rng)
            if candidate is None:  # a restart, or nowhere to move from here
                candidate = space.sample(rng)
                if candidate == current and space.neighbour(current, rng) is None:
                    stop = "no_moves"
                    break
                is_restart = True
            evaluation = evaluator.evaluate(candidate)
            if not evaluation.is_new_trial:
                continue
            if evaluation.summary is None:
                tracker.record(
                    candidate, "correctness", current, temperature, evaluation.gate_failure
                )
                since_best += 1
            else:
                if is_restart:
                    outcome, current = "restart", candidate
                else:
                    outcome, current = self._step(candidate, current, tracker, temperature, rng)
                since_best = 0 if tracker.consider(candidate) else since_best + 1
                tracker.record(candidate, outcome, current, temperature)
            temperature = max(temperature * o.cooling, o.min_temperature)
        return tracker.result(self.strategy, stop, num_restarts)

    @staticmethod
    def _step(
        candidate: Hashable,
        current: Hashable,
        tracker: Tracker,
        temperature: float,
        rng: random.Random,
    ) -> tuple[str, Hashable]:
        """(outcome, the incumbent after this move)."""
        verdict = tracker.verdict(candidate, current)
        if verdict is Verdict.BETTER:
            return "accepted", candidate
        if verdict is Verdict.TIE:
            return "noise", current
        cost, incumbent_cost = tracker.cost(candidate), tracker.cost(current)
        increase = (cost - incumbent_cost) / abs(incumbent_cost) if incumbent_cost else math.inf
        if rng.random() < acceptance_probability(increase, temperature):
            return "accepted", candidate
        return "rejected", current
