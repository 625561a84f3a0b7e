"""One candidate evaluated for a search: the correctness gate first (remembered: a candidate that
failed is never measured or kept), then `repeats` measurements pooled with any earlier ones;
and the two budgets (trials, seconds) every strategy spends the same way."""

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from pipeline.tune.noise import Summary
from pipeline.tune.search_space import SearchSpace

log = logging.getLogger(__name__)


@dataclass
class Budget:
    """A trial is never started once either budget is spent (one in flight may end past the
    seconds)."""

    max_trials: int
    max_seconds: float
    clock: Callable[[], float] = time.monotonic
    start_s: float = field(init=False)
    num_trials: int = 0

    def __post_init__(self) -> None:
        self.start_s = self.clock()

    def elapsed_s(self) -> float:
        return self.clock() - self.start_s

    def spent(self) -> str | None:
        """Why no further trial may start (None: one may)."""
        if self.num_trials >= self.max_trials:
            return "max_trials"
        if self.elapsed_s() >= self.max_seconds:
            return "max_seconds"
        return None


@dataclass(frozen=True, slots=True)
class Evaluation:
    summary: Summary | None  # None: refused by the gate
    gate_failure: str | None = None
    is_new_trial: bool = True  # False: a remembered gate failure, nothing run


class Evaluator:
    def __init__(self, space: SearchSpace, repeats: int, budget: Budget) -> None:
        self.space = space
        self.repeats = repeats
        self.budget = budget
        self.samples: dict[Hashable, list[float]] = {}
        self.gate_failures: dict[Hashable, str] = {}

    def evaluate(self, candidate: Hashable) -> Evaluation:
        if candidate in self.gate_failures:
            return Evaluation(None, self.gate_failures[candidate], is_new_trial=False)
        self.budget.num_trials += 1
        if candidate not in self.samples:
            reason = self._gate(candidate)
            if reason is not None:
                self.gate_failures[candidate] = reason
                log.info("%s: rejected %s: %s", self.space.name, self.describe(candidate), reason)
                return Evaluation(None, reason)
        costs = self.space.measure(candidate, self.repeats)
        self.samples.setdefault(candidate, []).extend(costs)
        return Evaluation(self.summary(candidate))

    def _gate(self, candidate: Hashable) -> str | None:
        try:
            return self.space.check(candidate)
        except Exception as exc:  # a candidate that cannot even run is an incorrect one
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"

    def summary(self, candidate: Hashable) -> Summary:
        return Summary.of(self.samples[candidate])

    def describe(self, candidate: Hashable) -> dict:
        return self.space.describe(candidate)
