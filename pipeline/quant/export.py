"""Quantized model -> TensorRT-LLM checkpoint (modelopt's exporter), made to match convert's.

modelopt 0.47 writes its own config.json ("manual approach" without tensorrt_llm). Where it
differs from what our convert stage writes for the same model, convert wins:
- no `rotary_base` (TensorRT-LLM would use 10000; SmolLM2 needs 100000), no `rotary_scaling`,
  `tie_word_embeddings`, `attn_bias`, `mlp_bias`;
- `logits_dtype` float16 (ours: float32);
- `use_parallel_embedding: true` with the vocab embedding split over TP ranks: we put the full
  table back on every rank, as convert does, so both checkpoints load the same way;
- a `rank` key (the last rank written) and Model-Optimizer-only keys (`decoder`, `rmsnorm`, ...).
Its `quantization` block is kept, except `pre_quant_scale`, which is made to say whether
`prequant_scaling_factor` tensors exist (int4_wo exports none but claims true).

Weight-only for trtllm-build (build_quant_algo W8A16 / W4A16) exports the linears in floating
point, as TensorRT-LLM's own modelopt flow does for int8_wo / int4_wo: the weight quantizers are
switched off for the export only (KV-cache scales are still written) and the block is labelled
with the build's quant_algo; its loader quantizes every such weight that is not int8 yet
(docs/trtllm_reference.md, section 3.4).
"""

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from pipeline.checkpoint.architectures import Architecture
from pipeline.checkpoint.trtllm_config import pretrained_config
from pipeline.errors import StageError

log = logging.getLogger(__name__)

EMBEDDING = "transformer.vocab_embedding.weight"
# what TensorRT-LLM's weight_only_quantize_dict quantizes at build time (names containing these)
BUILD_QUANTIZED_WEIGHTS = ("qkv.weight", "dense.weight", "fc.weight", "proj.weight", "gate.weight")
FLOAT_DTYPES = ("F16", "BF16", "F32")
# structural fields both writers must agree on, or the tensors do not mean what config.json says
MUST_AGREE = (
    "architecture",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "intermediate_size",
    "head_size",
    "hidden_act",
    "dtype",
)


def _has_prequant_scales(out_dir: Path) -> bool:
    with safe_open(out_dir / "rank0.safetensors", "pt") as f:
        return any(name.endswith("prequant_scaling_factor") for name in f.keys())


def _restore_full_embedding(out_dir: Path, tp_size: int) -> None:
    """Replace each pp-rank-0 file's vocab-embedding shard by the whole (row-concatenated) table."""
    shards = [load_file(out_dir / f"rank{r}.safetensors")[EMBEDDING] for r in range(tp_size)]
    full = torch.cat(shards)  # [vocab, hidden]
    for rank in range(tp_size):
        path = out_dir / f"rank{rank}.safetensors"
        tensors = load_file(path)
        tensors[EMBEDDING] = full
        save_file(tensors, path, metadata={"format": "pt"})


@contextmanager
def _float_weights(model: torch.nn.Module) -> Iterator[None]:
    """Weight quantizers off (the export then writes float weights), restored afterwards."""
    from modelopt.torch.quantization.nn import TensorQuantizer

    switched = [
        q
        for name, q in model.named_modules()
        if name.endswith("weight_quantizer") and isinstance(q, TensorQuantizer) and q.is_enabled
    ]
    for quantizer in switched:
        quantizer.disable()
    try:
        yield
    finally:
        for quantizer in switched:
            quantizer.enable()


