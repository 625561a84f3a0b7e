"""What annealing is compared with, on the same evaluator and budget: uniform random search, and
a fixed list of candidates in order (a kernel's triton.autotune list). Both measure the default
first, as the annealer does, so every strategy gets the same number of measurements."""

import random
import time
from collections.abc import Callable, Hashable

from pipeline.specs.tune import AnnealOptions
from pipeline.tune.evaluator import Budget, Evaluator
from pipeline.tune.search_result import SearchResult
from pipeline.tune.search_space import SearchSpace
from pipeline.tune.tracker import Tracker


def _search(
    space: SearchSpace,
    options: AnnealOptions,
    clock: Callable[[], float],
    strategy: str,
    draw: Callable[[random.Random], Hashable | None],
) -> SearchResult:
    rng = random.Random(options.seed)
    budget = Budget(options.max_trials, options.max_seconds, clock)
    evaluator = Evaluator(space, options.repeats, budget)
    tracker = Tracker(evaluator, options.confidence, options.min_gain)
    tracker.start(space.initial())
    stop = "exhausted"
    while True:
        if (spent := budget.spent()) is not None:
            stop = spent
            break
        candidate = draw(rng)
        if candidate is None:
            break
        evaluation = evaluator.evaluate(candidate)
        if not evaluation.is_new_trial:
            continue
        if evaluation.summary is None:
            tracker.record(candidate, "correctness", tracker.best, reason=evaluation.gate_failure)
            continue
        outcome = "accepted" if tracker.consider(candidate) else "rejected"
        tracker.record(candidate, outcome, tracker.best)
    return tracker.result(strategy, stop)


class RandomSearch:
    strategy = "random"

    def __init__(self, options: AnnealOptions, clock: Callable[[], float] = time.monotonic):
        self.options = options
        self.clock = clock

    def run(self, space: SearchSpace) -> SearchResult:
        draws = [0]

        def draw(rng: random.Random) -> Hashable | None:
            # a remembered gate failure spends no trial: stop drawing when the space is all
            # failures rather than loop
            draws[0] += 1
            return space.sample(rng) if draws[0] <= 20 * self.options.max_trials else None

        return _search(space, self.options, self.clock, self.strategy, draw)


class ListSearch:
    strategy = "autotune_list"

    def __init__(
        self,
        options: AnnealOptions,
        candidates: list[Hashable],
        clock: Callable[[], float] = time.monotonic,
    ):
        self.options = options
        self.candidates = candidates
        self.clock = clock

    def run(self, space: SearchSpace) -> SearchResult:
        pending = iter([c for c in self.candidates if c != space.initial()])
        draw = lambda _: next(pending, None)  # noqa: E731
        return _search(space, self.options, self.clock, self.strategy, draw)
