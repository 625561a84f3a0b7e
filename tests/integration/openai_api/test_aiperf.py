"""AIPerf, NVIDIA's LLM benchmark client, against the frontend: it runs unchanged, counts what the
server counted, and times the requests as the frontend's own metrics time the same requests
(docs/perf/openai-aiperf-cpu.md).

The workload: synthetic prompts of INPUT_LEN tokens, OUTPUT_LEN tokens each (EOS off), streamed
from /v1/completions, CONCURRENCY at a time. AIPerf sends text (its own synthetic corpus) and
counts tokens as the server reports them (--use-server-token-count).

Both sides of each comparison see one run, so a machine that slows down meanwhile (the suite's
other worker, other jobs) moves both alike: the margins only hold what lies between the server's
clock and AIPerf's (HTTP, AIPerf's own processes waiting for a core).
"""

import json
import os
import subprocess
import tempfile

import pytest

from pipeline.client.metrics import fetch_metrics, metric_value
from tests.integration.openai_api.aiperf_venv import AIPerfUnavailable, ensure_venv
from tests.integration.openai_api.conftest import API_KEY

pytestmark = [pytest.mark.triton, pytest.mark.slow]
INPUT_LEN, OUTPUT_LEN, CONCURRENCY, NUM_REQUESTS = 32, 16, 2, 12
AIPERF_TIMEOUT_S = 600
# what AIPerf's clock adds to the server's: the request's way in and the first chunk's way out
# for TTFT, a share of a token's time for ITL; AIPerf's seven processes waiting on a busy 2-core
# machine can add tens of milliseconds to any one arrival. A token counted twice, a chunk per two
# tokens or TTFT taken at the response headers are each off by far more.
TTFT_ADDED_MS = (-5.0, 250.0)
ITL_RATIO = (0.8, 1.25)


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
        "ttft_ms_mean": export["time_to_first_token"]["avg"],
        "itl_ms_mean": export["inter_token_latency"]["avg"],
    }


def frontend_totals(api) -> dict:
    """The frontend's running sums: tokens and the sum and count of its TTFT and time-per-token
    histograms."""
    samples = fetch_metrics(f"{api.url}/metrics", timeout_s=30)
    return {
        "prompt_tokens": metric_value(samples, "pipeline_openai_prompt_tokens_total"),
        "completion_tokens": metric_value(samples, "pipeline_openai_completion_tokens_total"),
        **{
            f"{name}_{part}": metric_value(samples, f"pipeline_openai_{metric}_seconds_{part}")
            for name, metric in (("ttft", "time_to_first_token"), ("tpot", "time_per_output_token"))
            for part in ("sum", "count")
        },
    }


def test_aiperf_counts_and_times_the_requests_as_the_frontend_does(
    aiperf_python, api, model_name, facts, tmp_path
):
    before = frontend_totals(api)
    aiperf = run_aiperf(aiperf_python, api, model_name, facts["tokenizer_dir"], tmp_path / "ap")
    after = frontend_totals(api)
    served = {key: after[key] - before[key] for key in after}
    server_ttft_ms = served["ttft_sum"] / served["ttft_count"] * 1e3
    server_itl_ms = served["tpot_sum"] / served["tpot_count"] * 1e3
    side_by_side = {
        "ttft_ms_mean": (aiperf["ttft_ms_mean"], server_ttft_ms),
        "itl_ms_mean": (aiperf["itl_ms_mean"], server_itl_ms),
    }
    print(f"AIPerf, frontend ({INPUT_LEN}/{OUTPUT_LEN}): {side_by_side}")
    assert aiperf["num_requests"] == NUM_REQUESTS and aiperf["error_rate_pct"] == 0
    assert served["ttft_count"] == served["tpot_count"] == NUM_REQUESTS
    assert aiperf["input_len"] == INPUT_LEN  # as the server counted AIPerf's text prompts
    assert aiperf["output_len"] == OUTPUT_LEN
    assert served["prompt_tokens"] == NUM_REQUESTS * INPUT_LEN
    assert served["completion_tokens"] == NUM_REQUESTS * OUTPUT_LEN
    assert aiperf["output_tok_s"] > 0
    low, high = TTFT_ADDED_MS
    assert low <= aiperf["ttft_ms_mean"] - server_ttft_ms <= high, side_by_side
    low, high = ITL_RATIO
    assert low <= aiperf["itl_ms_mean"] / server_itl_ms <= high, side_by_side
