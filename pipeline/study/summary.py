"""The study's cells, judged: accuracy flags against each series' batch-1 cell, each series'
threshold and what bounded it, and the TP vs PP bytes per token."""

import statistics
from collections import defaultdict

from pipeline.study.accuracy import accuracy_flags, token_agreement


def series_of(cells: list[dict]) -> dict[str, list[dict]]:
    """{series key: its cells by batch size}."""
    out: dict[str, list[dict]] = defaultdict(list)
    for cell in cells:
        out[cell["key"].rsplit("-b", 1)[0]].append(cell)
    return {k: sorted(v, key=lambda c: c["batch_size"]) for k, v in out.items()}


def flag_accuracy(cells: list[dict], accuracy) -> None:
    """Adds accuracy_flags (reasons, [] = within noise) and greedy_agreement to each fitted
    cell; a series without a batch-1 cell has nothing to compare with (flags None)."""
    for series in series_of(cells).values():
        base = next((c for c in series if c["batch_size"] == 1 and c["is_ok"]), None)
        for cell in series:
            if not cell["is_ok"]:
                continue
            if base is None:
                cell["accuracy_flags"], cell["greedy_agreement"] = None, None
                continue
            cell["accuracy_flags"] = accuracy_flags(base["accuracy"], cell["accuracy"], accuracy)
            cell["greedy_agreement"] = token_agreement(
                base["accuracy"]["greedy"]["tokens"], cell["accuracy"]["greedy"]["tokens"]
            )


def thresholds(cells: list[dict]) -> list[dict]:
    out = []
    for key, series in series_of(cells).items():
        ok = [c for c in series if c["is_ok"]]
        failed = [c for c in series if not c["is_ok"]]
        first = failed[0] if failed else None
        last_ok = max(
            (c for c in ok if not first or c["batch_size"] < first["batch_size"]),
            key=lambda c: c["batch_size"],
            default=None,
        )
        out.append(
            {
                "series": key,
                "mapping": series[0]["mapping"],
                "kernels": series[0]["kernels"],
                "workload": series[0]["workload"],
                "max_ok_batch": last_ok["batch_size"] if last_ok else None,
                "threshold_batch": first["batch_size"] if first else None,
                "failure": first["failure"] if first else None,
                "detail": first["detail"] if first else "",
                "bound_by": bound_by(first, last_ok),
                "memory_at_max_ok": last_ok.get("memory") if last_ok else None,
            }
        )
    return out


def bound_by(first: dict | None, last_ok: dict | None) -> str:
    """What raised the threshold: the KV cache (paged: its blocks ran out), activations (the GPU
    ran out of memory beside weights and the reserved KV), or nothing up to the largest size."""
    if first is None:
        return "nothing: every size fitted"
    if first["failure"] == "kv_capacity":
        kv = ((last_ok or {}).get("memory") or {}).get("kv_reserved_gib")
        held = f" ({kv:.2f} GiB: free GPU memory, or on a CPU the host's available)" if kv else ""
        return f"KV cache{held}: its blocks could not hold every sequence at once"
    if first["failure"] == "oom":
        memory = (last_ok or {}).get("memory") or {}
        weights, kv = memory.get("weights_gib"), memory.get("kv_reserved_gib")
        held = f" (weights {weights:.1f} GiB, KV {kv:.1f} GiB reserved)" if weights else ""
        return f"activations: the GPU ran out of memory beside weights and KV{held}"
    return f"an error, not capacity: {first['detail']}"


def _mapping_kind(cell: dict) -> str | None:
    tp, pp = cell["series"]["tp_size"], cell["series"]["pp_size"]
    if tp > 1 and pp == 1:
        return "tp"
    if pp > 1 and tp == 1:
        return "pp"
    return None


def comm_ratio(cells: list[dict]) -> dict | None:
    """TP / PP payload bytes per output token (rank 0's collectives), over the batch sizes,
    kernel modes and workloads where a TP and a PP cell both fitted with complete counts."""
    by: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for cell in cells:
        kind = _mapping_kind(cell)
        comm = cell.get("comm")
        if kind and cell["is_ok"] and comm and comm["is_complete"] and comm["bytes_per_token"]:
            by[(cell["kernels"], cell["workload"], cell["batch_size"])][kind] = cell
    pairs = [(v["tp"], v["pp"], k) for k, v in sorted(by.items()) if "tp" in v and "pp" in v]
    if not pairs:
        return None
    ratios = [tp["comm"]["bytes_per_token"] / pp["comm"]["bytes_per_token"] for tp, pp, _ in pairs]
    act = [
        tp["comm"]["activation_bytes_per_token"] / pp["comm"]["activation_bytes_per_token"]
        for tp, pp, _ in pairs
        if pp["comm"]["activation_bytes_per_token"]
    ]
    return {
        "num_pairs": len(pairs),
        "tp_mapping": pairs[0][0]["mapping"],
        "pp_mapping": pairs[0][1]["mapping"],
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "activation_median": statistics.median(act) if act else None,
        "pairs": [
            {
                "kernels": k[0],
                "workload": k[1],
                "batch_size": k[2],
                "tp_bytes_per_token": tp["comm"]["bytes_per_token"],
                "pp_bytes_per_token": pp["comm"]["bytes_per_token"],
            }
            for tp, pp, k in pairs
        ],
    }


def gpu_means(cell: dict, metric: str) -> dict[str, float]:
    """{gpu<i>: mean of metric over the cell's timed window} for its mapping's GPUs."""
    world = cell["series"]["tp_size"] * cell["series"]["pp_size"]
    resources = cell.get("resources") or {}
    return {
        dev: stats[f"{metric}_mean"]
        for dev, stats in sorted(resources.items())
        if dev.startswith("gpu") and int(dev[3:]) < world and f"{metric}_mean" in stats
    }
