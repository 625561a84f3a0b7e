from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackendSpec:
    _target_: str
    name: str
    device: str = "auto"
