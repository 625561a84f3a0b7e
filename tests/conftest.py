"""Shared fixtures: the real config, shrunk; one fetched/converted SmolLM2 per session.

Add fixtures here with small targeted edits; several engineers share this file.
"""

import subprocess
from pathlib import Path

import pytest
import torch

from pipeline.server.ports import free_ports

REPO = Path(__file__).resolve().parent.parent


def hf_greedy_tokens(hf_dir: Path, prompt_ids, eos_token_ids, max_new_tokens: int) -> list:
    """transformers' greedy tokens, one prompt at a time, cut before eos (the engine drops it)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    return greedy_tokens_of(model, prompt_ids, eos_token_ids, max_new_tokens)


def greedy_tokens_of(model, prompt_ids, eos_token_ids, max_new_tokens: int) -> list:
    """A loaded transformers model's greedy tokens, one prompt at a time, cut before eos."""
    eos, refs = set(eos_token_ids), []
    for ids in prompt_ids:
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids)),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=eos_token_ids[0],
            )
        tokens = out[0, len(ids) :].tolist()
        refs.append(tokens[: next((i for i, t in enumerate(tokens) if t in eos), len(tokens))])
    return refs


def run_tiny_script(module: str, out_dir: Path, *args: str, timeout_s: int = 300) -> None:
    """`python -m module --out out_dir --tiny [args]` in a subprocess, as the GPU machine runs it
    (no inherited environment: what the script needs, it imports itself)."""
    import sys

    done = subprocess.run(
        [sys.executable, "-m", module, "--out", str(out_dir), "--tiny", *args],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=timeout_s,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]


CONF_DIR = str(REPO / "conf")

torch.set_num_threads(1)  # 2 shared cores: one thread per process avoids contention collapse


def make_spec(stage: str, *overrides: str, workdir: Path):
    """The real Hydra config for `stage`, with overrides, as frozen specs."""
    # imported here: the GPU machine runs `pytest -m gpu` without hydra installed
    from hydra import compose, initialize_config_dir

    from pipeline.config import to_specs

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"stage={stage}", f"workdir={workdir}", *overrides])
    return to_specs(cfg)


@pytest.fixture(scope="session")
def session_workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("workdir")


@pytest.fixture(scope="session")
def smollm_hf_dir(session_workdir) -> Path:
    """SmolLM2-135M-Instruct as a plain HF safetensors dir (fp32), fetched once per session."""
    from pipeline.stages import fetch

    return fetch.run(make_spec("fetch", workdir=session_workdir))


@pytest.fixture(scope="session")
def smollm_ckpt_dir(session_workdir, smollm_hf_dir) -> Path:
    """SmolLM2 as a TensorRT-LLM checkpoint (fp32, tp=1, pp=1)."""
    from pipeline.stages import convert

    return convert.run(make_spec("convert", workdir=session_workdir))


# limits of the shared SmolLM2 torch engine: small, so CPU tests stay fast; 16-token KV blocks
SMOLLM_ENGINE_OVERRIDES = (
    "backend=torch",
    "build.max_batch_size=8",
    "build.max_input_len=192",
    "build.max_seq_len=256",
    "build.max_num_tokens=256",
    "build.tokens_per_block=16",
)


@pytest.fixture(scope="session")
def smollm_engine_dir(session_workdir, smollm_ckpt_dir) -> Path:
    """SmolLM2 fp32 built by the build stage with backend=torch (SMOLLM_ENGINE_OVERRIDES)."""
    from pipeline.stages import build

    return build.run(make_spec("build", *SMOLLM_ENGINE_OVERRIDES, workdir=session_workdir))


@pytest.fixture(scope="session")
def smollm_beam_engine_dir(session_workdir, smollm_ckpt_dir) -> Path:
    """The shared SmolLM2 engine's limits, built for beam search up to width 4."""
    from pipeline.stages import build

    overrides = (*SMOLLM_ENGINE_OVERRIDES, "build.max_beam_width=4")
    return build.run(make_spec("build", *overrides, workdir=session_workdir))


@pytest.fixture(scope="session")
def bench_overrides(session_workdir) -> tuple[str, ...]:
    """bench/profile/sweep/regress on the shared engine, with a private repository and ports;
    one torch thread in the served model too, as in this process (a like-for-like ratio)."""
    http, grpc, metrics = free_ports(3)
    return (
        *SMOLLM_ENGINE_OVERRIDES,
        "deploy.torch.num_threads=1",
        f"deploy.repo_dir={session_workdir / 'bench_model_repo'}",
        f"deploy.http_port={http}",
        f"deploy.grpc_port={grpc}",
        f"deploy.metrics_port={metrics}",
    )


@pytest.fixture(scope="session")
def bench_profile_dir(session_workdir, smollm_engine_dir, bench_overrides) -> Path:
    """One `profile` run (bench=smoke through the real server and in-process, sampler on); the
    bench and regress tests read it instead of measuring again."""
    from pipeline.stages import profile

    # two client processes send the server's requests (the path a GPU bench takes by default);
    # Triton traces every second request
    overrides = (*bench_overrides, "bench.client_processes=2", "bench.trace_rate=2")
    return profile.run(make_spec("profile", *overrides, workdir=session_workdir))


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A real 512 KiB filesystem (tmpfs), so writers hit a real ENOSPC; skipped where mounting
    is not permitted."""
    mount_point = tmp_path / "small_disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        # lazy: a writer that failed may still hold its file open until collected
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


def pytest_terminal_summary(terminalreporter):
    """A summary a test recorded for the log (record_property("summary", text)), printed at the
    end of the run, passed or failed; under pytest-xdist too, where a worker's prints are lost."""
    for reports in list(terminalreporter.stats.values()):
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for key, text in getattr(report, "user_properties", ()):
                if key == "summary":
                    terminalreporter.write_sep("-", f"summary of {report.nodeid}")
                    terminalreporter.write_line(str(text))


def served_smollm_spec(workdir: Path, repo_name: str, *overrides: str):
    """The serve spec of the shared SmolLM2 engine on a private repository and free ports, one
    torch thread in the served model."""
    http, grpc, metrics = free_ports(3)
    return make_spec(
        "serve",
        *SMOLLM_ENGINE_OVERRIDES,
        f"deploy.repo_dir={workdir / repo_name}",
        f"deploy.http_port={http}",
        f"deploy.grpc_port={grpc}",
        f"deploy.metrics_port={metrics}",
        "deploy.torch.num_threads=1",
        *overrides,
        workdir=workdir,
    )
