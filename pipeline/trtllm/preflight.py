"""Every build invariant (docs/trtllm_reference.md, section 8), checked before any work.

All violations are reported at once.

Each rule returns messages "<config key>=<value>: <what is wrong>; <how to fix>". Rules that need
the checkpoint or the GPU (checkpoint_rules) run once those are known and are skipped before.
"""

from pipeline.errors import ConfigError
from pipeline.trtllm import checkpoint_rules, draft_target, memory_settings
from pipeline.trtllm.build_command import FEATURE_FLAGS
from pipeline.trtllm.facts import BuildFacts

PLUGIN_DTYPES = ("auto", "float16", "float32", "bfloat16", "int32", "disable")
GEMM_PLUGIN_DTYPES = (*PLUGIN_DTYPES, "fp8", "nvfp4")
FEATURE_VALUES = ("enable", "disable")
KV_CACHE_TYPES = ("paged", "continuous", "disabled")
LOG_LEVELS = ("internal_error", "error", "warning", "info", "verbose", "debug", "trace")
SPECULATIVE_MODES = (
    "draft_tokens_external",
    "lookahead_decoding",
    "medusa",
    "explicit_draft_tokens",
    "eagle",
)
# modes whose engines the deployed tensorrt_llm model could not run: their decoding_mode,
# medusa_choices / eagle_choices / lookahead_* parameters (tensorrtllm_backend's
# docs/model_config.md, the release for TensorRT-LLM 1.2) are not written by deploy.
# draft_tokens_external is served: its requests carry draft_input_ids, or decode as usual
UNSERVED_SPECULATIVE_MODES = ("lookahead_decoding", "medusa", "explicit_draft_tokens", "eagle")
LORA_MODULES = (
    "attn_qkv",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_dense",
    "mlp_h_to_4h",
    "mlp_4h_to_h",
    "mlp_gate",
    "cross_attn_qkv",
    "cross_attn_q",
    "cross_attn_k",
    "cross_attn_v",
    "cross_attn_dense",
    "moe_h_to_4h",
    "moe_4h_to_h",
    "moe_gate",
    "moe_router",
    "mlp_router",
    "mlp_gate_up",
)
MAX_NUM_TOKENS_LIMIT = 16384  # above this TensorRT volumes may overflow (trtllm _common.py)
FMHA_DTYPES = ("float16", "bfloat16")  # the attention plugin runs unfused MHA for anything else
MINIMUMS = (
    ("max_batch_size", 1),
    ("max_input_len", 1),
    ("max_seq_len", 1),
    ("max_num_tokens", 1),
    ("max_beam_width", 1),
    ("tokens_per_block", 1),
    ("trtllm.workers", 1),
    ("trtllm.max_lora_rank", 1),
    ("trtllm.max_draft_len", 0),
)


def _choice(key: str, value, choices: tuple) -> list[str]:
    if value in choices:
        return []
    return [f"{key}={value!r}: not a trtllm-build 1.2 value; use one of {', '.join(choices)}"]


def values(f: BuildFacts) -> list[str]:
    b, o = f.build, f.build.trtllm
    out = _choice("build.kv_cache_type", b.kv_cache_type, KV_CACHE_TYPES)
    out += _choice("build.trtllm.gpt_attention_plugin", o.gpt_attention_plugin, PLUGIN_DTYPES)
    out += _choice("build.trtllm.gemm_plugin", o.gemm_plugin, GEMM_PLUGIN_DTYPES)
    out += _choice("build.trtllm.gemm_swiglu_plugin", o.gemm_swiglu_plugin, ("fp8", "disable"))
    out += _choice("build.trtllm.lora_plugin", o.lora_plugin, PLUGIN_DTYPES)
    for name in FEATURE_FLAGS:
        out += _choice(f"build.trtllm.{name}", getattr(o, name), FEATURE_VALUES)
    out += _choice("build.trtllm.log_level", o.log_level, LOG_LEVELS)
    if o.speculative_decoding_mode is not None:
        out += _choice(
            "build.trtllm.speculative_decoding_mode", o.speculative_decoding_mode, SPECULATIVE_MODES
        )
    for module in o.lora_target_modules:
        out += _choice("build.trtllm.lora_target_modules[]", module, LORA_MODULES)
    for key, minimum in MINIMUMS:
        value = getattr(o, key[len("trtllm.") :]) if key.startswith("trtllm.") else getattr(b, key)
        if value < minimum:
            out.append(f"build.{key}={value}: must be >= {minimum}")
    return out


