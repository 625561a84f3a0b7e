"""Contract: KV block reuse, the host KV tier and weight streaming reach trtllm-build and the
tensorrt_llm model's config.pbtxt under the names upstream reads (docs/trtllm_reference.md,
sections 2.1 and 5.5), from the keys the torch engine reads too; combinations upstream cannot
run are refused."""

import pytest

from pipeline.errors import ConfigError
from pipeline.trtllm import preflight
from pipeline.trtllm.build_command import build_command
from pipeline.trtllm.facts import facts_from_checkpoint
from tests.unit.trtllm.test_trtllm_triton_config import engine_copy, generate, params
from tests.unit.trtllm.trtllm_helpers import FIXTURE_ENGINE, trtllm_spec, write_checkpoint

# parameters of upstream's template (TRT-LLM triton_backend/all_models/inflight_batcher_llm/
# tensorrt_llm/config.pbtxt@0c8de69), read by model_instance_state.cc
UPSTREAM_PARAMETERS = ("enable_kv_cache_reuse", "kv_cache_host_memory_bytes", "gpu_weights_percent")


def streaming_engine(tmp_path, engine_bytes: int):
    """The fixture engine built with --weight_streaming, its plan engine_bytes long (sparse)."""
    engine = engine_copy(tmp_path, lambda c: c["build_config"].update(weight_streaming=True))
    with open(engine / "rank0.engine", "r+b") as plan:
        plan.truncate(engine_bytes)
    return engine


def test_defaults_write_no_host_tier_and_no_weight_percent(tmp_path):
    p = params(generate(tmp_path, FIXTURE_ENGINE))
    assert p["enable_kv_cache_reuse"] == "false"
    assert "kv_cache_host_memory_bytes" not in p and "gpu_weights_percent" not in p


def test_prefix_caching_switch_turns_reuse_on_and_the_trtllm_key_overrides_it(tmp_path):
    p = params(generate(tmp_path, FIXTURE_ENGINE, "deploy.enable_prefix_caching=true"))
    assert p["enable_kv_cache_reuse"] == "true"
    overrides = ("deploy.enable_prefix_caching=true", "deploy.trtllm.enable_kv_cache_reuse=false")
    assert params(generate(tmp_path, FIXTURE_ENGINE, *overrides))["enable_kv_cache_reuse"] == (
        "false"
    )


def test_host_tier_in_bytes_with_reuse(tmp_path):
    config = generate(
        tmp_path, FIXTURE_ENGINE, "deploy.enable_prefix_caching=true", "deploy.host_kv_cache_gb=4.5"
    )
    p = params(config)
    assert p["kv_cache_host_memory_bytes"] == "4500000000"
    assert set(UPSTREAM_PARAMETERS[:2]) <= set(p)


def test_host_tier_without_reuse_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"host_kv_cache_gb=4: .* KV block reuse is off"):
        generate(tmp_path, FIXTURE_ENGINE, "deploy.host_kv_cache_gb=4")
    assert not (tmp_path / "repo").exists()


def test_weight_budget_becomes_the_percent_of_the_streamable_weights(tmp_path):
    engine = streaming_engine(tmp_path, 10 * 10**9)
    p = params(generate(tmp_path, engine, "build.gpu_weight_budget_gb=4"))
    assert p["gpu_weights_percent"] == "0.4000"
    assert set(p) >= {UPSTREAM_PARAMETERS[2]}
    # a budget above the weights keeps them all on the GPU (upstream's range is 0.0 - 1.0)
    p = params(generate(tmp_path, engine, "build.gpu_weight_budget_gb=20"))
    assert p["gpu_weights_percent"] == "1.0000"


def test_weight_budget_on_an_engine_built_without_streaming_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"gpu_weight_budget_gb=4: engine .* without --weight"):
        generate(tmp_path, FIXTURE_ENGINE, "build.gpu_weight_budget_gb=4")


def test_weight_budget_builds_with_weight_streaming(tmp_path):
    spec = trtllm_spec(tmp_path, "build.gpu_weight_budget_gb=30")
    argv = build_command(spec.build, tmp_path / "c", tmp_path / "e", None, tmp_path / "t")
    assert argv.count("--weight_streaming") == 1
    plain = build_command(trtllm_spec(tmp_path).build, tmp_path, tmp_path, None, tmp_path / "t")
    assert "--weight_streaming" not in plain


@pytest.mark.parametrize(
    ("overrides", "ckpt", "expected"),
    [
        (
            ["build.gpu_weight_budget_gb=30", "build.trtllm.gemm_plugin=auto"],
            {},
            "build.gpu_weight_budget_gb=30: TensorRT streams only weights outside plugins",
        ),
        (
            ["build.trtllm.weight_streaming=true", "build.trtllm.gemm_plugin=fp8"],
            {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None}},
            "build.trtllm.weight_streaming=true: TensorRT streams only weights outside plugins",
        ),
        (
            ["build.gpu_weight_budget_gb=30"],
            {"quantization": {"quant_algo": "W4A16_AWQ", "kv_cache_quant_algo": None}},
            "quant_algo=W4A16_AWQ runs its linears in weight-only quantization plugins",
        ),
    ],
)
def test_weight_streaming_upstream_cannot_do_is_refused(overrides, ckpt, expected, tmp_path):
    spec = trtllm_spec(tmp_path, *overrides)
    ckpt_dir = write_checkpoint(tmp_path / "q", **ckpt)
    found = preflight.violations(facts_from_checkpoint(spec, ckpt_dir, 90))
    assert any(expected in m for m in found), found


def test_weight_budget_with_the_default_gemm_path_and_fp8_passes(tmp_path):
    spec = trtllm_spec(tmp_path, "build.gpu_weight_budget_gb=30")
    fp8 = {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None}}
    for ckpt in ({}, fp8):
        ckpt_dir = write_checkpoint(tmp_path / f"c{len(ckpt)}", **ckpt)
        assert preflight.violations(facts_from_checkpoint(spec, ckpt_dir, 90)) == []
