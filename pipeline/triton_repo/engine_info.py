"""What deploy needs from an engine dir's config.json (the same layout for both backends)."""

from dataclasses import dataclass
from pathlib import Path

from pipeline.engine_json import EngineJson
from pipeline.errors import ArtifactError, ConfigError
from pipeline.specs.deploy import DeploySpec


@dataclass(frozen=True, slots=True)
class EngineInfo:
    version: str
    backend: str
    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int
    tp_size: int
    pp_size: int
    logits_dtype: str = "float32"  # pretrained_config.logits_dtype (TensorRT-LLM's default)

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    @classmethod
    def read(cls, engine_dir: Path) -> "EngineInfo":
        engine = EngineJson.read(engine_dir)
        build = engine.build
        try:
            return cls(
                version=engine.version,
                backend=engine.backend,
                max_batch_size=int(build["max_batch_size"]),
                max_input_len=int(build["max_input_len"]),
                max_seq_len=int(build["max_seq_len"]),
                max_num_tokens=int(build["max_num_tokens"]),
                tp_size=engine.tp_size,
                pp_size=engine.pp_size,
                logits_dtype=str(engine.pretrained.get("logits_dtype", "float32")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(
                f"deploy: cannot read the engine's {engine.path} ({exc!r}); it needs "
                f"build_config.max_batch_size/max_input_len/max_seq_len/"
                f"max_num_tokens and pretrained_config; re-run `make build`"
            ) from exc


def triton_max_batch_size(deploy: DeploySpec, engine: EngineInfo) -> int:
    """Triton's max_batch_size: the engine's unless deploy.triton_max_batch_size lowers it."""
    if deploy.triton_max_batch_size < 0:
        raise ConfigError(
            f"deploy: deploy.triton_max_batch_size={deploy.triton_max_batch_size} "
            f"is negative; use 0 (= the engine's {engine.max_batch_size}) or 1.."
            f"{engine.max_batch_size}"
        )
    return deploy.triton_max_batch_size or engine.max_batch_size