def _check_float_linears(out_dir: Path, world_size: int, quant_algo: str) -> None:
    """Every linear weight a W8A16/W4A16 build quantizes must still be floating point."""
    bad = []
    for rank in range(world_size):
        with safe_open(out_dir / f"rank{rank}.safetensors", "pt") as f:
            for name in f.keys():
                dtype = f.get_slice(name).get_dtype()
                is_linear = any(p in name for p in BUILD_QUANTIZED_WEIGHTS)
                is_weight_scale = "scaling_factor" in name and "cache_scaling_factor" not in name
                if (is_linear and dtype not in FLOAT_DTYPES) or is_weight_scale:
                    bad.append(f"rank{rank}: {name} ({dtype})")
    if bad:
        raise StageError(
            f"quantize: a {quant_algo} checkpoint for trtllm-build needs float linear weights "
            f"(the build quantizes them), but modelopt wrote {', '.join(bad[:4])}; report this "
            f"with the modelopt version"
        )


def trtllm_config(
    modelopt_cfg: dict,
    hf_config: dict,
    export_dtype: str,
    tp_size: int,
    pp_size: int,
    has_prequant_scales: bool,
    build_quant_algo: str | None = None,
) -> dict:
    quantization = dict(modelopt_cfg["quantization"])
    if "pre_quant_scale" in quantization:
        quantization["pre_quant_scale"] = has_prequant_scales
    if build_quant_algo is not None:
        # exclude_modules stays unset: the loader's default keeps lm_head and the embedding
        # float, where a list would replace it (and want an int8 embedding table)
        quantization = {
            "quant_algo": build_quant_algo,
            "kv_cache_quant_algo": quantization.get("kv_cache_quant_algo"),
        }
    config = pretrained_config(hf_config, export_dtype, tp_size, pp_size, quantization)
    differing = [
        f"{k}: modelopt {modelopt_cfg.get(k)!r} vs convert {config[k]!r}"
        for k in MUST_AGREE
        if modelopt_cfg.get(k) != config[k]
    ]
    if differing:
        raise StageError(
            f"quantize: modelopt's export disagrees with convert on "
            f"{'; '.join(differing)}; the checkpoint would be mislabelled (report "
            f"this with the model's config.json)"
        )
    # modelopt pads the vocabulary for int4 when it is not a multiple of 64: its tensors decide
    config["vocab_size"] = modelopt_cfg["vocab_size"]
    config["producer"] = modelopt_cfg["producer"]
    return config


def export_trtllm(
    model: torch.nn.Module,
    arch: Architecture,
    hf_config: dict,
    export_dtype: str,
    tp_size: int,
    pp_size: int,
    out_dir: Path,
    build_quant_algo: str | None = None,
) -> dict:
    """Write config.json + rank<N>.safetensors into out_dir; return the config written.

    build_quant_algo (W8A16 / W4A16): float linear weights that trtllm-build quantizes.
    """
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    with _float_weights(model) if build_quant_algo else nullcontext():
        export_tensorrt_llm_checkpoint(
            model,
            decoder_type=arch.modelopt_decoder,
            dtype=getattr(torch, export_dtype),
            export_dir=out_dir,
            inference_tensor_parallel=tp_size,
            inference_pipeline_parallel=pp_size,
        )
    if build_quant_algo:
        _check_float_linears(out_dir, tp_size * pp_size, build_quant_algo)
    modelopt_cfg = json.loads((out_dir / "config.json").read_text())
    config = trtllm_config(
        modelopt_cfg,
        hf_config,
        export_dtype,
        tp_size,
        pp_size,
        _has_prequant_scales(out_dir),
        build_quant_algo,
    )
    if tp_size > 1 and modelopt_cfg.get("use_parallel_embedding"):
        _restore_full_embedding(out_dir, tp_size)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return config


def export_hf(model: torch.nn.Module, export_dtype: str, out_dir: Path) -> None:
    """modelopt's unified HF checkpoint (TensorRT-LLM's PyTorch flow, vLLM, SGLang read it).

    Give it a model no other exporter has touched: both edit the model in place.
    """
    from modelopt.torch.export import export_hf_checkpoint

    export_hf_checkpoint(model, dtype=getattr(torch, export_dtype), export_dir=out_dir)
