"""The engine's LoRA settings (RuntimeOptions lora_*), checked once."""

from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ConfigError
from pipeline.lora.adapters import TARGET_MODULES, check_target_modules

MAX_RANK = 64  # the kernels' largest rank (a power of two >= 16 pads smaller ones)


@dataclass(frozen=True, slots=True)
class LoraOptions:
    adapter_dir: Path  # one sub-directory per adapter (pipeline.lora.adapters)
    max_rank: int = 64
    max_loras: int = 8  # adapter slots on the device (an LRU cache of the adapters in use)
    target_modules: tuple[str, ...] = TARGET_MODULES

    @classmethod
    def checked(
        cls, adapter_dir: str, max_rank: int, max_loras: int, target_modules, where: str
    ) -> "LoraOptions":
        problems = []
        if not 1 <= max_rank <= MAX_RANK:
            problems.append(f"lora_max_rank={max_rank} must be in [1, {MAX_RANK}]")
        if max_loras < 1:
            problems.append(f"lora_max_loras={max_loras} must be >= 1")
        if problems:
            raise ConfigError(f"{where}: {'; '.join(problems)}")
        modules = TARGET_MODULES if target_modules is None else target_modules
        return cls(
            Path(adapter_dir),
            max_rank,
            max_loras,
            check_target_modules(tuple(modules), f"{where}: lora_target_modules"),
        )

    @property
    def padded_rank(self) -> int:
        """The rank the device slots hold: a power of two >= 16 (tl.dot's smallest tile)."""
        rank = 16
        while rank < self.max_rank:
            rank *= 2
        return rank
