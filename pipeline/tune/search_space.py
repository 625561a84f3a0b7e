"""What the annealer searches. A space supplies its default candidate, moves between candidates,
a correctness gate and a real measurement; Grid covers knobs that take ordered values."""

import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol


class SearchSpace(Protocol):
    name: str

    def initial(self) -> Hashable:
        """The candidate that runs without tuning (the defaults)."""

    def neighbour(self, candidate: Hashable, rng: random.Random) -> Hashable | None:
        """A candidate one move away (None: no legal move)."""

    def sample(self, rng: random.Random) -> Hashable:
        """A candidate drawn uniformly (random search)."""

    def check(self, candidate: Hashable) -> str | None:
        """Correctness gate: None when the candidate's outputs are right, else why not."""

    def measure(self, candidate: Hashable, repeats: int) -> list[float]:
        """`repeats` measured costs of the candidate, lower is better."""

    def describe(self, candidate: Hashable) -> dict:
        """The candidate as JSON-able settings."""


@dataclass(frozen=True, slots=True)
class Knob:
    name: str
    values: tuple  # ordered: a move steps to the next value up or down
    default: Any

    @classmethod
    def with_default(cls, name: str, values, default) -> "Knob":
        """The values, sorted, with the default among them."""
        return cls(name, tuple(sorted({*values, default})), default)


MAX_DRAWS = 64  # draws before a constrained move or sample gives up


class Grid:
    """Candidates are tuples of knob values, one per knob in order; `is_valid` (on the settings
    dict) rules combinations out before anything is measured."""

    def __init__(self, knobs: list[Knob], is_valid: Callable[[dict], bool] = lambda _: True):
        self.knobs = knobs
        self.is_valid = is_valid

    def initial(self) -> tuple:
        return tuple(k.default for k in self.knobs)

    def describe(self, candidate: tuple) -> dict:
        return {k.name: v for k, v in zip(self.knobs, candidate, strict=True)}

    def neighbour(self, candidate: tuple, rng: random.Random) -> tuple | None:
        """One knob moved one value up or down (two, one move in five: out of narrow valleys)."""
        movable = [i for i, k in enumerate(self.knobs) if len(k.values) > 1]
        for _ in range(MAX_DRAWS if movable else 0):
            i = rng.choice(movable)
            values = self.knobs[i].values
            step = rng.choice((-1, 1)) * (2 if rng.random() < 0.2 else 1)
            at = min(max(values.index(candidate[i]) + step, 0), len(values) - 1)
            moved = (*candidate[:i], values[at], *candidate[i + 1 :])
            if moved != candidate and self.is_valid(self.describe(moved)):
                return moved
        return None

    def sample(self, rng: random.Random) -> tuple:
        for _ in range(MAX_DRAWS):
            drawn = tuple(rng.choice(k.values) for k in self.knobs)
            if self.is_valid(self.describe(drawn)):
                return drawn
        return self.initial()

    def size(self) -> int:
        total = 1
        for k in self.knobs:
            total *= len(k.values)
        return total
