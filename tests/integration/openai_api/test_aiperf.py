"""AIPerf, NVIDIA's LLM benchmark client, against the frontend, beside the project's own bench
(the bench stage, bench.target=openai) on the same workload and the same tritonserver: the two
clients measure the same service alike (docs/perf/openai-aiperf-cpu.md).

The workload: synthetic prompts of INPUT_LEN tokens, OUTPUT_LEN tokens each (EOS off), streamed
from /v1/completions, CONCURRENCY at a time. AIPerf sends text (its own synthetic corpus) and
counts tokens as the server reports them (--use-server-token-count); the bench sends token ids.
"""

import json
import os
import subprocess
import tempfile

import pytest

from pipeline.server.ports import free_ports
from pipeline.stages import bench
from tests.conftest import make_spec
from tests.integration.openai_api.aiperf_venv import AIPerfUnavailable, ensure_venv
from tests.integration.openai_api.conftest import API_KEY, KEY_ENV

pytestmark = [pytest.mark.triton, pytest.mark.slow]
INPUT_LEN, OUTPUT_LEN, CONCURRENCY, NUM_REQUESTS, NUM_WARMUP = 32, 16, 2, 12, 2
AIPERF_TIMEOUT_S = 600
# how far AIPerf may lie outside the bench's two runs, each way: on 2 cores AIPerf's own
# processes take about a third of a core from the engine while it measures, so it sees a slower
# server, by 5% on an idle machine and up to 30% beside a busy core
# (docs/perf/openai-aiperf-cpu.md)
MARGINS = {"output_tok_s": 0.5, "ttft_ms_p50": 0.75, "itl_ms_p50": 0.5}


@pytest.fixture(scope="module")
def aiperf_python():
    try:
        return ensure_venv()
    except AIPerfUnavailable as exc:
        pytest.skip(f"AIPerf's venv cannot be built here: {exc}")


def run_aiperf(python, api, model_name: str, tokenizer_dir: str, out_dir) -> dict:
    argv = [
        str(python), "-m", "aiperf", "profile",
        "--model", model_name,
        "--url", api.url,
        "--api-key", API_KEY,
        "--endpoint-type", "completions",
        "--streaming",
        "--tokenizer", tokenizer_dir,
        "--synthetic-input-tokens-mean", str(INPUT_LEN),
        "--synthetic-input-tokens-stddev", "0",
        "--output-tokens-mean", str(OUTPUT_LEN),
        "--output-tokens-stddev", "0",
        "--extra-inputs", "ignore_eos:true",
        "--use-server-token-count",
        "--concurrency", str(CONCURRENCY),
        "--request-count", str(NUM_REQUESTS),
        "--warmup-request-count", str(NUM_WARMUP),
        "--random-seed", "0",
        "--artifact-dir", str(out_dir),
        "--ui-type", "none",
        "--no-server-metrics",
        "--no-gpu-telemetry",
    ]  # fmt: skip
    # AIPerf 0.13 in HF offline mode takes a local tokenizer directory for a hub id and fails;
    # a local directory never goes to the hub anyway
    offline = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    env = {k: v for k, v in os.environ.items() if k not in offline}
    # AIPerf leaves its scratch dirs (aiperf_mmap_*) in TMPDIR; a short path, as its ZMQ IPC
    # sockets live there too and a socket path has at most 107 characters
    with tempfile.TemporaryDirectory(prefix="aiperf-") as scratch:
        env["TMPDIR"] = scratch
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=AIPERF_TIMEOUT_S, env=env, check=False
        )
    assert done.returncode == 0, f"aiperf exited {done.returncode}:\n{done.stdout[-3000:]}"
    export = json.loads((out_dir / "profile_export_aiperf.json").read_text())
    return {
        "num_requests": export["request_count"]["avg"],
        "error_rate_pct": export["request_error_rate"]["avg"],
        "input_len": export["usage_prompt_tokens"]["avg"],
        "output_len": export["usage_completion_tokens"]["avg"],
        "output_tok_s": export["output_token_throughput"]["avg"],
        "ttft_ms_p50": export["time_to_first_token"]["p50"],
        "itl_ms_p50": export["inter_token_latency"]["p50"],
    }


def run_bench(session_workdir, served_overrides, triton) -> dict:
    """The bench stage, bench.target=openai, with a frontend of its own (the package's config)
    in front of the package's tritonserver."""
    (port,) = free_ports(1)
    spec = make_spec(
        "bench",
        *served_overrides,
        f"serve.openai.port={port}",
        "bench.target=openai",
        f"bench.server_url={triton.endpoints.grpc_url}",
        f"bench.input_len={INPUT_LEN}",
        f"bench.output_len={OUTPUT_LEN}",
        f"bench.concurrency={CONCURRENCY}",
        f"bench.num_requests={NUM_REQUESTS}",
        f"bench.num_warmup_requests={NUM_WARMUP}",
        "force=true",
        workdir=session_workdir,
    )
    os.environ[KEY_ENV] = API_KEY
    try:
        out = bench.run(spec)
    finally:
        del os.environ[KEY_ENV]
    summary = json.loads((out / "bench.json").read_text())["targets"]["openai"]["summary"]
    return {
        "num_requests": summary["num_ok"],
        "num_errors": summary["num_errors"],
        "output_len": summary["num_output_tokens"] / summary["num_ok"],
        **{key: summary[key] for key in MARGINS},
    }


def test_aiperf_and_the_project_bench_measure_the_frontend_alike(
    aiperf_python, api, model_name, facts, session_workdir, served_overrides, triton, tmp_path
):
    """AIPerf runs between two runs of the bench, whose spread is how much the machine's pace
    moved meanwhile; AIPerf's numbers must lie within that spread, widened by MARGINS."""
    before = run_bench(session_workdir, served_overrides, triton)
    aiperf = run_aiperf(aiperf_python, api, model_name, facts["tokenizer_dir"], tmp_path / "ap")
    after = run_bench(session_workdir, served_overrides, triton)
    side_by_side = {key: (aiperf[key], before[key], after[key]) for key in MARGINS}
    print(f"aiperf, bench before, bench after ({INPUT_LEN}/{OUTPUT_LEN}): {side_by_side}")
    assert aiperf["num_requests"] == before["num_requests"] == after["num_requests"]
    assert aiperf["num_requests"] == NUM_REQUESTS
    assert aiperf["error_rate_pct"] == 0 and before["num_errors"] == after["num_errors"] == 0
    assert aiperf["input_len"] == INPUT_LEN  # as the server counted AIPerf's text prompts
    assert aiperf["output_len"] == before["output_len"] == OUTPUT_LEN
    for key, margin in MARGINS.items():
        low, high = sorted((before[key], after[key]))
        assert low / (1 + margin) <= aiperf[key] <= high * (1 + margin), (key, side_by_side)
