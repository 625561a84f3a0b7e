from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BenchSpec:
    name: str = "smoke"
    seed: int = 0
