"""The report's recommendation: per workload, the fitted cell with the most output tok/s whose
TTFT and ITL p99 meet the budget and whose accuracy did not move from batch 1, as the Hydra
override that deploys it."""

import math


def meets_budget(cell: dict, budget) -> bool:
    timing = cell.get("timing") or {}
    ttft, itl = timing.get("ttft_ms_p99"), timing.get("itl_ms_p99")
    if ttft is None or itl is None or math.isnan(ttft):
        return False
    # one output token has no inter-token latency: only TTFT binds it
    return ttft <= budget.ttft_p99_ms and (math.isnan(itl) or itl <= budget.itl_p99_ms)


def override(cell: dict) -> str:
    series = cell["series"]
    is_fused = series["kernels"] == "fused"
    parts = [
        f"parallel.tp_size={series['tp_size']}",
        f"parallel.pp_size={series['pp_size']}",
        f"build.max_batch_size={cell['batch_size']}",
        f"build.torch.use_cuda_graph={'true' if is_fused else 'false'}",
    ]
    if not is_fused:
        parts.append("build.torch.triton_kernels=false")
    return "python -m pipeline deploy " + " ".join(parts)


def recommend(cells: list[dict], budget) -> list[dict]:
    """One entry per workload: the chosen cell and its override, or why none qualifies."""
    out = []
    for workload in sorted({c["workload"] for c in cells}, key=lambda w: int(w.split("x")[0])):
        fitted = [c for c in cells if c["workload"] == workload and c["is_ok"]]
        eligible = [c for c in fitted if meets_budget(c, budget) and c.get("accuracy_flags") == []]
        if not eligible:
            out.append(
                {
                    "workload": workload,
                    "cell": None,
                    "why": f"none of its {len(fitted)} fitted cells meets TTFT p99 <= "
                    f"{budget.ttft_p99_ms:g} ms and ITL p99 <= {budget.itl_p99_ms:g} ms with "
                    f"accuracy unchanged from batch 1",
                }
            )
            continue
        best = max(eligible, key=lambda c: c["timing"]["output_tok_s"])
        out.append(
            {
                "workload": workload,
                "cell": best["key"],
                "output_tok_s": best["timing"]["output_tok_s"],
                "ttft_ms_p99": best["timing"]["ttft_ms_p99"],
                "itl_ms_p99": best["timing"]["itl_ms_p99"],
                "override": override(best),
                "num_eligible": len(eligible),
            }
        )
    return out