def lengths(f: BuildFacts) -> list[str]:
    b = f.build
    if b.max_input_len > b.max_seq_len:
        return [
            f"build.max_input_len={b.max_input_len}: larger than build.max_seq_len="
            f"{b.max_seq_len} (trtllm-build would clip it silently); lower max_input_len or "
            f"raise max_seq_len"
        ]
    return []


def max_num_tokens(f: BuildFacts) -> list[str]:
    b, o = f.build, f.build.trtllm
    n, out = b.max_num_tokens, []
    key = f"build.max_num_tokens={n}"
    if n > b.max_batch_size * b.max_seq_len:
        out.append(
            f"{key}: above max_batch_size*max_seq_len={b.max_batch_size * b.max_seq_len} "
            f"(trtllm-build would clip it); lower it to at most that"
        )
    if n > MAX_NUM_TOKENS_LIMIT:
        out.append(
            f"{key}: above {MAX_NUM_TOKENS_LIMIT}, where TensorRT volumes may overflow; "
            f"keep it <= {MAX_NUM_TOKENS_LIMIT}"
        )
    if n < b.tokens_per_block:
        out.append(
            f"{key}: below build.tokens_per_block={b.tokens_per_block} (trtllm-build "
            f"would raise it); set max_num_tokens >= tokens_per_block"
        )
    if not f.enable_chunked_context and n < b.max_input_len:
        out.append(
            f"{key}: below build.max_input_len={b.max_input_len}, and without chunked "
            f"context a prompt must fit one iteration; raise max_num_tokens or set "
            f"deploy.trtllm.enable_chunked_context=true"
        )
    if o.opt_num_tokens is not None:
        if o.opt_num_tokens > n:
            out.append(
                f"build.trtllm.opt_num_tokens={o.opt_num_tokens}: above max_num_tokens="
                f"{n}; lower it"
            )
        if o.multiple_profiles == "enable":
            out.append(
                f"build.trtllm.opt_num_tokens={o.opt_num_tokens}: cannot be set together "
                f"with build.trtllm.multiple_profiles=enable; set opt_num_tokens=null"
            )
    return out


def inflight_batching(f: BuildFacts) -> list[str]:
    """The Triton tensorrtllm backend (in-flight batching) loads only such engines (ref 2.4)."""
    b, o = f.build, f.build.trtllm
    why = "in-flight batching (Triton tensorrtllm backend) needs"
    out = []
    if o.gpt_attention_plugin == "disable":
        out.append(
            f"build.trtllm.gpt_attention_plugin=disable: {why} the GPT attention plugin "
            f"(also for the paged KV cache); set it to auto"
        )
    if o.remove_input_padding != "enable":
        out.append(
            f"build.trtllm.remove_input_padding={o.remove_input_padding}: {why} packed "
            f"input; set it to enable"
        )
    if b.kv_cache_type != "paged":
        out.append(
            f"build.kv_cache_type={b.kv_cache_type}: {why} the paged KV cache; set it to paged"
        )
    return out


def runtime_features(f: BuildFacts) -> list[str]:
    """KV-cache reuse and chunked context at runtime need paged context FMHA in the engine."""
    wanted = [
        k
        for k, on in (
            ("enable_kv_cache_reuse", f.enable_kv_cache_reuse),
            ("enable_chunked_context", f.enable_chunked_context),
        )
        if on
    ]
    if not wanted:
        return []
    o, out = f.build.trtllm, []
    keys = " and ".join(f"deploy.trtllm.{k}=true" for k in wanted)
    off = f"or set {' and '.join(f'deploy.trtllm.{k}=false' for k in wanted)}"
    if o.use_paged_context_fmha != "enable":
        out.append(
            f"build.trtllm.use_paged_context_fmha={o.use_paged_context_fmha}: {keys} needs "
            f"an engine built with paged context FMHA; set it to enable {off}"
        )
    if o.context_fmha != "enable":
        out.append(
            f"build.trtllm.context_fmha={o.context_fmha}: {keys} needs context FMHA (paged "
            f"context FMHA is forced off without it); set it to enable {off}"
        )
    if f.kv_cache_quant_algo == "INT8":
        out.append(
            f"quant.kv_cache=int8: {keys} cannot work with an INT8 KV cache (TensorRT-LLM "
            f"turns paged context FMHA off for it); use quant.kv_cache=fp8 or none {off}"
        )
    if f.dtype is not None and f.dtype not in FMHA_DTYPES:
        out.append(
            f"model.dtype={f.dtype}: {keys} needs context FMHA, which runs only for "
            f"float16/bfloat16 (the attention plugin falls back to unfused MHA); convert "
            f"with model.dtype=bfloat16 (or float16) {off}"
        )
    return out


