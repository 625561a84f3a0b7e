"""One cell on a loaded engine: batch_size requests (x num_waves) of the series' workload at
batch_size in flight, timed after a warm-up, with the sampler's per-device averages and peaks,
rank 0's collective bytes and the memory it took; then, if the batch fitted, the accuracy
probes at that batch size. A size that does not fit is a result (KV capacity or GPU out of
memory), never a crash."""

import dataclasses
import logging
import time

import torch

from pipeline.bench.metrics import summarize
from pipeline.bench.session import Workload
from pipeline.bench.threshold_search import CapacityExceeded, classify_failure
from pipeline.profiler.sampler import summarize_samples
from pipeline.study.accuracy import measure_accuracy
from pipeline.study.comm_bytes import bytes_between, per_token

log = logging.getLogger(__name__)
TIMING_KEYS = (
    "duration_s",
    "num_output_tokens",
    "output_tok_s",
    "request_per_s",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "itl_ms_p50",
    "itl_ms_p99",
    "e2e_ms_p50",
    "e2e_ms_p99",
)


def cell_bench(bench, study, series, batch_size: int):
    return dataclasses.replace(
        bench,
        workload="synthetic",
        mode="concurrency",
        temperature=0.0,
        input_len=series.input_len,
        output_len=series.output_len,
        concurrency=batch_size,
        num_requests=batch_size * study.num_waves,
        num_warmup_requests=min(study.num_warmup_requests, batch_size),
    )


def _fits_kv(engine, facts, series, batch_size: int) -> None:
    """batch_size sequences of the workload need their KV blocks at once; a cache that holds
    fewer would run them in turns, which is not that batch size."""
    total = engine.stats()["num_total_blocks"]
    per_seq = blocks_per_sequence(series, facts)
    if batch_size * per_seq > total:
        raise CapacityExceeded(
            "kv_capacity",
            f"{batch_size} sequences x {per_seq} KV blocks > the cache's {total} blocks "
            f"(it holds {total // per_seq} of this workload at once)",
        )


def _capacity_check(stats: dict, summary: dict, batch_size: int) -> None:
    if summary["num_errors"]:
        first = summary["error_messages"][0] if summary["error_messages"] else "?"
        raise CapacityExceeded(
            classify_failure(RuntimeError(first)),
            f"{summary['num_errors']} of {summary['num_requests']} requests failed: {first}",
        )
    if stats.get("num_preemptions"):
        raise CapacityExceeded(
            "kv_capacity", f"{stats['num_preemptions']} preemptions at batch {batch_size}"
        )


def weights_bytes(engine_dir, facts) -> int:
    """The rank files' bytes, or (synthetic weights: empty placeholders) the bytes the
    checkpoint's unquantized shape holds."""
    if facts.weights_bytes:
        return facts.weights_bytes
    from pipeline.bench.engine_facts import DTYPE_BYTES
    from pipeline.engine_json import EngineJson

    cfg = EngineJson.read(engine_dir).pretrained
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    head_dim = cfg.get("head_size") or h // heads
    kv = cfg.get("num_key_value_heads") or heads
    layer = h * head_dim * (2 * heads + 2 * kv) + 3 * h * cfg["intermediate_size"] + 2 * h
    heads_out = 1 if cfg.get("share_embedding_table") or cfg.get("tie_word_embeddings") else 2
    params = cfg["num_hidden_layers"] * layer + heads_out * cfg["vocab_size"] * h + h
    return params * DTYPE_BYTES[cfg["dtype"]]


def blocks_per_sequence(series, facts) -> int:
    return -(-(series.input_len + series.output_len - 1) // facts.tokens_per_block)


def memory(stats: dict, facts, resources: dict, series, batch_size: int) -> dict:
    """GiB: weights, KV cache reserved and used, the peak seen (every GPU, else every rank's
    RSS), and on GPUs what is left of the peak: activations, workspaces, CUDA context."""
    gib = 2**30
    total = stats.get("num_total_blocks", 0)
    kv_reserved = total * facts.kv_bytes_per_block / gib
    # what the batch holds at its longest (the engine's stats, read between launches of
    # several steps, can miss the peak)
    kv_used = batch_size * blocks_per_sequence(series, facts) * facts.kv_bytes_per_block / gib
    world_size = series.tp_size * series.pp_size
    gpus = [v["mem_used_bytes_max"] for k, v in resources.items() if k.startswith("gpu")]
    gpus = [v for v in gpus[:world_size]] if gpus else []
    rss = [v["rss_bytes_max"] for k, v in resources.items() if "rss_bytes_max" in v]
    peak = sum(gpus or rss) / gib if (gpus or rss) else None
    out = {
        "weights_gib": facts.weights_bytes / gib,
        "kv_reserved_gib": kv_reserved,
        "kv_used_gib": kv_used,
        "peak_gib": peak,
        "peak_source": "nvml" if gpus else "rss",
        "other_gib": None,
    }
    if gpus:
        out["other_gib"] = max(0.0, peak - out["weights_gib"] - kv_reserved)
    if torch.cuda.is_available():
        out["rank0_torch_max_allocated_gib"] = torch.cuda.max_memory_allocated() / gib
    return out


def _timed(target, bench, workload, sampler, origin_s, comm):
    gen = target.generator(bench, origin_s)
    gen.run(workload.warmup, "warmup")
    before, start_s = comm.snapshot(), gen.now()
    records = gen.run(workload.measured, "measure")
    end_s = gen.now()
    summary = summarize(records)
    resources = summarize_samples(sampler.samples, start_s, end_s) if sampler else {}
    delta = bytes_between(before, comm.snapshot())
    return summary, dict(gen.engine_stats), resources, delta


def measure_cell(ctx, batch_size: int) -> dict:
    """ctx: the series' loaded state (series.SeriesContext)."""
    series, study = ctx.job.series, ctx.job.study
    bench = cell_bench(ctx.job.bench, study, series, batch_size)
    workload = Workload.from_spec(bench, ctx.maker)
    label = series.cell_key(batch_size)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    cell = {"key": label, "series": dataclasses.asdict(series), "batch_size": batch_size}
    cell |= {"mapping": series.mapping, "kernels": series.kernels, "workload": series.workload}
    start = time.perf_counter()
    try:
        _fits_kv(ctx.target.engine, ctx.facts, series, batch_size)
        summary, stats, resources, delta = _timed(
            ctx.target, bench, workload, ctx.sampler, ctx.origin_s, ctx.comm
        )
        cell |= {"timing": {k: summary[k] for k in TIMING_KEYS}, "engine_stats": stats}
        cell["resources"] = resources
        cell["memory"] = memory(stats, ctx.facts, resources, series, batch_size)
        cell["comm"] = per_token(delta, summary["num_output_tokens"], ctx.comm.is_complete)
        _capacity_check(stats, summary, batch_size)
    except Exception as exc:  # the point of the study: a batch that does not fit is a result
        kind = classify_failure(exc)
        cell |= {"is_ok": False, "failure": kind, "detail": getattr(exc, "detail", None)}
        cell["detail"] = cell["detail"] or f"{type(exc).__name__}: {exc}"[:400]
        log.warning("study: %s failed (%s): %s", label, kind, cell["detail"])
        cell["wall_s"] = time.perf_counter() - start
        return cell
    cell["accuracy"] = measure_accuracy(
        ctx.target.engine, ctx.probes, batch_size, study.accuracy, ctx.job.fault
    )
    cell |= {"is_ok": True, "failure": None, "detail": ""}
    cell["wall_s"] = time.perf_counter() - start
    return cell
