"""Contract: config -> the exact trtllm-build 1.2.x command line.

Expected argv are written here from docs/trtllm_reference.md section 2 (flag names, value spellings
enable/disable, dtype choices, store_true flags, nargs+ lists), not derived from the code.
"""

from pathlib import Path

import pytest

from pipeline.trtllm.build_command import build_command
from tests.unit.trtllm.trtllm_helpers import trtllm_spec

CKPT, ENGINE = Path("/data/ckpt"), Path("/data/engine")
IN_CACHE, OUT_CACHE = Path("/cache/in/model.cache"), Path("/cache/in/.model.cache.tmp-1")

# shared by every case: the checkpoint/output dirs
IO = ["trtllm-build", "--checkpoint_dir", "/data/ckpt", "--output_dir", "/data/engine"]

CASES = [
    pytest.param([], None, IO + [
        "--max_batch_size", "8", "--max_input_len", "1024", "--max_seq_len", "2048",
        "--max_num_tokens", "8192", "--max_beam_width", "1",
        "--kv_cache_type", "paged", "--tokens_per_block", "32",
        "--gpt_attention_plugin", "auto", "--gemm_swiglu_plugin", "disable",
        "--context_fmha", "enable", "--use_paged_context_fmha", "enable",
        "--use_fused_mlp", "enable", "--remove_input_padding", "enable",
        "--multiple_profiles", "disable", "--reduce_fusion", "disable", "--user_buffer", "disable",
        "--workers", "1", "--log_level", "info",
        "--output_timing_cache", "/cache/in/.model.cache.tmp-1"], id="defaults-cache-miss"),
    pytest.param(["build.max_batch_size=64", "build.max_input_len=512", "build.max_seq_len=1024",
                  "build.max_num_tokens=4096", "build.max_beam_width=4",
                  "build.tokens_per_block=64",
                  "build.trtllm.gemm_plugin=auto", "build.trtllm.opt_num_tokens=256",
                  "build.trtllm.use_fused_mlp=disable"], IN_CACHE, IO + [
        "--max_batch_size", "64", "--max_input_len", "512", "--max_seq_len", "1024",
        "--max_num_tokens", "4096", "--max_beam_width", "4", "--opt_num_tokens", "256",
        "--kv_cache_type", "paged", "--tokens_per_block", "64",
        "--gpt_attention_plugin", "auto", "--gemm_plugin", "auto",
        "--gemm_swiglu_plugin", "disable",
        "--context_fmha", "enable", "--use_paged_context_fmha", "enable",
        "--use_fused_mlp", "disable", "--remove_input_padding", "enable",
        "--multiple_profiles", "disable", "--reduce_fusion", "disable", "--user_buffer", "disable",
        "--workers", "1", "--log_level", "info",
        "--input_timing_cache", "/cache/in/model.cache",
        "--output_timing_cache", "/cache/in/.model.cache.tmp-1"], id="limits-gemm-cache-hit"),
    pytest.param(["build.trtllm.lora_plugin=auto", "build.trtllm.lora_dir=[/lora/a,/lora/b]",
                  "build.trtllm.lora_target_modules=[attn_q,attn_v,mlp_gate]",
                  "build.trtllm.max_lora_rank=16", "build.trtllm.workers=2",
                  "build.trtllm.log_level=verbose"], None, IO + [
        "--max_batch_size", "8", "--max_input_len", "1024", "--max_seq_len", "2048",
        "--max_num_tokens", "8192", "--max_beam_width", "1",
        "--kv_cache_type", "paged", "--tokens_per_block", "32",
        "--gpt_attention_plugin", "auto", "--gemm_swiglu_plugin", "disable",
        "--context_fmha", "enable", "--use_paged_context_fmha", "enable",
        "--use_fused_mlp", "enable", "--remove_input_padding", "enable",
        "--multiple_profiles", "disable", "--reduce_fusion", "disable", "--user_buffer", "disable",
        "--lora_plugin", "auto", "--lora_dir", "/lora/a", "/lora/b",
        "--lora_target_modules", "attn_q", "attn_v", "mlp_gate", "--max_lora_rank", "16",
        "--workers", "2", "--log_level", "verbose",
        "--output_timing_cache", "/cache/in/.model.cache.tmp-1"], id="lora"),
    pytest.param(["build.trtllm.speculative_decoding_mode=medusa", "build.trtllm.max_draft_len=63",
                  "build.trtllm.weight_streaming=true", "build.trtllm.multiple_profiles=enable",
                  "build.trtllm.gemm_plugin=fp8", "build.trtllm.gemm_swiglu_plugin=fp8"],
                 IN_CACHE, IO + [
        "--max_batch_size", "8", "--max_input_len", "1024", "--max_seq_len", "2048",
        "--max_num_tokens", "8192", "--max_beam_width", "1",
        "--kv_cache_type", "paged", "--tokens_per_block", "32",
        "--gpt_attention_plugin", "auto", "--gemm_plugin", "fp8", "--gemm_swiglu_plugin", "fp8",
        "--context_fmha", "enable", "--use_paged_context_fmha", "enable",
        "--use_fused_mlp", "enable", "--remove_input_padding", "enable",
        "--multiple_profiles", "enable", "--reduce_fusion", "disable", "--user_buffer", "disable",
        "--weight_streaming",
        "--speculative_decoding_mode", "medusa", "--max_draft_len", "63",
        "--workers", "1", "--log_level", "info",
        "--input_timing_cache", "/cache/in/model.cache",
        "--output_timing_cache", "/cache/in/.model.cache.tmp-1"], id="speculative-fp8"),
    pytest.param(["build.trtllm.gather_context_logits=true", "build.kv_cache_type=continuous",
                  "build.trtllm.context_fmha=disable",
                  "build.trtllm.use_paged_context_fmha=disable",
                  "build.trtllm.reduce_fusion=enable", "build.trtllm.user_buffer=enable",
                  "build.trtllm.gpt_attention_plugin=float16"], None, IO + [
        "--max_batch_size", "8", "--max_input_len", "1024", "--max_seq_len", "2048",
        "--max_num_tokens", "8192", "--max_beam_width", "1",
        "--kv_cache_type", "continuous", "--tokens_per_block", "32",
        "--gpt_attention_plugin", "float16", "--gemm_swiglu_plugin", "disable",
        "--context_fmha", "disable", "--use_paged_context_fmha", "disable",
        "--use_fused_mlp", "enable", "--remove_input_padding", "enable",
        "--multiple_profiles", "disable", "--reduce_fusion", "enable", "--user_buffer", "enable",
        "--gather_context_logits",
        "--workers", "1", "--log_level", "info",
        "--output_timing_cache", "/cache/in/.model.cache.tmp-1"], id="logits-fusion-continuous"),
]


