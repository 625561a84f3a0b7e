"""Benchmark statistics over request records: percentiles, throughput, error counts.

Latencies are reported in milliseconds (`*_ms`), throughput as output tokens/s (`output_tok_s`) and
requests/s (`request_per_s`) over the measured window (first send to last completion).
"""

import math
from collections.abc import Iterable, Sequence

import numpy as np

from pipeline.bench.records import RequestRecord

PERCENTILES = (50, 90, 99)


def percentiles(values: Sequence[float], qs: Iterable[float] = PERCENTILES) -> dict[str, float]:
    """{"p50": ..., "p90": ..., "p99": ..., "mean", "min", "max"}; linear interpolation like numpy's
    default (what GenAI-Perf reports). Empty input gives NaN for every key."""
    qs = tuple(qs)
    if len(values) == 0:
        return {
            **{f"p{q:g}": math.nan for q in qs},
            "mean": math.nan,
            "min": math.nan,
            "max": math.nan,
        }
    arr = np.asarray(values, dtype=np.float64)
    out = {f"p{q:g}": float(v) for q, v in zip(qs, np.percentile(arr, qs), strict=True)}
    out.update(mean=float(arr.mean()), min=float(arr.min()), max=float(arr.max()))
    return out


def _ms(values: Iterable[float | None]) -> list[float]:
    return [v * 1e3 for v in values if v is not None]


def summarize(records: Sequence[RequestRecord]) -> dict:
    """Flat metric dict for one measured phase. Failed requests count as errors and are left out
    of latency statistics; their tokens (if any arrived) are left out of throughput too."""
    ok = [r for r in records if r.is_ok]
    started = [r.start_s for r in records]
    ended = [r.end_s for r in records]
    duration_s = (max(ended) - min(started)) if records else 0.0
    num_output_tokens = sum(r.num_output_tokens for r in ok)
    num_input_tokens = sum(r.num_input_tokens for r in ok)
    summary = {
        "num_requests": len(records),
        "num_ok": len(ok),
        "num_errors": len(records) - len(ok),
        "duration_s": duration_s,
        "num_input_tokens": num_input_tokens,
        "num_output_tokens": num_output_tokens,
        "output_tok_s": num_output_tokens / duration_s if duration_s > 0 else 0.0,
        "total_tok_s": (num_input_tokens + num_output_tokens) / duration_s
        if duration_s > 0
        else 0.0,
        "request_per_s": len(ok) / duration_s if duration_s > 0 else 0.0,
    }
    series = {
        "ttft_ms": _ms(r.ttft_s for r in ok),
        "itl_ms": _ms(r.itl_s for r in ok),
        "e2e_ms": _ms(r.e2e_s for r in ok),
        "queue_delay_ms": _ms(r.queue_delay_s for r in ok),
    }
    for name, values in series.items():
        for stat, value in percentiles(values).items():
            summary[f"{name}_{stat}"] = value
    itl_mean_s = summary["itl_ms_mean"] / 1e3
    # per-user decode speed (1/TPOT), the "tok/s/user" column of NVIDIA's tables
    summary["output_tok_s_per_user"] = 1.0 / itl_mean_s if itl_mean_s > 0 else math.nan
    errors = sorted({r.error for r in records if r.error})
    summary["error_messages"] = errors[:5]
    return summary


def achieved_bandwidth_gb_s(weights_bytes: int, itl_mean_ms: float) -> float:
    """Weights streamed per decode step / time per step: a lower bound on the memory bandwidth the
    decode loop reached (KV-cache reads ignored, as gpt-fast does)."""
    if not itl_mean_ms or math.isnan(itl_mean_ms):
        return math.nan
    return weights_bytes / (itl_mean_ms / 1e3) / 1e9
