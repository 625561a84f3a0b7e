"""fetch + convert on the real SmolLM2 weights, through the stages and the CLI."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from pipeline.artifacts import Manifest
from pipeline.errors import ArtifactError
from pipeline.stages import convert
from tests.conftest import REPO, make_spec


def _cli(*args, workdir):
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args, f"workdir={workdir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_fetch_manifest_records_every_file(smollm_hf_dir):
    manifest = Manifest.read(smollm_hf_dir)
    assert manifest.status == "ok"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(manifest.outputs)
    (gguf_sha,) = manifest.extra["source_files"].values()
    assert gguf_sha == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    hf_config = json.loads((smollm_hf_dir / "config.json").read_text())
    assert hf_config["rope_theta"] == 100000.0  # written top-level for 4.x readers


def test_checkpoint_holds_the_real_weights(smollm_hf_dir, smollm_ckpt_dir):
    cfg = json.loads((smollm_ckpt_dir / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (
        30,
        9,
        3,
    )
    assert cfg["rotary_base"] == 100000.0 and cfg["tie_word_embeddings"] is True
    rank0 = load_file(smollm_ckpt_dir / "rank0.safetensors")
    hf = load_file(smollm_hf_dir / "model.safetensors")
    assert torch.equal(rank0["lm_head.weight"], hf["model.embed_tokens.weight"])
    assert torch.equal(
        rank0["transformer.layers.29.mlp.fc.weight"], hf["model.layers.29.mlp.gate_proj.weight"]
    )


def test_pipeline_parallel_shards_real_weights(session_workdir, smollm_hf_dir):
    out = convert.run(
        make_spec("convert", "parallel.pp_size=2", "parallel.tp_size=3", workdir=session_workdir)
    )
    assert sorted(p.name for p in out.glob("rank*")) == [f"rank{r}.safetensors" for r in range(6)]
    hf = load_file(smollm_hf_dir / "model.safetensors")
    rank5 = load_file(out / "rank5.safetensors")  # pp rank 1, tp rank 2: layers 15..29
    assert "transformer.vocab_embedding.weight" not in rank5
    assert torch.equal(
        rank5["transformer.layers.14.post_layernorm.weight"],
        hf["model.layers.29.post_attention_layernorm.weight"],
    )
    q = hf["model.layers.15.self_attn.q_proj.weight"]
    assert torch.equal(rank5["transformer.layers.0.attention.qkv.weight"][:192], q[384:])


def test_rerun_is_up_to_date_and_bad_tp_is_one_clear_line(session_workdir, smollm_ckpt_dir):
    again = _cli("convert", workdir=session_workdir)
    assert again.returncode == 0, again.stderr
    assert "convert: up to date" in again.stdout + again.stderr
    bad = _cli("convert", "parallel.tp_size=2", workdir=session_workdir)
    assert bad.returncode == 1
    assert "num_attention_heads=9 is not divisible by tp_size=2" in bad.stdout + bad.stderr
    assert "Traceback" not in bad.stdout + bad.stderr


def test_corrupted_input_fails_and_keeps_previous_checkpoint(
    session_workdir, smollm_hf_dir, smollm_ckpt_dir, tmp_path
):
    workdir = tmp_path / "w"
    for stage_dir in (smollm_hf_dir, smollm_ckpt_dir):  # hard links: GBs are not copied
        shutil.copytree(stage_dir, workdir / "smollm2-135m" / stage_dir.name, copy_function=os.link)
    fetched = workdir / "smollm2-135m" / smollm_hf_dir.name
    ckpt = workdir / "smollm2-135m" / smollm_ckpt_dir.name
    before = (ckpt / "rank0.safetensors").stat().st_mtime_ns
    weights = fetched / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.unlink()  # may be a hard link shared with the session copy
    weights.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="model.safetensors: sha256 differs"):
        convert.run(make_spec("convert", "force=true", workdir=workdir))
    assert (ckpt / "rank0.safetensors").stat().st_mtime_ns == before
    assert Manifest.read(ckpt).status == "ok"
