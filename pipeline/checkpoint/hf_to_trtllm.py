"""Unquantized HF Llama-family weights -> TensorRT-LLM rank files, streamed one rank at a time.

Written here rather than with modelopt's export_tensorrt_llm_checkpoint because (modelopt 0.47)
that export casts float32 to float16, needs the whole model materialized, and splits a fused qkv
in halves when heads do not divide tp instead of refusing. Quantized checkpoints do use modelopt.
"""

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm import tqdm

from pipeline.checkpoint.hf_reader import HFCheckpoint
from pipeline.checkpoint.sharding import check_mapping, pad_rows, pp_layers, split, split_kv
from pipeline.checkpoint.trtllm_config import DTYPES, pretrained_config
from pipeline.errors import ConfigError


def _layer_tensors(
    ckpt: HFCheckpoint, cfg: dict, layer: int, local: int, tp: int, rank: int, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    src, dst = f"model.layers.{layer}.", f"transformer.layers.{local}."
    kv_heads = cfg["num_key_value_heads"]
    get = lambda name: ckpt.get(src + name).to(dtype)  # noqa: E731
    out = {}
    for suffix in ("weight", "bias"):
        if not ckpt.has(f"{src}self_attn.q_proj.{suffix}"):
            continue
        q = split(get(f"self_attn.q_proj.{suffix}"), tp, rank, 0)
        k = split_kv(get(f"self_attn.k_proj.{suffix}"), kv_heads, tp, rank)
        v = split_kv(get(f"self_attn.v_proj.{suffix}"), kv_heads, tp, rank)
        out[f"{dst}attention.qkv.{suffix}"] = torch.cat([q, k, v])
    out[f"{dst}attention.dense.weight"] = split(get("self_attn.o_proj.weight"), tp, rank, 1)
    # TensorRT-LLM names: mlp.fc <- gate_proj, mlp.gate <- up_proj, mlp.proj <- down_proj
    out[f"{dst}mlp.fc.weight"] = split(get("mlp.gate_proj.weight"), tp, rank, 0)
    out[f"{dst}mlp.gate.weight"] = split(get("mlp.up_proj.weight"), tp, rank, 0)
    out[f"{dst}mlp.proj.weight"] = split(get("mlp.down_proj.weight"), tp, rank, 1)
    out[f"{dst}input_layernorm.weight"] = get("input_layernorm.weight")
    out[f"{dst}post_layernorm.weight"] = get("post_attention_layernorm.weight")
    for name in ("o_proj", "gate_proj", "up_proj", "down_proj"):
        if ckpt.has(f"{src}self_attn.{name}.bias") or ckpt.has(f"{src}mlp.{name}.bias"):
            raise ConfigError(
                f"convert: {src}{name}.bias: biases on {name} are not supported "
                f"(only qkv bias, as in Qwen2)"
            )
    return out


def rank_tensors(ckpt: HFCheckpoint, cfg: dict, rank: int, dtype: torch.dtype) -> dict:
    tp, pp = cfg["mapping"]["tp_size"], cfg["mapping"]["pp_size"]
    tp_rank, pp_rank = rank % tp, rank // tp
    layers = pp_layers(cfg["num_hidden_layers"], pp, pp_rank)
    tensors = {}
    embed = ckpt.get("model.embed_tokens.weight").to(dtype)
    if pp_rank == 0:
        tensors["transformer.vocab_embedding.weight"] = embed
    for local, layer in enumerate(layers):
        tensors.update(_layer_tensors(ckpt, cfg, layer, local, tp, tp_rank, dtype))
    if pp_rank == pp - 1:
        tensors["transformer.ln_f.weight"] = ckpt.get("model.norm.weight").to(dtype)
        # tied embeddings: a TensorRT-LLM checkpoint still needs lm_head written explicitly
        head = ckpt.get("lm_head.weight").to(dtype) if ckpt.has("lm_head.weight") else embed.clone()
        tensors["lm_head.weight"] = split(pad_rows(head, tp), tp, tp_rank, 0)
    return tensors


def convert(hf_dir: Path, out_dir: Path, dtype: str, tp_size: int, pp_size: int) -> dict:
    if dtype not in DTYPES:
        raise ConfigError(f"convert: model.dtype={dtype!r} is not supported; use one of {DTYPES}")
    ckpt = HFCheckpoint(hf_dir)
    check_mapping(ckpt.config, tp_size, pp_size, "convert")
    cfg = pretrained_config(ckpt.config, dtype, tp_size, pp_size)
    torch_dtype = getattr(torch, dtype)
    for rank in tqdm(range(tp_size * pp_size), desc="convert: ranks", unit="rank"):
        tensors = rank_tensors(ckpt, cfg, rank, torch_dtype)
        save_file(tensors, out_dir / f"rank{rank}.safetensors", metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    return cfg
