"""BuildSpec -> the exact `trtllm-build` command line of TensorRT-LLM 1.2.x.

Flags, value spellings and defaults: docs/trtllm_reference.md, section 2.

Every knob is passed explicitly, so the engine does not depend on trtllm-build's defaults drifting
between versions. Paths are made absolute: `--output_timing_cache` defaults to `model.cache` in the
current directory otherwise.
"""

from pathlib import Path

from pipeline.specs.build import BuildSpec
from pipeline.trtllm.memory_settings import weight_streaming

EXECUTABLE = "trtllm-build"
FEATURE_FLAGS = (
    "context_fmha",
    "use_paged_context_fmha",
    "use_fused_mlp",
    "remove_input_padding",
    "multiple_profiles",
    "reduce_fusion",
    "user_buffer",
)


def build_command(
    build: BuildSpec,
    checkpoint_dir: Path,
    output_dir: Path,
    input_timing_cache: Path | None,
    output_timing_cache: Path,
) -> list[str]:
    opts = build.trtllm
    argv = [
        EXECUTABLE,
        "--checkpoint_dir",
        str(Path(checkpoint_dir).resolve()),
        "--output_dir",
        str(Path(output_dir).resolve()),
        "--max_batch_size",
        str(build.max_batch_size),
        "--max_input_len",
        str(build.max_input_len),
        "--max_seq_len",
        str(build.max_seq_len),
        "--max_num_tokens",
        str(build.max_num_tokens),
        "--max_beam_width",
        str(build.max_beam_width),
    ]
    if opts.opt_num_tokens is not None:
        argv += ["--opt_num_tokens", str(opts.opt_num_tokens)]
    argv += [
        "--kv_cache_type",
        build.kv_cache_type,
        "--tokens_per_block",
        str(build.tokens_per_block),
        "--gpt_attention_plugin",
        opts.gpt_attention_plugin,
    ]
    # gemm_plugin: leaving the flag out is trtllm-build's "no plugin", except that NVFP4
    # checkpoints then get the nvfp4 GEMM; an explicit `disable` would switch that off too
    if opts.gemm_plugin != "disable":
        argv += ["--gemm_plugin", opts.gemm_plugin]
    argv += ["--gemm_swiglu_plugin", opts.gemm_swiglu_plugin]
    for name in FEATURE_FLAGS:
        argv += [f"--{name}", getattr(opts, name)]
    if weight_streaming(build):  # asked for, or a GPU weight budget
        argv.append("--weight_streaming")
    if opts.gather_context_logits:
        argv.append("--gather_context_logits")
    argv += _lora_args(build)
    if opts.speculative_decoding_mode is not None:
        argv += [
            "--speculative_decoding_mode",
            opts.speculative_decoding_mode,
            "--max_draft_len",
            str(opts.max_draft_len),
        ]
    argv += ["--workers", str(opts.workers), "--log_level", opts.log_level]
    if input_timing_cache is not None:
        argv += ["--input_timing_cache", str(Path(input_timing_cache).resolve())]
    argv += ["--output_timing_cache", str(Path(output_timing_cache).resolve())]
    return argv


def _lora_args(build: BuildSpec) -> list[str]:
    opts = build.trtllm
    if opts.lora_plugin == "disable":
        return []
    args = ["--lora_plugin", opts.lora_plugin]
    if opts.lora_dir:
        args += ["--lora_dir", *(str(Path(d).resolve()) for d in opts.lora_dir)]
    if opts.lora_target_modules:
        args += ["--lora_target_modules", *opts.lora_target_modules]
    return args + ["--max_lora_rank", str(opts.max_lora_rank)]