@pytest.mark.parametrize("overrides,input_cache,expected", CASES)
def test_argv_matches_reference(overrides, input_cache, expected, tmp_path):
    spec = trtllm_spec(tmp_path, *overrides)
    assert build_command(spec.build, CKPT, ENGINE, input_cache, OUT_CACHE) == expected


def test_relative_paths_become_absolute(tmp_path, monkeypatch):
    """--output_timing_cache defaults to model.cache in the CWD; we never pass a relative path."""
    monkeypatch.chdir(tmp_path)
    spec = trtllm_spec(tmp_path)
    argv = build_command(spec.build, Path("ckpt"), Path("eng"), None, Path("t/model.cache"))
    assert argv[argv.index("--checkpoint_dir") + 1] == str(tmp_path / "ckpt")
    assert argv[argv.index("--output_dir") + 1] == str(tmp_path / "eng")
    assert argv[argv.index("--output_timing_cache") + 1] == str(tmp_path / "t" / "model.cache")


def test_no_strongly_typed_flag(tmp_path):
    """trtllm-build 1.2 hard-codes strongly_typed=True and has no such flag (removed in 0.11)."""
    argv = build_command(trtllm_spec(tmp_path).build, CKPT, ENGINE, None, OUT_CACHE)
    assert not any("strongly_typed" in a for a in argv)
