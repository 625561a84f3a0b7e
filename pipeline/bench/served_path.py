"""Where a served request's time goes, from the client's records joined with Triton's trace.

With bench.trace_rate=N the bench's own server traces every N-th request (tritonserver
--trace-config, level TIMESTAMPS). Triton stamps with steady_clock and the load generator with
perf_counter: both are CLOCK_MONOTONIC on Linux, one clock for every process of the host, so a
record and its trace (joined by request id, which the client sends) split the request's
end-to-end time into consecutive hops that add up to it:

- client_send: the client sends -> Triton has read the request off the stream;
- to_model: -> the LLM model's execute() starts (ensemble scheduling, waiting for an instance);
- model_execute: Triton's execute of the LLM model: for a python model, the stub's wake-up, its
  execute() (parse, tokenize, hand to the engine) and the completion message's way back, which
  overlaps the engine's work on the request;
- to_first_response: -> Triton starts sending the first response (the engine's first token and
  the model's send; the torch model's log splits it further: LLMService.hops);
- to_final_response: -> Triton starts sending the final one;
- final_to_client: -> the client's load generator holds the final response.
Beside them, first_to_client: the first response's send -> the client holds it (TTFT's last hop).
"""

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.bench.records import RequestRecord

LLM_MODEL = "tensorrt_llm"  # the ensemble's (and the BLS's) LLM step in both backends
HOPS = (  # consecutive: they add up to the end-to-end time
    "client_send",
    "to_model",
    "model_execute",
    "to_first_response",
    "to_final_response",
    "final_to_client",
)
SIDE_HOPS = ("first_to_client",)


def trace_args(trace_file: Path, rate: int) -> tuple[str, ...]:
    """tritonserver flags that trace every rate-th request to trace_file (.0, .1, ... as it goes:
    a server killed at stop still leaves what it wrote)."""
    return (
        f"--trace-config=triton,file={trace_file}",
        "--trace-config=triton,log-frequency=64",
        f"--trace-config=rate={rate}",
        "--trace-config=level=TIMESTAMPS",
    )


def read_trace(trace_file: Path) -> dict[str, dict[str, list[int]]]:
    """Triton's trace files -> {request id: {event: [ns, ...]}}: the top request's events (its
    gRPC reads and sends), with its LLM step's COMPUTE_* events under "llm:<event>"."""
    entries: dict[int, dict] = {}
    for path in sorted(trace_file.parent.glob(trace_file.name + "*")):
        for item in json.loads(path.read_text() or "[]"):
            entry = entries.setdefault(item["id"], {"events": {}})
            for key in ("model_name", "request_id", "parent_id"):
                if key in item:
                    entry[key] = item[key]
            for stamp in item.get("timestamps", ()):
                entry["events"].setdefault(stamp["name"], []).append(stamp["ns"])
    llm_steps = {  # parent trace id -> its LLM step's entry
        entry["parent_id"]: entry
        for entry in entries.values()
        if "parent_id" in entry and entry.get("model_name") == LLM_MODEL
    }
    requests: dict[str, dict[str, list[int]]] = {}
    for trace_id, entry in entries.items():
        if "parent_id" in entry or not entry.get("request_id"):
            continue
        events = dict(entry["events"])
        llm = entry if entry.get("model_name") == LLM_MODEL else llm_steps.get(trace_id)
        if llm is not None:
            events |= {f"llm:{k}": v for k, v in llm["events"].items()}
        requests[entry["request_id"]] = events
    return requests


def request_hops(record: RequestRecord, events: dict[str, list[int]], origin_s: float) -> dict:
    """One request's hops in ms (HOPS, then SIDE_HOPS); {} when its trace lacks a stamp."""
    needed = ("GRPC_WAITREAD_END", "GRPC_SEND_START", "llm:COMPUTE_START", "llm:COMPUTE_END")
    first_s = record.first_token_s
    if not record.is_ok or first_s is None or any(k not in events for k in needed):
        return {}
    compute_start = min(events["llm:COMPUTE_START"])
    # the stream's read that carried this request: the last one before its LLM step began
    reads = [t for t in events["GRPC_WAITREAD_END"] if t <= compute_start]
    if not reads:
        return {}
    sends = events["GRPC_SEND_START"]
    chain_s = np.array(
        (
            origin_s + record.start_s,
            max(reads) / 1e9,
            compute_start / 1e9,
            min(events["llm:COMPUTE_END"]) / 1e9,
            min(sends) / 1e9,
            max(sends) / 1e9,
            origin_s + record.end_s,
        )
    )
    hops = dict(zip(HOPS, (float(ms) for ms in np.diff(chain_s) * 1e3), strict=True))
    hops["first_to_client"] = (origin_s + first_s - chain_s[4]) * 1e3
    return hops


def split(records: Sequence[RequestRecord], traces: dict, origin_s: float) -> dict:
    """Hop statistics (ms: mean, p50, p99) over the traced requests of records, and their ids."""
    traced = {
        record.request_id: hops
        for record in records
        if record.request_id in traces
        and (hops := request_hops(record, traces[record.request_id], origin_s))
    }
    if not traced:
        return {"num_traced": 0}
    stats = {}
    for hop in (*HOPS, *SIDE_HOPS):
        values = [hops[hop] for hops in traced.values()]
        stats[hop] = {
            "mean": float(np.mean(values)),
            "p50": float(np.percentile(values, 50)),
            "p99": float(np.percentile(values, 99)),
        }
    return {"num_traced": len(traced), "request_ids": list(traced), "hops_ms": stats}


def markdown_lines(path: dict) -> list[str]:
    hops = path.get("hops_ms")
    if not hops:
        return []
    lines = [
        "",
        f"served path (Triton trace of {path['num_traced']} requests; the hops above the line "
        f"add up to end-to-end):",
        "",
        "| hop | mean ms | p50 ms | p99 ms |",
        "|---|---|---|---|",
    ]
    for hop in (*HOPS, "", *SIDE_HOPS):
        if not hop:
            lines.append("| --- | | | |")
            continue
        stats = hops[hop]
        lines.append(f"| {hop} | {stats['mean']:.2f} | {stats['p50']:.2f} | {stats['p99']:.2f} |")
    return lines
