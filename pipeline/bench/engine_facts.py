"""Facts about an engine dir the bench reports: weight bytes, KV bytes per block, batch limit.
Read from the engine's config.json (pipeline.engine_json), the file deploy reads too."""

from dataclasses import dataclass
from pathlib import Path

from pipeline.engine_json import EngineJson
from pipeline.errors import ArtifactError

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1, "int8": 1}


@dataclass(frozen=True, slots=True)
class EngineFacts:
    max_batch_size: int
    max_seq_len: int
    tokens_per_block: int
    kv_bytes_per_block: int
    weights_bytes: int

    @classmethod
    def read(cls, engine_dir: Path) -> "EngineFacts":
        engine = EngineJson.read(engine_dir)
        try:
            model, build = engine.pretrained, engine.build
            num_heads = model["num_attention_heads"]
            head_dim = model.get("head_size") or model["hidden_size"] // num_heads
            kv_algo = (model.get("quantization") or {}).get("kv_cache_quant_algo")
            kv_dtype = {"FP8": "fp8", "INT8": "int8"}.get(kv_algo, model["dtype"])
            tokens_per_block = build["plugin_config"]["tokens_per_block"]
            kv_bytes = (
                tokens_per_block
                * model["num_hidden_layers"]
                * 2
                * model.get("num_key_value_heads", num_heads)
                * head_dim
                * DTYPE_BYTES[kv_dtype]
            )
            return cls(
                build["max_batch_size"],
                build["max_seq_len"],
                tokens_per_block,
                kv_bytes,
                sum(p.stat().st_size for p in Path(engine_dir).glob("*.safetensors")),
            )
        except (OSError, KeyError, TypeError) as exc:  # OSError: the weights' sizes
            raise ArtifactError(
                f"bench: {engine.path}: not a readable engine config ({exc!r}); rebuild "
                f"with `python -m pipeline build force=true`"
            ) from exc
