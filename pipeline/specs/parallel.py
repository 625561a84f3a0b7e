from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ParallelSpec:
    tp_size: int = 1
    pp_size: int = 1

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size
