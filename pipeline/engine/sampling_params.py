"""Per-request generation knobs (names follow the tensorrtllm backend's inputs)."""

from dataclasses import dataclass


def _token_sequences(name: str, value) -> tuple[tuple[int, ...], ...]:
    seqs = tuple(tuple(int(t) for t in seq) for seq in value)
    if any(not seq for seq in seqs):
        raise ValueError(f"SamplingParams.{name}: empty token sequence in {value!r}")
    return seqs


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = no top-k filter
    top_p: float = 1.0
    seed: int | None = None  # None = the engine's own generator
    end_id: int | None = None  # None = the model's eos token(s)
    pad_id: int | None = None  # carried for the Triton model's padded outputs
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    stop_sequences: tuple[tuple[int, ...], ...] = ()  # token-id sequences that end generation
    bad_sequences: tuple[tuple[int, ...], ...] = ()  # token-id sequences never generated

    def __post_init__(self):
        problems = []
        if self.max_tokens < 1:
            problems.append(f"max_tokens={self.max_tokens} must be >= 1")
        if self.temperature < 0:
            problems.append(f"temperature={self.temperature} must be >= 0")
        if self.top_k < 0:
            problems.append(f"top_k={self.top_k} must be >= 0 (0 disables it)")
        if not 0.0 < self.top_p <= 1.0:
            problems.append(f"top_p={self.top_p} must be in (0, 1]")
        if problems:
            raise ValueError("SamplingParams: " + "; ".join(problems))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        object.__setattr__(
            self, "stop_sequences", _token_sequences("stop_sequences", self.stop_sequences)
        )
        object.__setattr__(
            self, "bad_sequences", _token_sequences("bad_sequences", self.bad_sequences)
        )

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0
