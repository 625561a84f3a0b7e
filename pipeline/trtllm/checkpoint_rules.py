"""Preflight rules that need the checkpoint's config.json or the target GPU.

Facts: docs/trtllm_reference.md, sections 1.2 (mapping, MODEL_MAP), 2.1 (max_seq_len), 2.3 and
3.2 (precision vs GPU); the list of rules is section 8.

Both are skipped while unknown: the checkpoint before convert/quantize ran, the GPU for
hardware=cpu (or auto without CUDA).
"""

from pipeline.trtllm.facts import BuildFacts

# keys of tensorrt_llm.models.MODEL_MAP for decoder LLMs (1.x)
MODEL_MAP_ARCHITECTURES = frozenset(
    (
        "GPTForCausalLM",
        "GPT2LMHeadModel",
        "GPTBigCodeForCausalLM",
        "Starcoder2ForCausalLM",
        "OPTForCausalLM",
        "BloomForCausalLM",
        "RWForCausalLM",
        "FalconForCausalLM",
        "PhiForCausalLM",
        "Phi3ForCausalLM",
        "Phi3SmallForCausalLM",
        "PhiMoEForCausalLM",
        "MambaForCausalLM",
        "GPTNeoXForCausalLM",
        "GPTJForCausalLM",
        "MptForCausalLM",
        "MPTForCausalLM",
        "ChatGLMForCausalLM",
        "GLMModel",
        "ChatGLMModel",
        "LlamaForCausalLM",
        "ExaoneForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "ArcticForCausalLM",
        "Grok1ModelForCausalLM",
        "InternLMForCausalLM",
        "InternLM2ForCausalLM",
        "GraniteForCausalLM",
        "GraniteMoeForCausalLM",
        "MedusaForCausalLM",
        "BaichuanForCausalLM",
        "SkyworkForCausalLM",
        "GemmaForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "QWenForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "DbrxForCausalLM",
        "RecurrentGemmaForCausalLM",
        "DeepseekForCausalLM",
        "DeepseekV2ForCausalLM",
    )
)
# rope types whose scaling factor trtllm-build does not apply when deriving max_seq_len
UNSCALED_ROPE_TYPES = ("su", "longrope", "llama3")

FP8_ALGOS = frozenset(("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_BLOCK_SCALES", "W4A8_AWQ"))
FP4_ALGOS = frozenset(
    ("NVFP4", "W4A8_NVFP4_FP8", "W4A8_MXFP4_FP8", "W4A8_MXFP4_MXFP8", "W4A16_MXFP4")
)
# builder.py raises for these on SM 100-119: INT8/INT4 weight-only, SmoothQuant, per-channel/token
NOT_ON_SM100_ALGOS = frozenset(
    (
        "W8A16",
        "W4A16",
        "W4A16_AWQ",
        "W4A16_GPTQ",
        "W8A16_GPTQ",
        "W8A8_SQ_PER_CHANNEL",
        "W8A8_SQ_PER_TENSOR_PLUGIN",
        "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN",
        "W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN",
        "W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN",
        "FP8_PER_CHANNEL_PER_TOKEN",
    )
)
REBUILD = "re-run convert/quantize with matching parallel.tp_size/pp_size and force=true"


def checkpoint(f: BuildFacts) -> list[str]:
    if f.checkpoint is None:
        return []
    cfg, where = f.checkpoint, f"checkpoint {f.checkpoint_dir}/config.json"
    m = cfg.get("mapping") or {}
    tp, pp, cp = int(m.get("tp_size", 1)), int(m.get("pp_size", 1)), int(m.get("cp_size", 1))
    world = int(m.get("world_size", tp * pp * cp))
    out = []
    if world != tp * pp * cp:
        out.append(
            f"{where}: mapping.world_size={world} != tp_size*pp_size*cp_size="
            f"{tp}*{pp}*{cp}; {REBUILD}"
        )
    moe = [
        int(m.get(k, d))
        for k, d in (("moe_tp_size", tp), ("moe_ep_size", 1), ("moe_cluster_size", 1))
    ]
    if moe[0] * moe[1] * moe[2] != tp:
        out.append(
            f"{where}: moe_tp_size*moe_ep_size*moe_cluster_size={moe[0]}*{moe[1]}*{moe[2]} "
            f"!= tp_size={tp}; {REBUILD}"
        )
    layers = cfg.get("num_hidden_layers")
    if isinstance(layers, int) and pp > layers:
        out.append(
            f"{where}: mapping.pp_size={pp} exceeds num_hidden_layers={layers}; lower "
            f"parallel.pp_size"
        )
    missing = [
        f"rank{r}.safetensors"
        for r in range(world)
        if not (f.checkpoint_dir / f"rank{r}.safetensors").is_file()
    ]
    if missing:
        out.append(f"{where}: {', '.join(missing)} missing for world_size={world}; {REBUILD}")
    arch = cfg.get("architecture")
    if arch not in MODEL_MAP_ARCHITECTURES:
        out.append(
            f"{where}: architecture={arch!r} is not a TensorRT-LLM MODEL_MAP key; use a "
            f"supported model (e.g. LlamaForCausalLM)"
        )
    return out + _max_seq_len(f)


def _max_seq_len(f: BuildFacts) -> list[str]:
    positions = f.checkpoint.get("max_position_embeddings")
    if not isinstance(positions, int):
        return []
    scaling = f.checkpoint.get("rotary_scaling") or {}
    kind = scaling.get("type", scaling.get("rope_type"))
    factor = 1.0 if kind in UNSCALED_ROPE_TYPES else float(scaling.get("factor", 1.0))
    limit = int(positions * factor)
    if f.build.max_seq_len > limit:
        return [
            f"build.max_seq_len={f.build.max_seq_len}: beyond the model's trained context "
            f"(max_position_embeddings*rope factor={limit}), outputs degrade there; set "
            f"build.max_seq_len<={limit}"
        ]
    return []


def precision(f: BuildFacts) -> list[str]:
    if f.sm is None:
        return []
    sm, out = f.sm, []
    weight, kv = f.quant_algo, f.kv_cache_quant_algo
    fix = "pick another quant / quant.kv_cache or build for another GPU (hardware=...)"
    if weight in FP8_ALGOS and sm < 89:
        out.append(
            f"quant_algo={weight}: FP8 needs SM >= 89 (Ada/Hopper/Blackwell), the target "
            f"GPU is SM {sm}; {fix}"
        )
    if kv == "FP8" and sm < 89:
        out.append(
            f"kv_cache_quant_algo=FP8: an FP8 KV cache needs SM >= 89, the target GPU is "
            f"SM {sm}; {fix}"
        )
    if (weight in FP4_ALGOS or kv == "NVFP4") and sm < 100:
        out.append(
            f"quant_algo={weight}, kv_cache_quant_algo={kv}: FP4 needs SM >= 100 "
            f"(Blackwell), the target GPU is SM {sm}; {fix}"
        )
    if 100 <= sm <= 119 and (weight in NOT_ON_SM100_ALGOS or kv == "INT8"):
        out.append(
            f"quant_algo={weight}, kv_cache_quant_algo={kv}: TensorRT-LLM rejects INT8/INT4 "
            f"weight-only, SmoothQuant, per-channel/per-token scaling and INT8 KV on SM "
            f"100-119 (target SM {sm}); {fix}"
        )
    if f.dtype == "bfloat16" and sm < 80:
        out.append(
            f"model.dtype=bfloat16: needs SM >= 80 (Ampere+), the target GPU is SM {sm}; "
            f"use model.dtype=float16"
        )
    return out
