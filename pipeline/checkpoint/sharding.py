"""Tensor/pipeline-parallel split rules of TensorRT-LLM's Llama converters.

rank = pp_rank * tp_size + tp_rank; layers split contiguously, first pp ranks take the remainder;
each rank file names its layers with local indices (as TensorRT-LLM's converters do).
"""

import torch

from pipeline.errors import ConfigError


def pp_layers(num_layers: int, pp_size: int, pp_rank: int) -> range:
    base, extra = divmod(num_layers, pp_size)
    start = pp_rank * base + min(pp_rank, extra)
    return range(start, start + base + (1 if pp_rank < extra else 0))


def tp_problems(hf_config: dict, tp_size: int) -> list[str]:
    """What stops these weights from being split over tp_size ranks: the attention heads, the KV
    heads (split, or duplicated when fewer than the ranks) and the MLP's intermediate size must
    all split evenly; the vocabulary is padded to a multiple of tp_size, so it never stops it."""
    heads = hf_config["num_attention_heads"]
    kv_heads = hf_config.get("num_key_value_heads") or heads
    inter = hf_config["intermediate_size"]
    problems = []
    if heads % tp_size:
        problems.append(f"num_attention_heads={heads} is not divisible by tp_size={tp_size}")
    if kv_heads % tp_size and tp_size % kv_heads:
        problems.append(
            f"num_key_value_heads={kv_heads} and tp_size={tp_size}: one must divide the other"
        )
    if inter % tp_size:
        problems.append(f"intermediate_size={inter} is not divisible by tp_size={tp_size}")
    return problems


def valid_tp_sizes(hf_config: dict) -> list[int]:
    """Every tp_size these weights split over (a divisor of the attention heads, at most)."""
    heads = hf_config["num_attention_heads"]
    return [t for t in range(1, heads + 1) if not heads % t and not tp_problems(hf_config, t)]


def check_mapping(hf_config: dict, tp_size: int, pp_size: int, where: str) -> None:
    layers = hf_config["num_hidden_layers"]
    problems = []
    if tp_size < 1 or pp_size < 1:
        problems.append(f"tp_size={tp_size}, pp_size={pp_size} must be >= 1")
    elif tp_problems(hf_config, tp_size):
        problems += tp_problems(hf_config, tp_size)
        problems.append(f"valid tp_size: {valid_tp_sizes(hf_config)}")
    if pp_size > layers:
        problems.append(
            f"pp_size={pp_size} exceeds num_hidden_layers={layers} (valid pp_size: 1 to {layers})"
        )
    if problems:
        raise ConfigError(
            f"{where}: cannot shard: {'; '.join(problems)}; set parallel.tp_size / "
            f"parallel.pp_size (TP=/PP= in make)"
        )


def split(t: torch.Tensor, tp_size: int, tp_rank: int, dim: int) -> torch.Tensor:
    return torch.chunk(t, tp_size, dim=dim)[tp_rank].contiguous()


def split_kv(t: torch.Tensor, num_kv_heads: int, tp_size: int, tp_rank: int) -> torch.Tensor:
    """[kv_heads*head, ...] -> this rank's heads (duplicated when heads < ranks)."""
    if num_kv_heads >= tp_size:
        return split(t, tp_size, tp_rank, 0)
    head = t.shape[0] // num_kv_heads
    idx = tp_rank * num_kv_heads // tp_size
    return t[idx * head : (idx + 1) * head].contiguous()


def pad_rows(t: torch.Tensor, multiple: int) -> torch.Tensor:
    """Pad dim 0 with zeros to a multiple (vocab padding for a TP-split lm_head)."""
    rows = -(-t.shape[0] // multiple) * multiple
    if rows == t.shape[0]:
        return t
    return torch.cat([t, t.new_zeros(rows - t.shape[0], *t.shape[1:])])
