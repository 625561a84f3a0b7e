"""The OpenAI frontend's own host cost: CPU microseconds per request and per streamed token.

    python -m scripts.bench_openai_overhead --out DIR [--before-tree DIR] [--tiny]

The frontend (pipeline/openai_api, one uvicorn process built as the serve stage builds it:
scripts/openai_overhead_frontend.py) runs in front of a Triton stand-in that replays the
served model's gRPC response stream at once (scripts/openai_overhead_triton.py), so no model's
time is in the numbers; a client process streams POST /v1/completions as the bench's OpenAI
target does (token-id prompts, ignore_eos, stream_options.continuous_usage_stats). What is
measured is the frontend process's CPU time (user + system, psutil) over the timed requests:
- per request: --requests requests of max_tokens=1 (the cost of a request with one token);
- per token: --requests requests of --max-tokens tokens; the marginal cost of a streamed token
  is (CPU - requests x per-request CPU) / (tokens - requests).
--before-tree measures another source tree's frontend (e.g. `git archive <commit> | tar -x -C
DIR`) in the same run, alternating with this tree's, --rounds times each (the median is kept).
Writes openai_overhead.json and openai_overhead.md. --tiny: a few hundred requests (CPU, under a
minute; the unit test).
"""

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from pipeline.server.ports import free_ports
from scripts.model_shapes import write_tokenizer

REPO = Path(__file__).resolve().parent.parent
VOCAB_SIZE = 1024
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Load:
    concurrency: int
    num_requests: int
    max_tokens: int
    tokens_per_response: int = 1


