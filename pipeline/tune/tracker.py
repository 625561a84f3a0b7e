"""The best candidate so far and the trace of a search, shared by every strategy: a candidate
becomes the best only when it beats the best beyond the noise, and only measured (gate-passing)
candidates can."""

from collections.abc import Hashable

from pipeline.tune.evaluator import Evaluator
from pipeline.tune.noise import Verdict, compare
from pipeline.tune.search_result import SearchResult, Trial


class Tracker:
    def __init__(self, evaluator: Evaluator, confidence: float, min_gain: float) -> None:
        self.evaluator = evaluator
        self.confidence = confidence
        self.min_gain = min_gain
        self.initial: Hashable | None = None
        self.best: Hashable | None = None
        self.trials: list[Trial] = []

    def verdict(self, candidate: Hashable, incumbent: Hashable) -> Verdict:
        summary = self.evaluator.summary
        return compare(summary(candidate), summary(incumbent), self.confidence, self.min_gain)

    def start(self, candidate: Hashable) -> None:
        """The default, measured first: what every gain is relative to."""
        evaluation = self.evaluator.evaluate(candidate)
        if evaluation.summary is None:
            raise ValueError(
                f"{self.evaluator.space.name}: the default {self.evaluator.describe(candidate)} "
                f"fails its own correctness gate ({evaluation.gate_failure}); fix the kernel or "
                f"its reference before tuning"
            )
        self.initial = self.best = candidate
        self.record(candidate, "initial", incumbent=candidate)

    def consider(self, candidate: Hashable) -> bool:
        """Make a measured candidate the best if it beats the best beyond the noise."""
        if candidate != self.best and self.verdict(candidate, self.best) is Verdict.BETTER:
            self.best = candidate
            return True
        return False

    def cost(self, candidate: Hashable | None) -> float | None:
        if candidate is None or candidate not in self.evaluator.samples:
            return None
        return self.evaluator.summary(candidate).mean

    def record(
        self,
        candidate: Hashable,
        outcome: str,
        incumbent: Hashable | None = None,
        temperature: float | None = None,
        reason: str | None = None,
    ) -> None:
        self.trials.append(
            Trial(
                index=len(self.trials),
                elapsed_s=round(self.evaluator.budget.elapsed_s(), 4),
                settings=self.evaluator.describe(candidate),
                outcome=outcome,
                cost=self.cost(candidate),
                incumbent_cost=self.cost(incumbent),
                best_cost=self.cost(self.best),
                temperature=temperature,
                reason=reason,
            )
        )

    def result(self, strategy: str, stop_reason: str, num_restarts: int = 0) -> SearchResult:
        summary, describe = self.evaluator.summary, self.evaluator.describe
        # the pooled samples decide: a best that no longer clears the noise against the default
        # (more samples since) is not reported as a gain
        is_improved = self.best != self.initial and (
            self.verdict(self.best, self.initial) is Verdict.BETTER
        )
        tuned = self.best if is_improved else self.initial
        default_summary, tuned_summary = summary(self.initial), summary(tuned)
        return SearchResult(
            space=self.evaluator.space.name,
            strategy=strategy,
            default=describe(self.initial),
            default_cost=default_summary.mean,
            default_stderr=default_summary.stderr,
            tuned=describe(tuned),
            tuned_cost=tuned_summary.mean,
            tuned_stderr=tuned_summary.stderr,
            is_improved=is_improved,
            stop_reason=stop_reason,
            elapsed_s=round(self.evaluator.budget.elapsed_s(), 3),
            trials=self.trials,
            num_restarts=num_restarts,
        )
