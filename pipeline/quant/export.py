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
"""

import json
import logging
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from pipeline.checkpoint.architectures import Architecture
from pipeline.checkpoint.trtllm_config import pretrained_config
from pipeline.errors import StageError

log = logging.getLogger(__name__)

EMBEDDING = "transformer.vocab_embedding.weight"
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


def trtllm_config(
    modelopt_cfg: dict,
    hf_config: dict,
    export_dtype: str,
    tp_size: int,
    pp_size: int,
    has_prequant_scales: bool,
) -> dict:
    quantization = dict(modelopt_cfg["quantization"])
    if "pre_quant_scale" in quantization:
        quantization["pre_quant_scale"] = has_prequant_scales
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
) -> dict:
    """Write config.json + rank<N>.safetensors into out_dir; return the config written."""
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    export_tensorrt_llm_checkpoint(
        model,
        decoder_type=arch.modelopt_decoder,
        dtype=getattr(torch, export_dtype),
        export_dir=out_dir,
        inference_tensor_parallel=tp_size,
        inference_pipeline_parallel=pp_size,
    )
    modelopt_cfg = json.loads((out_dir / "config.json").read_text())
    config = trtllm_config(
        modelopt_cfg, hf_config, export_dtype, tp_size, pp_size, _has_prequant_scales(out_dir)
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
