"""Shin et al. (2024; LLaMA-30B, 4x V100 over PCIe, 1/6 s NVML sampling) finding by finding,
against this study's cells: what the paper found, what we measured, whether they agree, and why
they may differ here."""

import statistics

from pipeline.study.summary import gpu_means, series_of

WHY = {
    "time": "in-flight batching keeps the batch full and the step cost grows slowly with batch "
    "until the GPU is compute-bound, where the paper's static batches padded and waited",
    "comm": "the paper's model parallelism sent activations across PCIe once per stage; here "
    "PP also returns the logits to rank 0 (a vocabulary-wide row a token), which narrows the gap "
    "for small-hidden models; NVLink makes either cheap",
    "util": "on NVLink the all-reduce is short next to the GEMMs; with CUDA graphs the launch "
    "gaps that lowered utilisation in eager PyTorch are gone",
    "memory": "the paged KV cache reserves its blocks when the engine starts, so used memory is "
    "flat in batch size; the threshold is where the blocks run out, not a growing footprint",
    "accuracy": "every cell asks for exactly its tokens (ignore_eos) and checks they came back, "
    "so a batch-dependent cap is caught instead of silently lowering accuracy",
}


def _trend(values: list[float]) -> str:
    if len(values) < 2:
        return "one point"
    steps = list(zip(values, values[1:], strict=False))
    ups = sum(b > a for a, b in steps)
    downs = sum(b < a for a, b in steps)
    return "rises" if ups > downs else "falls" if downs > ups else "flat"


def time_finding(cells: list[dict]) -> dict:
    notes, falls = [], []
    for key, series in series_of(cells).items():
        ok = [c for c in series if c["is_ok"]]
        if len(ok) < 2:
            continue
        per_request = [c["timing"]["duration_s"] / c["batch_size"] for c in ok]
        best = min(range(len(ok)), key=per_request.__getitem__)
        falls.append(best > 0)
        notes.append(
            f"{key}: time per request {_trend(per_request)}, least at batch "
            f"{ok[best]['batch_size']}"
        )
    return {
        "title": "inference time vs batch size",
        "paper": "falls with batch size until a point, then flattens or rises",
        "ours": "; ".join(notes) or "fewer than two fitted batch sizes in every series",
        "agrees": all(falls) if falls else None,
        "why": WHY["time"],
    }


def comm_finding(ratio: dict | None) -> dict:
    """ratio: summary.comm_ratio of the cells."""
    if ratio is None:
        ours, agrees = "no TP and PP cells to compare (needs a tp<N> and a pp<N> mapping)", None
    else:
        ours = (
            f"{ratio['tp_mapping']} moves {ratio['median']:.2f}x the bytes per output token of "
            f"{ratio['pp_mapping']} (rank 0's collective payload; median of {ratio['num_pairs']} "
            f"cells, range {ratio['min']:.2f}-{ratio['max']:.2f}"
        )
        if ratio["activation_median"] is not None:
            ours += f"; activations alone {ratio['activation_median']:.1f}x"
        ours += ")"
        agrees = ratio["median"] > 1
    return {
        "title": "TP vs layer-wise (pipeline) parallel communication",
        "paper": "TP moves up to 292x the data of model parallelism "
        "(6.7 vs 0.085 GB/s at batch 16)",
        "ours": ours,
        "agrees": agrees,
        "why": WHY["comm"],
    }


def util_finding(cells: list[dict]) -> dict:
    notes = []
    for key, series in series_of(cells).items():
        ok = [c for c in series if c["is_ok"] and gpu_means(c, "util_pct")]
        if len(ok) < 2 or ok[0]["series"]["tp_size"] * ok[0]["series"]["pp_size"] == 1:
            continue
        util = [statistics.mean(gpu_means(c, "util_pct").values()) for c in ok]
        comm = [c["comm"]["total_bytes"] / max(c["timing"]["duration_s"], 1e-9) for c in ok]
        notes.append(f"{key}: communication {_trend(comm)}, utilisation {_trend(util)}")
    return {
        "title": "communication vs GPU utilisation",
        "paper": "communication grows with batch size while GPU utilisation falls",
        "ours": "; ".join(notes) or "not measurable: no GPU utilisation sampled (NVML absent)",
        "agrees": None if not notes else all("utilisation falls" in n for n in notes),
        "why": WHY["util"],
    }


def memory_finding(cells: list[dict], thresholds: list[dict]) -> dict:
    bounded = [t for t in thresholds if t["threshold_batch"] is not None]
    ours = (
        "; ".join(
            f"{t['series']}: fits up to {t['max_ok_batch']}, fails at {t['threshold_batch']} "
            f"({t['bound_by']})"
            for t in bounded
        )
        or "every batch size fitted (raise study.max_batch_size to find the threshold)"
    )
    return {
        "title": "memory vs batch size",
        "paper": "memory grows with batch size up to an out-of-memory threshold",
        "ours": ours,
        "agrees": bool(bounded) or None,
        "why": WHY["memory"],
    }


def accuracy_finding(cells: list[dict]) -> dict:
    judged = [c for c in cells if c["is_ok"] and c.get("accuracy_flags") is not None]
    flagged = [c for c in judged if c["accuracy_flags"]]
    ours = f"{len(flagged)} of {len(judged)} fitted cells differ from batch 1 beyond noise" + (
        ": " + ", ".join(c["key"] for c in flagged) if flagged else ""
    )
    return {
        "title": "accuracy vs batch size",
        "paper": "a fused-kernel mode capped generated tokens at batch 32: accuracy 82% -> 26%, "
        "unreported",
        "ours": ours,
        "agrees": None,
        "verdict": "flagged here" if flagged else "no drop here" if judged else "not measured",
        "why": WHY["accuracy"],
    }


def findings(cells: list[dict], thresholds: list[dict], ratio: dict | None) -> list[dict]:
    return [
        time_finding(cells),
        comm_finding(ratio),
        util_finding(cells),
        memory_finding(cells, thresholds),
        accuracy_finding(cells),
    ]