def speculative_decoding(f: BuildFacts) -> list[str]:
    b, o = f.build, f.build.trtllm
    out = []
    if o.gather_context_logits and o.max_draft_len > 0:
        out.append(
            f"build.trtllm.gather_context_logits=true: incompatible with max_draft_len="
            f"{o.max_draft_len} (trtllm-build raises); drop one of them"
        )
    if o.speculative_decoding_mode is None and o.max_draft_len > 0:
        out.append(
            f"build.trtllm.max_draft_len={o.max_draft_len}: only used with a "
            f"speculative_decoding_mode; set one or max_draft_len=0"
        )
    if o.speculative_decoding_mode in UNSERVED_SPECULATIVE_MODES:
        out.append(
            f"build.trtllm.speculative_decoding_mode={o.speculative_decoding_mode}: deploy "
            f"cannot serve it (the tensorrt_llm model gets no decoding_mode, medusa_choices, "
            f"eagle_choices or lookahead_* parameters); use draft_tokens_external (drafts sent "
            f"as draft_input_ids), or backend=torch with deploy.torch.spec.method="
            f"prompt_lookup|draft_model"
        )
    if o.speculative_decoding_mode == "eagle":
        if b.max_batch_size > 512:
            out.append(
                f"build.max_batch_size={b.max_batch_size}: EAGLE supports at most 512; lower it"
            )
        if o.max_draft_len > 256:
            out.append(
                f"build.trtllm.max_draft_len={o.max_draft_len}: EAGLE supports at most 256; "
                f"lower it"
            )
    return out


def weight_streaming(f: BuildFacts) -> list[str]:
    return memory_settings.build_problems(f.build, f.quant_algo)


def plugins(f: BuildFacts) -> list[str]:
    o, out = f.build.trtllm, []
    if o.user_buffer == "enable" and o.reduce_fusion != "enable":
        out.append(
            "build.trtllm.user_buffer=enable: requires build.trtllm.reduce_fusion=enable; "
            "enable reduce_fusion or disable user_buffer"
        )
    if o.reduce_fusion == "enable" and f.tp_size <= 1:
        out.append(
            f"build.trtllm.reduce_fusion=enable: only takes effect with tensor parallelism "
            f"(tp_size={f.tp_size}; trtllm-build forces it off); set parallel.tp_size>1 or "
            f"reduce_fusion=disable"
        )
    if o.gemm_swiglu_plugin == "fp8":
        if o.use_fused_mlp != "enable":
            out.append(
                "build.trtllm.gemm_swiglu_plugin=fp8: needs build.trtllm.use_fused_mlp=enable"
            )
        if f.quant_algo != "FP8":
            out.append(
                f"build.trtllm.gemm_swiglu_plugin=fp8: needs an FP8 checkpoint (quant_algo="
                f"{f.quant_algo}); use quant=fp8 or gemm_swiglu_plugin=disable"
            )
        if f.sm is not None and f.sm != 90:
            out.append(
                f"build.trtllm.gemm_swiglu_plugin=fp8: Hopper (SM 90) only, target is SM "
                f"{f.sm}; set gemm_swiglu_plugin=disable"
            )
    if o.lora_plugin == "disable" and (o.lora_dir or o.lora_target_modules):
        out.append(
            "build.trtllm.lora_dir/lora_target_modules: only effective with a LoRA plugin; "
            "set build.trtllm.lora_plugin=auto or clear them"
        )
    return out


RULES = (
    values,
    lengths,
    max_num_tokens,
    inflight_batching,
    runtime_features,
    speculative_decoding,
    draft_target.build_problems,
    plugins,
    weight_streaming,
    checkpoint_rules.checkpoint,
    checkpoint_rules.precision,
)


def violations(facts: BuildFacts) -> list[str]:
    return [message for rule in RULES for message in rule(facts)]


def format_violations(found: list[str]) -> str:
    items = "; ".join(f"({i}) {m}" for i, m in enumerate(found, 1))
    return f"build: backend=trtllm cannot build, nothing was done; {len(found)} problem(s): {items}"


def check(facts: BuildFacts) -> None:
    found = violations(facts)
    if found:
        raise ConfigError(format_violations(found))
