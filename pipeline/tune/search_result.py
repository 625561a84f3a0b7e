"""What a search leaves: every trial in order (the trace the report plots) and the outcome."""

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True, slots=True)
class Trial:
    index: int
    elapsed_s: float
    settings: dict
    # initial | accepted | rejected (worse, the Metropolis draw said no) | noise (inside the
    # noise band) | correctness (refused by the gate) | restart (a new starting point)
    outcome: str
    cost: float | None  # the candidate's mean cost (pooled over its visits); None: gate refused
    incumbent_cost: float | None  # after this trial
    best_cost: float | None
    temperature: float | None = None
    reason: str | None = None  # why the gate refused it


@dataclass
class SearchResult:
    space: str
    strategy: str
    default: dict
    default_cost: float
    default_stderr: float
    tuned: dict  # the default unless something beat it beyond the noise
    tuned_cost: float
    tuned_stderr: float
    is_improved: bool
    stop_reason: str
    elapsed_s: float
    trials: list[Trial] = field(default_factory=list)
    num_restarts: int = 0

    def count(self, outcome: str) -> int:
        return sum(t.outcome == outcome for t in self.trials)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["num_trials"] = len(self.trials)
        out["num_accepted"] = self.count("accepted")
        out["num_rejected_for_correctness"] = self.count("correctness")
        out["num_rejected_in_noise"] = self.count("noise")
        gain = 1 - self.tuned_cost / self.default_cost if self.default_cost else 0.0
        out["gain"] = gain if self.is_improved else 0.0
        return out