async def _one(reader, writer, body: bytes) -> tuple[int, bool]:
    """(SSE events, saw [DONE]) of one streamed request on a kept-alive connection."""
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"frontend answered {status!r}")
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    events, done = 0, False
    while True:  # chunked transfer encoding: size line, data, CRLF; a 0 size ends it
        size = int((await reader.readline()).strip(), 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return events, done
        events += data.count(b"data: ")
        done = done or b"[DONE]" in data


async def _drive(port: int, load: Load) -> dict:
    body = json.dumps(
        {
            "model": "bench",
            "prompt": list(range(100, 164)),
            "max_tokens": load.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    ).encode()
    left = [load.num_requests]
    errors: list[str] = []

    async def worker() -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        num_events = 0
        try:
            while left[0] > 0:
                left[0] -= 1
                try:
                    events, done = await _one(reader, writer, body)
                except Exception as exc:  # noqa: BLE001 - counted; the run's result says how many
                    errors.append(repr(exc))
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                num_events += events
                if not done:
                    errors.append("a stream ended without [DONE]")
        finally:
            writer.close()
        return num_events

    start = time.perf_counter()
    events = await asyncio.gather(*(worker() for _ in range(load.concurrency)))
    return {"wall_s": time.perf_counter() - start, "events": sum(events), "errors": errors}


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _measure(port: int, process: psutil.Process, load: Load) -> dict:
    before = _cpu_s(process)
    result = asyncio.run(_drive(port, load))
    cpu = _cpu_s(process) - before
    return {
        **asdict(load),
        "cpu_s": cpu,
        "wall_s": result["wall_s"],
        "events": result["events"],
        "num_errors": len(result["errors"]),
        "first_error": result["errors"][0] if result["errors"] else None,
        "tokens": load.num_requests * load.max_tokens,
        "out_tok_s": load.num_requests * load.max_tokens / result["wall_s"],
    }


def _wait_listening(port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the {what} exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {what} did not listen on {port}") from None
            time.sleep(0.2)


def measure_tree(tree: Path, tokenizer: Path, grpc_port: int, loads: dict, warmup: Load) -> dict:
    """One frontend process of `tree`: warm-up, then each load; CPU per request and per token."""
    (port,) = free_ports(1)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "openai_overhead_frontend.py"),
        f"--port={port}",
        f"--grpc-url=127.0.0.1:{grpc_port}",
        f"--tokenizer-dir={tokenizer}",
        f"--vocab-size={VOCAB_SIZE}",
    ]
    proc = subprocess.Popen(cmd, env=env, cwd=tempfile.gettempdir())
    try:
        _wait_listening(port, proc, "frontend")
        process = psutil.Process(proc.pid)
        _measure(port, process, warmup)
        runs = {name: _measure(port, process, load) for name, load in loads.items()}
    finally:
        proc.terminate()
        proc.wait(30)
    one, many = runs["per_request"], runs["per_token"]
    per_request_us = one["cpu_s"] / one["num_requests"] * 1e6
    extra_tokens = many["tokens"] - many["num_requests"]
    per_token_us = (many["cpu_s"] * 1e6 - many["num_requests"] * per_request_us) / extra_tokens
    return {
        "per_request_us": per_request_us,
        "per_token_us": per_token_us,
        "cpu_us_per_token_all_in": many["cpu_s"] / many["tokens"] * 1e6,
        "runs": runs,
    }


def _median_of(rounds: list[dict]) -> dict:
    keys = ("per_request_us", "per_token_us", "cpu_us_per_token_all_in")
    out = {k: statistics.median(r[k] for r in rounds) for k in keys}
    out["num_errors"] = sum(run["num_errors"] for r in rounds for run in r["runs"].values())
    out["out_tok_s"] = statistics.median(r["runs"]["per_token"]["out_tok_s"] for r in rounds)
    out["rounds"] = rounds
    return out


def markdown(result: dict) -> str:
    trees = result["trees"]
    lines = [
        "# OpenAI frontend: host CPU per request and per streamed token",
        "",
        f"Host: {result['host_cpus']} CPUs; loads: {result['loads']}; "
        f"median of {result['rounds']} round(s). The Triton stand-in replays the model's "
        f"responses at once, so the frontend's own CPU time is what is counted.",
        "",
        "| tree | CPU us / request | CPU us / streamed token | CPU us / token (all in) "
        "| out tok/s (frontend-bound) | errors |",
        "|---|---|---|---|---|---|",
    ]
    for name, t in trees.items():
        lines.append(
            f"| {name} | {t['per_request_us']:.0f} | {t['per_token_us']:.1f} | "
            f"{t['cpu_us_per_token_all_in']:.1f} | {t['out_tok_s']:,.0f} | {t['num_errors']} |"
        )
    if "before" in trees:
        b, a = trees["before"], trees["this"]
        lines += [
            "",
            f"This tree / before: per request {a['per_request_us'] / b['per_request_us']:.2f}x, "
            f"per token {a['per_token_us'] / b['per_token_us']:.2f}x CPU.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--before-tree", type=Path, default=None)
    parser.add_argument("--tiny", action="store_true", help="a few hundred requests (CPU test)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=2048)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.tiny:
        args.concurrency, args.requests, args.max_tokens, args.rounds = 8, 64, 32, 1
    loads = {
        "per_request": Load(args.concurrency, args.requests, 1),
        "per_token": Load(args.concurrency, args.requests, args.max_tokens),
    }
    warmup = Load(args.concurrency, args.concurrency * 2, 8)
    args.out.mkdir(parents=True, exist_ok=True)
    trees = {"this": REPO}
    if args.before_tree is not None:
        trees = {"before": args.before_tree.resolve(), **trees}
    with tempfile.TemporaryDirectory(prefix="openai-overhead-") as tmp:
        tokenizer = write_tokenizer(VOCAB_SIZE, Path(tmp) / "tokenizer")
        (grpc_port,) = free_ports(1)
        triton = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "scripts" / "openai_overhead_triton.py"),
                f"--port={grpc_port}",
                f"--vocab-size={VOCAB_SIZE}",
            ]
        )
        try:
            _wait_listening(grpc_port, triton, "Triton stand-in")
            rounds: dict[str, list] = {name: [] for name in trees}
            for _ in range(args.rounds):  # alternating: drift on a shared host hits both
                for name, tree in trees.items():
                    rounds[name].append(measure_tree(tree, tokenizer, grpc_port, loads, warmup))
        finally:
            triton.terminate()
            triton.wait(30)
    result = {
        "host_cpus": os.cpu_count(),
        "rounds": args.rounds,
        "loads": {k: asdict(v) for k, v in loads.items()},
        "trees": {name: _median_of(r) for name, r in rounds.items()},
    }
    (args.out / "openai_overhead.json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    (args.out / "openai_overhead.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
