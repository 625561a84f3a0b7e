"""Shape checks made before modelopt runs, so a bad block size never crashes deep inside it.

modelopt's fake quantization pads a partial block, but both of its exporters refuse one
("Cannot pack weight with input dimension 576 and block size 128"), and its TP split needs each
rank's slice of in_features to hold whole blocks. Its pipeline split needs equal layer counts.
TensorRT-LLM's weight-only layers pad their features to a multiple the checkpoint must already
meet (check_trtllm_padding).
"""

import math
import re
from pathlib import Path

from safetensors import SafetensorError, safe_open

from pipeline.errors import ArtifactError, ConfigError

DECODER_LINEAR = re.compile(r"^model\.layers\.\d+\..*\.weight$")
# TensorRT-LLM's row-parallel linears (attention.dense, mlp.proj): TP splits their in_features
ROW_PARALLEL = ("o_proj.weight", "down_proj.weight")
MIN_USEFUL_BLOCK_SIZE = 16  # smaller groups cost more in scales than int4 saves


def decoder_linear_shapes(hf_dir: Path) -> dict[str, tuple[int, int]]:
    """{HF weight name: (out_features, in_features)} of the decoder's linears (quantized ones).

    Read from safetensors headers only: 2-D weights under model.layers.N (norms are 1-D; the
    embedding and lm_head, which no recipe quantizes, live outside the layers).
    """
    shapes = {}
    for path in sorted(Path(hf_dir).glob("*.safetensors")):
        try:
            with safe_open(path, "pt") as f:
                for name in f.keys():
                    if DECODER_LINEAR.match(name):
                        shape = f.get_slice(name).get_shape()
                        if len(shape) == 2:
                            shapes[name] = (shape[0], shape[1])
        except (SafetensorError, OSError) as exc:
            raise ArtifactError(
                f"{path}: unreadable ({exc}); re-run fetch with force=true"
            ) from exc
    if not shapes:
        raise ArtifactError(
            f"{hf_dir}: no decoder linear weights (model.layers.N.*.weight); "
            f"not a Llama-family HF checkpoint"
        )
    return shapes


def per_rank_in_features(shapes: dict[str, tuple[int, int]], tp_size: int) -> dict[str, int]:
    return {
        name: in_f // tp_size if name.endswith(ROW_PARALLEL) else in_f
        for name, (_, in_f) in shapes.items()
    }


def _working_block_size(widths: list[int], block_size: int) -> int:
    """Largest power of two <= block_size that divides every width."""
    common = math.gcd(*widths)
    size = 1
    while size * 2 <= block_size and common % (size * 2) == 0:
        size *= 2
    return size


def check_block_size(
    shapes: dict[str, tuple[int, int]], block_size: int, tp_size: int, recipe: str, is_fixed: bool
) -> None:
    in_features = per_rank_in_features(shapes, tp_size)
    bad = {name: width for name, width in in_features.items() if width % block_size}
    if not bad:
        return
    name, width = next(iter(bad.items()))
    layer = name.removesuffix(".weight")
    per_rank = f" per TP rank (tp_size={tp_size})" if tp_size > 1 else ""
    head = (
        f"quantize: {recipe} needs in_features % block_size == 0 for every quantized layer; "
        f"{layer} has in_features {width}{per_rank} with block size {block_size} "
        f"({len(bad)} layers affected)"
    )
    if is_fixed:
        raise ConfigError(
            f"{head}; the block size is fixed by the {recipe} format, so this "
            f"model cannot use it: pick another recipe (quant=fp8, int8_sq, ...)"
        )
    working = _working_block_size(list(in_features.values()), block_size)
    if working < MIN_USEFUL_BLOCK_SIZE:
        raise ConfigError(
            f"{head}; no block size >= {MIN_USEFUL_BLOCK_SIZE} divides every "
            f"layer{per_rank}: change parallel.tp_size or use a recipe without "
            f"groups (quant=int8_wo, int8_sq, fp8)"
        )
    raise ConfigError(
        f"{head}; set quant.block_size={working} (divides every quantized layer)"
        + (" or change parallel.tp_size" if tp_size > 1 else "")
    )


def check_pipeline_split(num_layers: int, pp_size: int) -> None:
    if num_layers % pp_size:
        valid = [p for p in range(1, num_layers + 1) if num_layers % p == 0]
        raise ConfigError(
            f"quantize: modelopt's export splits layers evenly; num_hidden_layers="
            f"{num_layers} is not divisible by parallel.pp_size={pp_size}; use one "
            f"of {valid}"
        )


# TensorRT-LLM 1.x weight-only layers round in/out features up to a multiple of this x tp_size
# (WeightOnlyQuantLinear: 64; WeightOnlyGroupwiseQuantLinear: max(64, group), W4A8: max(128,
# group)) and then load the checkpoint with an exact shape check, which unpadded tensors fail
# (docs/trtllm_reference.md, section 3.5)
def trtllm_padding_multiple(quant_algo: str, group_size: int | None) -> int | None:
    if quant_algo in ("W8A16", "W4A16"):
        return 64
    if quant_algo == "W4A16_AWQ":
        return max(64, group_size or 0)
    if quant_algo == "W4A8_AWQ":
        return max(128, group_size or 0)
    return None


def trtllm_linear_features(hf_config: dict, tp_size: int) -> dict[str, tuple[int, int]]:
    """{TensorRT-LLM linear: (in_features, out_features)} as its layers are built (whole model)."""
    hidden, heads = hf_config["hidden_size"], hf_config["num_attention_heads"]
    kv_heads = hf_config.get("num_key_value_heads") or heads
    head = hf_config.get("head_dim") or hidden // heads
    inter = hf_config["intermediate_size"]
    return {  # KV heads are repeated up to tp_size when fewer
        "attention.qkv": (hidden, (heads + 2 * max(kv_heads, tp_size)) * head),
        "attention.dense": (heads * head, hidden),
        "mlp.fc": (hidden, inter),
        "mlp.gate": (hidden, inter),
        "mlp.proj": (inter, hidden),
    }


def check_trtllm_padding(
    hf_config: dict, quant_algo: str, group_size: int | None, tp_size: int, recipe: str
) -> None:
    multiple = trtllm_padding_multiple(quant_algo, group_size)
    if multiple is None:
        return
    step = multiple * tp_size
    bad = [
        f"{name} {kind} {size}"
        for name, features in trtllm_linear_features(hf_config, tp_size).items()
        for kind, size in zip(("in_features", "out_features"), features, strict=True)
        if size % step
    ]
    if bad:
        raise ConfigError(
            f"quantize: backend=trtllm, quant={recipe}: TensorRT-LLM's {quant_algo} layers pad "
            f"their features to a multiple of {multiple} x tp_size = {step} and then refuse the "
            f"checkpoint's unpadded tensors; this model has {', '.join(bad)}; use another "
            f"recipe (fp8, int8_sq, nvfp4) or another parallel.tp_size"
        )
