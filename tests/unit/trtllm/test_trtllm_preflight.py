"""Contract: every invariant of reference section 8 has a violating config and its message.

The reference is docs/trtllm_reference.md.

Each case: config overrides, checkpoint config.json overrides, target GPU SM, and a piece of the
expected message (the offending key=value and what is wrong). All violations come back together.
"""

import pytest

from pipeline.errors import ConfigError
from pipeline.trtllm import preflight
from pipeline.trtllm.facts import facts_from_checkpoint, facts_from_spec
from tests.unit.trtllm.trtllm_helpers import trtllm_spec, write_checkpoint

FP8 = {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None}}
REUSE = "deploy.trtllm.enable_kv_cache_reuse=true"
CHUNKED = "deploy.trtllm.enable_chunked_context=true"


def world(n: int, **mapping) -> dict:
    return {"mapping": {"world_size": n, "tp_size": n, "pp_size": 1, **mapping}}


CASES = [
    # values: spellings trtllm-build 1.2 accepts
    (
        "plugin-dtype",
        ["build.trtllm.gpt_attention_plugin=fp16"],
        {},
        90,
        "build.trtllm.gpt_attention_plugin='fp16': not a trtllm-build 1.2 value",
    ),
    (
        "feature-value",
        ["build.trtllm.context_fmha=on"],
        {},
        90,
        "build.trtllm.context_fmha='on': not a trtllm-build 1.2 value; use one of enable, disable",
    ),
    (
        "kv-cache-type-value",
        ["build.kv_cache_type=paged_kv"],
        {},
        90,
        "build.kv_cache_type='paged_kv': not a trtllm-build 1.2 value",
    ),
    ("log-level", ["build.trtllm.log_level=loud"], {}, 90, "build.trtllm.log_level='loud'"),
    (
        "speculative-mode",
        ["build.trtllm.speculative_decoding_mode=ngram"],
        {},
        90,
        "build.trtllm.speculative_decoding_mode='ngram'",
    ),
    (
        "lora-module",
        ["build.trtllm.lora_plugin=auto", "build.trtllm.lora_target_modules=[attn_x]"],
        {},
        90,
        "build.trtllm.lora_target_modules[]='attn_x'",
    ),
    ("positive", ["build.max_batch_size=0"], {}, 90, "build.max_batch_size=0: must be >= 1"),
    # lengths
    (
        "input-over-seq",
        ["build.max_input_len=4096"],
        {},
        90,
        "build.max_input_len=4096: larger than build.max_seq_len=2048",
    ),
    (
        "seq-over-trained-context",
        [],
        {"max_position_embeddings": 1024},
        90,
        "build.max_seq_len=2048: beyond the model's trained context (max_position_embeddings*rope "
        "factor=1024)",
    ),
    (
        "llama3-rope-factor-ignored",
        [],
        {"max_position_embeddings": 1024, "rotary_scaling": {"type": "llama3", "factor": 8.0}},
        90,
        "trained context (max_position_embeddings*rope factor=1024)",
    ),
    # max_num_tokens bounds
    (
        "tokens-over-batch-times-seq",
        ["build.max_batch_size=2"],
        {},
        90,
        "build.max_num_tokens=8192: above max_batch_size*max_seq_len=4096",
    ),
    (
        "tokens-over-16384",
        ["build.max_batch_size=16", "build.max_num_tokens=20000"],
        {},
        90,
        "build.max_num_tokens=20000: above 16384",
    ),
    (
        "tokens-under-block",
        ["build.max_num_tokens=16", CHUNKED],
        {},
        90,
        "build.max_num_tokens=16: below build.tokens_per_block=32",
    ),
    (
        "prompt-must-fit",
        ["build.max_num_tokens=512"],
        {},
        90,
        "build.max_num_tokens=512: below build.max_input_len=1024, and without chunked context a "
        "prompt must fit one iteration",
    ),
    (
        "opt-over-max",
        ["build.trtllm.opt_num_tokens=9000"],
        {},
        90,
        "build.trtllm.opt_num_tokens=9000: above max_num_tokens=8192",
    ),
    (
        "opt-with-profiles",
        ["build.trtllm.opt_num_tokens=64", "build.trtllm.multiple_profiles=enable"],
        {},
        90,
        "cannot be set together with build.trtllm.multiple_profiles=enable",
    ),
    # in-flight batching (Triton tensorrtllm backend)
    (
        "ifb-attention-plugin",
        ["build.trtllm.gpt_attention_plugin=disable"],
        {},
        90,
        "build.trtllm.gpt_attention_plugin=disable: in-flight "
        "batching (Triton tensorrtllm backend) "
        "needs the GPT attention plugin",
    ),
    (
        "ifb-packed-input",
        ["build.trtllm.remove_input_padding=disable"],
        {},
        90,
        "build.trtllm.remove_input_padding=disable: in-flight batching",
    ),
    (
        "ifb-paged-kv",
        ["build.kv_cache_type=continuous"],
        {},
        90,
        "build.kv_cache_type=continuous: in-flight batching (Triton tensorrtllm backend) needs the "
        "paged KV cache",
    ),
    # runtime KV reuse / chunked context
    (
        "reuse-needs-paged-fmha",
        [REUSE, "build.trtllm.use_paged_context_fmha=disable"],
        {},
        90,
        "build.trtllm.use_paged_context_fmha=disable: "
        "deploy.trtllm.enable_kv_cache_reuse=true needs "
        "an engine built with paged context FMHA",
    ),
    (
        "chunked-needs-fmha",
        [CHUNKED, "build.trtllm.context_fmha=disable"],
        {},
        90,
        "build.trtllm.context_fmha=disable: "
        "deploy.trtllm.enable_chunked_context=true needs context "
        "FMHA",
    ),
    (
        "reuse-no-int8-kv",
        [REUSE],
        {"quantization": {"quant_algo": None, "kv_cache_quant_algo": "INT8"}},
        90,
        "quant.kv_cache=int8: deploy.trtllm.enable_kv_cache_reuse=true cannot work with an INT8 KV",
    ),
    (
        "reuse-no-fp32",
        [REUSE],
        {"dtype": "float32"},
        90,
        "model.dtype=float32: "
        "deploy.trtllm.enable_kv_cache_reuse=true needs context FMHA, which runs "
        "only for float16/bfloat16",
    ),
    # speculative decoding
    (
        "context-logits-vs-draft",
        [
            "build.trtllm.gather_context_logits=true",
            "build.trtllm.speculative_decoding_mode=medusa",
            "build.trtllm.max_draft_len=4",
        ],
        {},
        90,
        "build.trtllm.gather_context_logits=true: incompatible with max_draft_len=4",
    ),
    (
        "draft-without-mode",
        ["build.trtllm.max_draft_len=4"],
        {},
        90,
        "build.trtllm.max_draft_len=4: only used with a speculative_decoding_mode",
    ),
    (
        "eagle-batch",
        ["build.trtllm.speculative_decoding_mode=eagle", "build.max_batch_size=1024"],
        {},
        90,
        "build.max_batch_size=1024: EAGLE supports at most 512",
    ),
    (
        "eagle-draft",
        ["build.trtllm.speculative_decoding_mode=eagle", "build.trtllm.max_draft_len=300"],
        {},
        90,
        "build.trtllm.max_draft_len=300: EAGLE supports at most 256",
    ),
    *(
        (
            f"unserved-{mode}",
            [f"build.trtllm.speculative_decoding_mode={mode}", "build.trtllm.max_draft_len=4"],
            {},
            90,
            f"build.trtllm.speculative_decoding_mode={mode}: deploy cannot serve it",
        )
        for mode in ("medusa", "eagle", "explicit_draft_tokens", "lookahead_decoding")
    ),
    # plugins
    (
        "user-buffer-needs-reduce-fusion",
        ["build.trtllm.user_buffer=enable"],
        {},
        90,
        "build.trtllm.user_buffer=enable: requires build.trtllm.reduce_fusion=enable",
    ),
    (
        "reduce-fusion-needs-tp",
        ["build.trtllm.reduce_fusion=enable"],
        {},
        90,
        "build.trtllm.reduce_fusion=enable: only takes effect with tensor parallelism (tp_size=1",
    ),
    (
        "swiglu-needs-fused-mlp",
        ["build.trtllm.gemm_swiglu_plugin=fp8", "build.trtllm.use_fused_mlp=disable"],
        FP8,
        90,
        "build.trtllm.gemm_swiglu_plugin=fp8: needs build.trtllm.use_fused_mlp=enable",
    ),
    (
        "swiglu-needs-fp8",
        ["build.trtllm.gemm_swiglu_plugin=fp8"],
        {},
        90,
        "build.trtllm.gemm_swiglu_plugin=fp8: needs an FP8 checkpoint (quant_algo=None)",
    ),
    (
        "swiglu-hopper-only",
        ["build.trtllm.gemm_swiglu_plugin=fp8"],
        FP8,
        89,
        "build.trtllm.gemm_swiglu_plugin=fp8: Hopper (SM 90) only, target is SM 89",
    ),
    (
        "lora-args-need-plugin",
        ["build.trtllm.lora_dir=[/lora/a]"],
        {},
        90,
        "build.trtllm.lora_dir/lora_target_modules: only effective with a LoRA plugin",
    ),
    # checkpoint
    (
        "world-size",
        [],
        world(2, tp_size=1),
        90,
        "mapping.world_size=2 != tp_size*pp_size*cp_size=1*1*1",
    ),
    (
        "moe-mapping",
        [],
        world(2, moe_tp_size=1, moe_ep_size=1),
        90,
        "moe_tp_size*moe_ep_size*moe_cluster_size=1*1*1 != tp_size=2",
    ),
    (
        "pp-over-layers",
        [],
        {"mapping": {"world_size": 32, "tp_size": 1, "pp_size": 32}},
        90,
        "mapping.pp_size=32 exceeds num_hidden_layers=30",
    ),
    (
        "architecture",
        [],
        {"architecture": "FooForCausalLM"},
        90,
        "architecture='FooForCausalLM' is not a TensorRT-LLM MODEL_MAP key",
    ),
    # precision vs GPU
    ("fp8-needs-ada", [], FP8, 80, "quant_algo=FP8: FP8 needs SM >= 89"),
    (
        "w4a8-needs-ada",
        [],
        {"quantization": {"quant_algo": "W4A8_AWQ"}},
        86,
        "quant_algo=W4A8_AWQ: FP8 needs SM >= 89",
    ),
    (
        "fp8-kv-needs-ada",
        [],
        {"quantization": {"quant_algo": None, "kv_cache_quant_algo": "FP8"}},
        86,
        "kv_cache_quant_algo=FP8: an FP8 KV cache needs SM >= 89",
    ),
    (
        "nvfp4-needs-blackwell",
        [],
        {"quantization": {"quant_algo": "NVFP4"}},
        90,
        "FP4 needs SM >= 100 (Blackwell), the target GPU is SM 90",
    ),
    (
        "int-woq-not-on-sm100",
        [],
        {"quantization": {"quant_algo": "W8A16"}},
        100,
        "TensorRT-LLM rejects INT8/INT4 weight-only, SmoothQuant, "
        "per-channel/per-token scaling and "
        "INT8 KV on SM 100-119",
    ),
    (
        "int8-kv-not-on-sm100",
        [],
        {"quantization": {"quant_algo": None, "kv_cache_quant_algo": "INT8"}},
        103,
        "kv_cache_quant_algo=INT8: TensorRT-LLM rejects",
    ),
    ("bf16-needs-ampere", [], {}, 75, "model.dtype=bfloat16: needs SM >= 80"),
]


