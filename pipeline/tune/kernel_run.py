"""`tune` on the kernel space: every Triton kernel the built engine runs, per shape class, that
the tuning cache does not answer yet, tuned on this GPU and recorded in the cache."""

import logging
from pathlib import Path

from pipeline.engine.kernels import toolchain
from pipeline.engine.kernels.tuned_configs import TUNED
from pipeline.engine_json import EngineJson
from pipeline.specs.tune import TuneSpec
from pipeline.tune.engine_configs import model_shape
from pipeline.tune.kernel_items import items_for, select
from pipeline.tune.kernel_tuning import tune_items
from pipeline.tune.tuning_cache import TuningCache

log = logging.getLogger(__name__)
UNIT = "ms per launch (CUDA events over a CUDA graph)"


def engine_items(engine_dir: Path, search) -> list:
    """The (kernel, shape class) items of the engine built in engine_dir."""
    engine = EngineJson.read(engine_dir)
    block_size = engine.plugin["tokens_per_block"]
    shape = model_shape(engine.pretrained, block_size, f"tune ({engine_dir})")
    items = items_for(shape, search.decode_batch_sizes, search.prompt_tokens)
    return select(items, search.kernels)


def tune_kernels(tune: TuneSpec, engine_dir: Path, force: bool = False) -> dict:
    """force: start a fresh tuning cache instead of reusing the stored one."""
    import torch

    from pipeline.tune.kernel_space import KernelSpace
    from pipeline.tune.kernel_timer import KernelTimer

    search = tune.kernels
    TUNED.install({})  # the kernels' own defaults are what every candidate is compared with
    items = engine_items(engine_dir, search)
    environment = toolchain.environment()
    cache = TuningCache.open(Path(search.cache_path), environment, replace=force)
    device = torch.device("cuda", torch.cuda.current_device())
    timer = KernelTimer(device, search.launches_per_sample, search.flush_l2)
    results = tune_items(
        items,
        cache,
        lambda item: KernelSpace(item, device, search, timer),
        tune.anneal,
        search.strategy,
    )
    rows = [r.to_dict() for r in results]
    num_cached = sum(bool(r.get("cached")) for r in rows)
    sections = {
        "Tuning cache": f"`{cache.path}`: {num_cached} of {len(rows)} items from the cache, "
        f"{len(rows) - num_cached} tuned now ({search.strategy}). Environment: "
        + ", ".join(f"{k} {v}" for k, v in environment.items())
        + ". The next `make build` on this GPU puts the entries into the engine dir; its "
        "manifest's `kernel_tuning` records the hits and misses.",
    }
    return {"items": rows, "unit": UNIT, "sections": sections, "environment": environment}
