"""How many KV blocks a rank's memory holds: on the GPU, a fraction of what is free after the
weights and the peak activations of a full-budget step (measured by running one); on the CPU,
enough for every sequence at its longest, capped by the host's available memory
(host_kv_budget.py)."""

import math
from collections.abc import Callable

import torch
from torch import nn

from pipeline.engine.engine_config import EngineConfig
from pipeline.engine.execution.host_kv_budget import cpu_num_kv_blocks
from pipeline.engine.layers.batch_metadata import BatchMetadata
from pipeline.errors import ConfigError

KVShape = Callable[[int], tuple[int, ...]]  # blocks -> the cache's shape


def default_num_kv_blocks(
    model: nn.Module,
    kv_shape: KVShape,
    kv_dtype: torch.dtype,
    device: torch.device,
    config: EngineConfig,
) -> int:
    block_size = config.block_size
    if device.type != "cuda":
        return cpu_num_kv_blocks(
            math.prod(kv_shape(1)) * kv_dtype.itemsize,
            config.max_batch_size,
            config.max_blocks_per_seq,
            config.model.tp_size * config.model.pp_size,  # every rank of a CPU engine is here
            config.kv_cache_free_mem_fraction,
        )
    peak_step_bytes = profile_step_bytes(
        model,
        kv_shape,
        kv_dtype,
        device,
        block_size,
        config.max_num_tokens,
        config.max_seq_len,
        config.max_batch_size,
    )
    free_bytes, _ = torch.cuda.mem_get_info(device)
    usable = (free_bytes - peak_step_bytes) * config.kv_cache_free_mem_fraction
    num_blocks = int(usable // (math.prod(kv_shape(1)) * kv_dtype.itemsize))
    if num_blocks < 1:
        raise ConfigError(
            f"engine: no GPU memory left for the KV cache "
            f"({free_bytes / 2**30:.1f} GiB free, a step needs "
            f"{peak_step_bytes / 2**30:.1f} GiB); lower max_num_tokens or set "
            f"num_kv_blocks"
        )
    return num_blocks


@torch.inference_mode()
def profile_step_bytes(
    model: nn.Module,
    kv_shape: KVShape,
    kv_dtype: torch.dtype,
    device: torch.device,
    block_size: int,
    num_tokens: int,
    max_seq_len: int,
    num_sampled: int,
) -> int:
    """Peak activation memory of one step over (at least) num_tokens prompt tokens (through
    this stage's layers; its tensor-parallel peers run the same step)."""
    seq_len = min(num_tokens, max_seq_len)
    num_seqs = -(-num_tokens // seq_len)
    num_blocks = num_seqs * -(-seq_len // block_size)
    cache = torch.zeros(kv_shape(num_blocks), dtype=kv_dtype, device=device)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    meta = BatchMetadata.for_prompts(num_seqs, seq_len, block_size, device)
    hidden = model(model.stage_inputs(num_seqs * seq_len, device), meta, cache)
    if model.is_last_stage:
        model.compute_logits(hidden[-num_sampled:])
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del cache, hidden
    torch.cuda.empty_cache()
    return peak
