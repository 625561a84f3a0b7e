"""`python -m pipeline tune` (make tune) on CPU: the serving knobs of the real SmolLM2 engine,
measured with the direct bench, and the overlay it writes composes for `make deploy`."""

import json
import math
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO, SMOLLM_ENGINE_OVERRIDES, make_spec

pytestmark = pytest.mark.slow
ONE_THREAD = "deploy.torch.num_threads=1"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_make_tune_searches_serving_knobs_and_writes_a_deployable_overlay(
    session_workdir, smollm_engine_dir
):
    overrides = (
        *SMOLLM_ENGINE_OVERRIDES,
        ONE_THREAD,
        f"workdir={session_workdir}",
        "tune.anneal.max_trials=3",
        "tune.anneal.repeats=2",
        "tune.serving.max_batch_size=[1,2,4]",  # with the build's 8
        "tune.serving.max_num_tokens=[]",
        "tune.serving.num_scheduler_steps=[]",
    )
    run = cli("tune", *overrides)
    assert run.returncode == 0, run.stderr[-3000:]
    out = next((session_workdir / "smollm2-135m").glob("tune-serving-*"))
    report = json.loads((out / "tune.json").read_text())
    (row,) = report["items"]
    assert row["default"] == {"max_batch_size": 8}
    assert row["num_trials"] == len(row["trials"]) == 3
    assert row["trials"][0]["outcome"] == "initial"
    assert {t["settings"]["max_batch_size"] for t in row["trials"]} <= {1, 2, 4, 8}
    assert math.isfinite(row["default_cost"]) and row["default_cost"] > 0
    assert row["tuned"]["max_batch_size"] in (1, 2, 4, 8)
    assert row["num_accepted"] == sum(t["outcome"] == "accepted" for t in row["trials"])
    assert "| serving (direct) |" in (out / "tune.md").read_text()
    assert (out / "trace.png").stat().st_size > 10_000
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["extra"]["num_trials"] == 3

    overlay = report["overlay"]
    assert overlay["overrides"] == f"build.max_batch_size={row['tuned']['max_batch_size']}"
    assert overlay["path"].startswith(str(out)) and "+tuned=serving" in overlay["with_overlay"]
    text = (out / "conf" / "tuned" / "serving.yaml").read_text()
    assert text.startswith("# @package _global_\n")
    assert yaml.safe_load(text) == {"build": {"max_batch_size": row["tuned"]["max_batch_size"]}}
    searchpath = overlay["with_overlay"].split("'")[1]
    composed = cli(
        "deploy", searchpath, "+tuned=serving", f"workdir={session_workdir}", "--cfg", "job"
    )
    assert composed.returncode == 0, composed.stderr[-2000:]
    assert f"max_batch_size: {row['tuned']['max_batch_size']}\n" in composed.stdout


def test_a_candidate_whose_requests_cannot_run_fails_the_gate(session_workdir, smollm_engine_dir):
    from pipeline.bench.runner import prompt_maker
    from pipeline.bench.session import Workload
    from pipeline.tune.serving_space import ServingSpace

    spec = make_spec(
        "tune",
        *SMOLLM_ENGINE_OVERRIDES,
        ONE_THREAD,
        "tune.serving.max_batch_size=[]",
        "tune.serving.max_num_tokens=[]",
        "tune.serving.num_scheduler_steps=[]",
        "tune.serving.num_kv_blocks=[1]",  # 16 tokens: a 16 + 8 token request never fits
        workdir=session_workdir,
    )
    workload = Workload.from_spec(spec.bench, prompt_maker(smollm_engine_dir))
    space = ServingSpace(spec, smollm_engine_dir, workload)
    try:
        assert space.describe(space.initial()) == {"num_kv_blocks": 0}
        reason = space.check((1,))
        assert reason is not None and "requests failed" in reason
        assert space.check(space.initial()) is None
    finally:
        space.close()


def test_kernel_spaces_skip_on_a_cpu_host_with_the_reason(tmp_path):
    for space in ("kernels", "instructions"):
        run = cli("tune", f"tune={space}", f"workdir={tmp_path}")
        assert run.returncode == 0, run.stderr[-2000:]
        assert f"tune: skipped: tune={space} needs a CUDA GPU" in run.stdout
        assert "python -m scripts.tune_kernels" in run.stdout
    assert not (tmp_path / "smollm2-135m").exists()  # nothing built or written


def test_build_puts_the_caches_entries_for_its_shapes_into_the_engine(
    session_workdir, smollm_engine_dir, tmp_path, monkeypatch
):
    """The build's lookup, with this host taken for a GPU host (the environment is the key):
    hits go into the engine dir, the manifest counts hits and misses, and the applied entries
    are part of the build's identity (the plain engine stays as it was)."""
    from pipeline.engine.kernels import toolchain
    from pipeline.engine.kernels.tuned_configs import ENGINE_FILE
    from pipeline.stages import build
    from pipeline.tune.kernel_run import engine_items
    from pipeline.tune.tuning_cache import CacheEntry, TuningCache

    gpu = {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.95.05", "cuda": "13.0"}
    gpu |= {"triton": "3.6.0", "torch": "2.11.0+cu130"}
    monkeypatch.setattr(toolchain, "environment", lambda device_index=0: gpu)
    cache_path = tmp_path / "cache.json"
    spec = make_spec(
        "build",
        *SMOLLM_ENGINE_OVERRIDES,
        f"tune.kernels.cache_path={cache_path}",
        workdir=session_workdir,
    )
    items = engine_items(smollm_engine_dir, spec.tune.kernels)
    cache = TuningCache(cache_path, gpu, {})
    for item in items[:3]:
        source = toolchain.source_hash(item.kernel)
        cache.put(
            CacheEntry(item.kernel, item.key, source, {"num_warps": 2}, {}, 1.0, 0.5, "anneal", 9)
        )
    cache.save()
    engine_dir = build.run(spec)
    assert engine_dir != smollm_engine_dir and not (smollm_engine_dir / ENGINE_FILE).exists()
    record = json.loads((engine_dir / "manifest.json").read_text())["extra"]["kernel_tuning"]
    assert record["num_hits"] == 3 and record["num_misses"] == len(items) - 3
    written = json.loads((engine_dir / ENGINE_FILE).read_text())
    assert written["environment"] == gpu and len(written["entries"]) == 3
    assert build.run(spec) == engine_dir  # up to date: the same cache, the same engine
