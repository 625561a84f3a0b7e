"""An adapter's safetensors, checked against the base model and put in the engine's layout.

Per engine linear (the fused qkv and gate_up, dense, proj) and part (q, k, v; gate, up): A
[r, in] and B [out, r] with the scale folded into B, split over tensor-parallel ranks as their
base linears are: column-parallel (qkv, gate_up) split B on out (KV heads fewer than the ranks
are duplicated, as convert does), row-parallel (dense, proj) split A on in, whose partial
products the base linear's all-reduce sums with its own.
"""

from dataclasses import dataclass

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from pipeline.checkpoint.sharding import split, split_kv
from pipeline.engine.engine_config import ModelConfig
from pipeline.engine.parallel.mapping import Mapping
from pipeline.errors import ArtifactError, ConfigError
from pipeline.lora.adapters import WEIGHT_KEY, AdapterInfo

# engine linear -> its parts' HF modules, in output order
LINEAR_PARTS = {
    "qkv": ("q_proj", "k_proj", "v_proj"),
    "dense": ("o_proj",),
    "gate_up": ("gate_proj", "up_proj"),
    "proj": ("down_proj",),
}
PART_OF = {m: (linear, i) for linear, parts in LINEAR_PARTS.items() for i, m in enumerate(parts)}
ROW_PARALLEL = ("dense", "proj")


def full_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """(out, in) of each HF module before any split."""
    hidden, d = cfg.hidden_size, cfg.head_dim
    q, kv, inter = cfg.num_heads * d, cfg.num_kv_heads * d, cfg.intermediate_size
    return {
        "q_proj": (q, hidden),
        "k_proj": (kv, hidden),
        "v_proj": (kv, hidden),
        "o_proj": (hidden, q),
        "gate_proj": (inter, hidden),
        "up_proj": (inter, hidden),
        "down_proj": (hidden, inter),
    }


@dataclass(slots=True)
class AdapterWeights:
    """One adapter on this rank, on the host: layers[i][linear] = [(part, A, B), ...] for the
    stage's local layer i (A [r, in_local], B [out_local, r] scaled, in the engine's dtype)."""

    info: AdapterInfo
    layers: list[dict[str, list[tuple[int, torch.Tensor, torch.Tensor]]]]

    @property
    def nbytes(self) -> int:
        return sum(
            a.nbytes + b.nbytes
            for layer in self.layers
            for parts in layer.values()
            for _, a, b in parts
        )


def _read(info: AdapterInfo) -> dict[str, torch.Tensor]:
    try:
        return load_file(info.weights_path)
    except (SafetensorError, OSError) as exc:
        raise ArtifactError(
            f"lora adapter {info.name!r}: {info.weights_path} unreadable ({exc}); save the "
            f"adapter again with peft's save_pretrained"
        ) from exc


def _pairs(
    info: AdapterInfo, tensors: dict[str, torch.Tensor], cfg: ModelConfig, targets: tuple[str, ...]
) -> dict[tuple[int, str], dict[str, torch.Tensor]]:
    """(layer, module) -> {"A": ..., "B": ...}, every key and shape checked against the base."""
    where = f"lora adapter {info.name!r} ({info.path})"
    shapes = full_shapes(cfg)
    pairs: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        match = WEIGHT_KEY.match(key)
        if match is None:
            raise ConfigError(
                f"{where}: weight {key!r} is not a LoRA A/B of a decoder layer's linear; the "
                f"engine adapts {', '.join(shapes)} only: train the adapter on those modules"
            )
        layer, module, side = int(match[1]), match[2], match[3]
        if module not in shapes:
            raise ConfigError(f"{where}: module {module!r} ({key}) is not one of {list(shapes)}")
        if module not in targets:
            raise ConfigError(
                f"{where}: adapts {module} ({key}), outside lora.target_modules="
                f"{list(targets)}; add it to lora.target_modules or retrain without it"
            )
        if layer >= cfg.num_layers:
            raise ConfigError(
                f"{where}: {key}: layer {layer} but the base model has {cfg.num_layers} layers"
            )
        out, inp = shapes[module]
        want = (info.rank, inp) if side == "A" else (out, info.rank)
        if tuple(tensor.shape) != want:
            raise ConfigError(
                f"{where}: {key} has shape {list(tensor.shape)}, not {list(want)} (rank "
                f"r={info.rank} of the base's {module} [{out}, {inp}]); the adapter was "
                f"trained for another base model or its adapter_config.json's r is wrong"
            )
        pairs.setdefault((layer, module), {})[side] = tensor
    for (layer, module), pair in pairs.items():
        if len(pair) != 2:
            raise ConfigError(f"{where}: layer {layer} {module} has lora_{''.join(pair)} only")
    return pairs


def load_adapter(
    info: AdapterInfo,
    cfg: ModelConfig,
    mapping: Mapping,
    dtype: torch.dtype,
    targets: tuple[str, ...],
) -> AdapterWeights:
    """Read, check and convert an adapter for this rank's layers and shards."""
    pairs = _pairs(info, _read(info), cfg, targets)
    tp, rank = mapping.tp_size, mapping.tp_rank
    layers = []
    for layer in mapping.layers(cfg.num_layers):
        linears: dict[str, list] = {}
        for module in targets:
            pair = pairs.get((layer, module))
            if pair is None:
                continue
            linear, part = PART_OF[module]
            a, b = pair["A"].float(), pair["B"].float() * info.scale
            if linear in ROW_PARALLEL:
                a = split(a, tp, rank, 1)
            elif module in ("k_proj", "v_proj"):
                b = split_kv(b, cfg.num_kv_heads, tp, rank)
            else:
                b = split(b, tp, rank, 0)
            linears.setdefault(linear, []).append((part, a.to(dtype), b.to(dtype)))
        layers.append(linears)
    return AdapterWeights(info, layers)