@pytest.mark.parametrize(
    "overrides,ckpt,sm,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_rule_reports_its_violation(overrides, ckpt, sm, expected, tmp_path):
    spec = trtllm_spec(tmp_path, *overrides)
    ckpt_dir = write_checkpoint(tmp_path / "ckpt", **ckpt)
    found = preflight.violations(facts_from_checkpoint(spec, ckpt_dir, sm))
    assert any(expected in message for message in found), found


def test_default_config_and_checkpoint_pass(tmp_path):
    spec = trtllm_spec(tmp_path)
    assert (
        preflight.violations(facts_from_checkpoint(spec, write_checkpoint(tmp_path / "c"), 90))
        == []
    )


def test_a_draft_target_engine_passes(tmp_path):
    # its requests carry draft_input_ids (tensorrt_llm's input), or decode as usual
    spec = trtllm_spec(
        tmp_path,
        "build.trtllm.speculative_decoding_mode=draft_tokens_external",
        "build.trtllm.max_draft_len=4",
    )
    ckpt = write_checkpoint(tmp_path / "c")
    assert preflight.violations(facts_from_checkpoint(spec, ckpt, 90)) == []


def test_linear_rope_factor_extends_context(tmp_path):
    ckpt = write_checkpoint(
        tmp_path / "c",
        max_position_embeddings=1024,
        rotary_scaling={"type": "linear", "factor": 4.0},
    )
    assert preflight.violations(facts_from_checkpoint(trtllm_spec(tmp_path), ckpt, 90)) == []


def test_missing_rank_file(tmp_path):
    ckpt = write_checkpoint(tmp_path / "c", ranks=1, **world(2))
    found = preflight.violations(facts_from_checkpoint(trtllm_spec(tmp_path), ckpt, 90))
    assert any("rank1.safetensors missing for world_size=2" in m for m in found), found


def test_precision_predicted_before_the_checkpoint_exists(tmp_path):
    """check_available runs before quantize: quant.name/kv_cache and model.dtype predict it."""
    spec = trtllm_spec(
        tmp_path, "quant.name=fp8", "quant.kv_cache=int8", "model.dtype=float32", REUSE
    )
    found = preflight.violations(facts_from_spec(spec, 80))
    assert any("quant_algo=FP8: FP8 needs SM >= 89" in m for m in found), found
    assert any("quant.kv_cache=int8" in m for m in found), found
    # a quantized export picks its own dtype: model.dtype only predicts unquantized checkpoints
    assert not any("model.dtype=float32" in m for m in found), found
    unquantized = trtllm_spec(tmp_path, "model.dtype=float32", REUSE)
    found = preflight.violations(facts_from_spec(unquantized, 80))
    assert any("model.dtype=float32" in m for m in found), found


def test_unknown_gpu_skips_precision_rules(tmp_path):
    spec = trtllm_spec(tmp_path)
    ckpt = write_checkpoint(tmp_path / "c", **FP8)
    assert preflight.violations(facts_from_checkpoint(spec, ckpt, None)) == []


def test_all_violations_reported_together(tmp_path):
    spec = trtllm_spec(
        tmp_path,
        "build.trtllm.gpt_attention_plugin=disable",
        "build.max_input_len=4096",
        "build.trtllm.user_buffer=enable",
    )
    with pytest.raises(ConfigError) as err:
        preflight.check(facts_from_checkpoint(spec, write_checkpoint(tmp_path / "c"), 90))
    message = str(err.value)
    assert message.startswith("build: backend=trtllm cannot build, nothing was done; 3 problem(s)")
    for piece in (
        "(1) build.max_input_len=4096",
        "(2) build.trtllm.gpt_attention_plugin=disable",
        "(3) build.trtllm.user_buffer=enable",
    ):
        assert piece in message
