"""Shared helpers for the TensorRT-LLM contract tests (plain functions; fixtures live in the tests).

The fake `trtllm-build` below is the one allowed stand-in for TensorRT-LLM, which cannot be
installed here. It is only ever put on PATH by tests.
"""

import json
import os
import stat
import sys
from pathlib import Path

from tests.conftest import REPO, make_spec

FIXTURE_ENGINE = REPO / "tests" / "fixtures" / "trtllm_engine"


def trtllm_spec(workdir: Path, *overrides: str):
    """The real config with backend=trtllm; hardware=cpu unless overridden (no GPU rules)."""
    hardware = [] if any(o.startswith("hardware=") for o in overrides) else ["hardware=cpu"]
    return make_spec("build", "backend=trtllm", *hardware, *overrides, workdir=workdir)


def checkpoint_config(**overrides) -> dict:
    """A TensorRT-LLM checkpoint config.json (reference 1.2), SmolLM2-135M shaped, bfloat16."""
    config = {
        "architecture": "LlamaForCausalLM",
        "dtype": "bfloat16",
        "logits_dtype": "float32",
        "vocab_size": 49152,
        "hidden_size": 576,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_size": 64,
        "intermediate_size": 1536,
        "hidden_act": "silu",
        "norm_epsilon": 1e-5,
        "position_embedding_type": "rope_gpt_neox",
        "max_position_embeddings": 8192,
        "rotary_base": 100000.0,
        "rotary_scaling": None,
        "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
        "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
    }
    config.update(overrides)
    return config


def write_checkpoint(ckpt_dir: Path, ranks: int | None = None, **overrides) -> Path:
    """config.json + empty rank<N>.safetensors (preflight checks presence, never reads them)."""
    config = checkpoint_config(**overrides)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    (ckpt_dir / "config.json").write_text(json.dumps(config))
    for rank in range(config["mapping"]["world_size"] if ranks is None else ranks):
        (ckpt_dir / f"rank{rank}.safetensors").write_bytes(b"")
    return ckpt_dir


FAKE_TRTLLM_BUILD = '''
"""Test stand-in for TensorRT-LLM 1.2's trtllm-build: records its argv and writes what the real one
writes (docs/trtllm_reference.md, section 4.1): <output_dir>/config.json {version,
pretrained_config, build_config}, rank<N>.engine per rank (placeholder bytes, not TensorRT
plans), and the timing cache at --output_timing_cache (the input cache's content plus one line,
so reuse is visible)."""
import argparse, json, os, sys
from pathlib import Path

with open(os.environ["FAKE_TRTLLM_RECORD"], "a") as f:
    f.write(json.dumps(sys.argv) + "\\n")
print("[TRT-LLM] fake trtllm-build starting")
if os.environ.get("FAKE_TRTLLM_EXIT", "0") != "0":
    print("[TRT-LLM] [E] simulated build failure", file=sys.stderr)
    sys.exit(int(os.environ["FAKE_TRTLLM_EXIT"]))
p = argparse.ArgumentParser()
for name in ("checkpoint_dir", "output_dir", "input_timing_cache", "output_timing_cache",
             "kv_cache_type", "gpt_attention_plugin", "remove_input_padding", "context_fmha",
             "use_paged_context_fmha"):
    p.add_argument("--" + name)
for name in ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens", "max_beam_width",
             "tokens_per_block"):
    p.add_argument("--" + name, type=int)
args, _ = p.parse_known_args()
ckpt = json.loads((Path(args.checkpoint_dir) / "config.json").read_text())
out = Path(args.output_dir)
out.mkdir(parents=True, exist_ok=True)
plugin = {"dtype": ckpt["dtype"], "gpt_attention_plugin": args.gpt_attention_plugin,
          "remove_input_padding": args.remove_input_padding == "enable",
          "context_fmha": args.context_fmha == "enable",
          "use_paged_context_fmha": args.use_paged_context_fmha == "enable",
          "tokens_per_block": args.tokens_per_block}
build = {k: getattr(args, k) for k in ("max_batch_size", "max_input_len", "max_seq_len",
                                       "max_num_tokens", "max_beam_width")}
build.update(kv_cache_type=args.kv_cache_type.upper(), plugin_config=plugin, strongly_typed=True)
(out / "config.json").write_text(json.dumps({"version": os.environ.get("FAKE_TRTLLM_VERSION",
    "1.2.1"), "pretrained_config": ckpt, "build_config": build}))
for rank in range(ckpt["mapping"]["world_size"]):
    (out / f"rank{rank}.engine").write_bytes(b"fake plan for rank %d" % rank)
previous = b""
if args.input_timing_cache and Path(args.input_timing_cache).is_file():
    previous = Path(args.input_timing_cache).read_bytes()
Path(args.output_timing_cache).write_bytes(previous + b"tactics\\n")
print("[TRT-LLM] fake trtllm-build done")
'''


def install_fake_trtllm_build(bin_dir: Path, monkeypatch) -> Path:
    """Put the fake trtllm-build first on PATH; returns the file its argv lines are appended to."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "trtllm-build"
    exe.write_text(f"#!{sys.executable}\n{FAKE_TRTLLM_BUILD}")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    record = bin_dir / "argv.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TRTLLM_RECORD", str(record))
    return record
