"""A build's lookup in the kernel tuning cache: the entries for the model's shape classes, in
this environment, on the kernels' current sources, go into the engine dir (kernel_configs.json,
which the engine installs when it loads); the manifest records the hits and misses."""

import hashlib
import json
import logging
from pathlib import Path

from pipeline.engine.kernels import toolchain
from pipeline.engine.kernels.tuned_configs import ENGINE_FILE
from pipeline.specs.pipeline import PipelineSpec
from pipeline.tune.kernel_items import KernelItem, ModelShape, items_for
from pipeline.tune.tuning_cache import TuningCache, TuningCacheMismatch, write_atomically

log = logging.getLogger(__name__)
KV_DTYPES = {"FP8": "float8_e4m3fn"}


def model_shape(checkpoint_config: dict, block_size: int, where: str) -> ModelShape:
    """The shape of the engine a checkpoint builds (runs in the checkpoint's dtype)."""
    from pipeline.engine.engine_config import ModelConfig

    model = ModelConfig.from_pretrained_config(checkpoint_config, where)
    kv_dtype = KV_DTYPES.get((model.quantization or {}).get("kv_cache_quant_algo"))
    return ModelShape.of(model, block_size, model.dtype, kv_dtype)


class EngineConfigs:
    """The cache entries a build puts into its engine dir, found before the build runs (their
    digest is part of the build's config: a changed cache means a new engine dir)."""

    def __init__(self, cache_path: Path, items: list[KernelItem], environment: dict) -> None:
        self.cache_path = Path(cache_path)
        self.items = items
        self.entries: list[dict] = []
        self.missed: list[str] = []
        self.status = "no cache"
        self.environment = environment
        if not self.cache_path.is_file():
            return
        try:
            cache = TuningCache.open(self.cache_path, environment)
        except TuningCacheMismatch as exc:
            log.warning("%s: the kernels' defaults run", exc)
            self.status = f"refused: {exc}"
            return
        self.status = "looked up"
        for item in items:
            entry = cache.get(item.kernel, item.key, toolchain.source_hash(item.kernel))
            if entry is None:
                self.missed.append(f"{item.kernel}[{item.key}]")
            else:
                self.entries.append(
                    {
                        "kernel": entry.kernel,
                        "shape": entry.shape,
                        "source_hash": entry.source_hash,
                        "config": entry.config,
                    }
                )

    def digest(self) -> str | None:
        """Of the entries applied (None: nothing to apply)."""
        if not self.entries:
            return None
        text = json.dumps([self.environment, self.entries], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def write(self, engine_dir: Path) -> dict:
        """kernel_configs.json in the engine dir (when there are hits); the manifest record."""
        if self.entries:
            data = {"environment": self.environment, "entries": self.entries}
            write_atomically(Path(engine_dir) / ENGINE_FILE, json.dumps(data, indent=1) + "\n")
        record = {
            "cache": str(self.cache_path),
            "status": self.status,
            "num_hits": len(self.entries),
            "num_misses": len(self.missed) if self.status == "looked up" else len(self.items),
            "missed": self.missed[:20],
        }
        log.info(
            "build: kernel tuning cache %s: %s, %d hits, %d misses",
            self.cache_path,
            self.status.split(":")[0],
            record["num_hits"],
            record["num_misses"],
        )
        return record


def for_build(spec: PipelineSpec, checkpoint_dir: Path) -> EngineConfigs | None:
    """The lookup for a torch-engine build on this host, whose GPU is the environment (None:
    another backend, or no GPU here to tune for)."""
    from pipeline.checkpoint.trtllm_config import read_checkpoint_config

    environment = toolchain.environment()
    if spec.backend.name != "torch" or environment["gpu"] == "none":
        return None
    search = spec.tune.kernels
    cfg = read_checkpoint_config(checkpoint_dir, "build")
    shape = model_shape(cfg, spec.build.tokens_per_block, f"build ({checkpoint_dir})")
    items = items_for(shape, search.decode_batch_sizes, search.prompt_tokens)
    return EngineConfigs(Path(search.cache_path), items, environment)
