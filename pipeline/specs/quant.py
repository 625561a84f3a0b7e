from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QuantSpec:
    name: str = "none"
    kv_cache: str = "none"
