"""study.md: every cell's measurements, the thresholds, the accuracy flags, the TP vs PP bytes,
the paper's findings against ours, and the recommendation. A column appears when some cell has
it measured (GPU columns need NVML); a cell without a value shows "-" (a batch that did not
fit, or a value that was not measured)."""

import math
import statistics

from pipeline.study.summary import gpu_means

MB = 1e6


def _num(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:,.{digits}g}" if abs(value) < 100 else f"{value:,.0f}"


def _gpu(cell: dict, metric: str, scale: float = 1.0) -> str:
    values = gpu_means(cell, metric)
    return "/".join(_num(v * scale) for v in values.values()) if values else None


def _cpu(cell: dict) -> str | None:
    resources = cell.get("resources") or {}
    ranks = [v["cpu_pct_mean"] for k, v in sorted(resources.items()) if "cpu_pct_mean" in v]
    return "/".join(_num(v) for v in ranks) if ranks else None


def _ppl(cell: dict) -> str:
    return _num(cell["accuracy"]["ppl"], 4)


def _flag(cell: dict) -> str:
    flags = cell.get("accuracy_flags")
    if flags is None:
        return "no batch 1"
    return "FLAGGED" if flags else "ok"


# (header, value of a fitted cell: a string, or None when not measured)
COLUMNS = (
    ("time s", lambda c: _num(c["timing"]["duration_s"])),
    ("out tok/s", lambda c: _num(c["timing"]["output_tok_s"])),
    (
        "TTFT p50/p99 ms",
        lambda c: f"{_num(c['timing']['ttft_ms_p50'])}/{_num(c['timing']['ttft_ms_p99'])}",
    ),
    (
        "ITL p50/p99 ms",
        lambda c: f"{_num(c['timing']['itl_ms_p50'])}/{_num(c['timing']['itl_ms_p99'])}",
    ),
    ("cloze acc", lambda c: f"{c['accuracy']['cloze']['accuracy']:.1%}"),
    ("ppl", _ppl),
    (
        "greedy tok",
        lambda c: (
            f"{c['accuracy']['greedy']['num_generated']}/{c['accuracy']['greedy']['num_requested']}"
        ),
    ),
    ("accuracy", _flag),
    ("GPU util %", lambda c: _gpu(c, "util_pct")),
    ("peak mem GiB", lambda c: _num(c["memory"]["peak_gib"])),
    ("KV used GiB", lambda c: _num(c["memory"]["kv_used_gib"])),
    ("CPU % per rank", _cpu),
    (
        "coll. B/token",
        lambda c: _num(c["comm"]["bytes_per_token"]) if c["comm"]["total_bytes"] else "0",
    ),
    (
        "PCIe TX/RX MB/s",
        lambda c: (
            None
            if _gpu(c, "pcie_tx_bytes_s") is None
            else f"{_gpu(c, 'pcie_tx_bytes_s', 1 / MB)} / {_gpu(c, 'pcie_rx_bytes_s', 1 / MB)}"
        ),
    ),
    (
        "NVLink TX/RX MB/s",
        lambda c: (
            None
            if _gpu(c, "nvlink_tx_bytes_s") is None
            else f"{_gpu(c, 'nvlink_tx_bytes_s', 1 / MB)} / {_gpu(c, 'nvlink_rx_bytes_s', 1 / MB)}"
        ),
    ),
)


def cell_table(cells: list[dict]) -> list[str]:
    ok = [c for c in cells if c["is_ok"]]
    columns = [(h, f) for h, f in COLUMNS if any(f(c) is not None for c in ok)]
    lines = [
        "| mapping | kernels | workload | batch | result | "
        + " | ".join(h for h, _ in columns)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(columns),
    ]
    for c in cells:
        head = f"| {c['mapping']} | {c['kernels']} | {c['workload']} | {c['batch_size']} | "
        if not c["is_ok"]:
            lines.append(
                head + f"FAIL ({c['failure']}) | " + " | ".join("-" for _ in columns) + " |"
            )
            continue
        values = [f(c) or "-" for _, f in columns]
        lines.append(head + "ok | " + " | ".join(values) + " |")
    return lines


def threshold_table(thresholds: list[dict]) -> list[str]:
    lines = [
        "| series | largest batch that fits | first that fails | bound by |",
        "|---|---|---|---|",
    ]
    for t in thresholds:
        fails = "-" if t["threshold_batch"] is None else f"{t['threshold_batch']} ({t['failure']})"
        lines.append(f"| {t['series']} | {_num(t['max_ok_batch'])} | {fails} | {t['bound_by']} |")
    return lines


def flags_section(cells: list[dict]) -> list[str]:
    flagged = [c for c in cells if c["is_ok"] and c.get("accuracy_flags")]
    if not flagged:
        return ["No cell's accuracy differs from its batch-1 cell beyond noise."]
    return [f"- **{c['key']}**: " + "; ".join(c["accuracy_flags"]) for c in flagged]


def comm_section(ratio: dict | None, nvlink: str) -> list[str]:
    lines = [f"NVLink counters: {nvlink}.", ""]
    if ratio is None:
        return lines + [
            "TP/PP bytes ratio: not measured (the grid needs a tp<N> and a pp<N> mapping whose "
            "cells fitted with complete collective counts)."
        ]
    lines.append(
        f"**Measured TP/PP bytes ratio: {ratio['median']:.2f}** ({ratio['tp_mapping']} vs "
        f"{ratio['pp_mapping']}, payload bytes per output token of rank 0's collectives, "
        f"median of {ratio['num_pairs']} cell pairs, range {ratio['min']:.2f}-{ratio['max']:.2f}"
        + (
            f"; activations only: {ratio['activation_median']:.2f}"
            if ratio["activation_median"] is not None
            else ""
        )
        + ")."
    )
    return lines


def findings_section(findings: list[dict]) -> list[str]:
    lines = ["| finding | paper | ours | agree? | why they may differ |", "|---|---|---|---|---|"]
    for f in findings:
        verdict = (
            f.get("verdict") or {True: "yes", False: "no", None: "not measurable"}[f["agrees"]]
        )
        lines.append(f"| {f['title']} | {f['paper']} | {f['ours']} | {verdict} | {f['why']} |")
    return lines


def recommendation_section(recs: list[dict], budget) -> list[str]:
    lines = [
        f"Budget: TTFT p99 <= {budget.ttft_p99_ms:g} ms, ITL p99 <= {budget.itl_p99_ms:g} ms, "
        f"accuracy unchanged from batch 1 (`study.budget.*`).",
        "",
    ]
    for r in recs:
        if r["cell"] is None:
            lines.append(f"- {r['workload']}: {r['why']}.")
            continue
        lines += [
            f"- {r['workload']}: **{r['cell']}**, {r['output_tok_s']:,.1f} output tok/s "
            f"(TTFT p99 {_num(r['ttft_ms_p99'])} ms, ITL p99 {_num(r['itl_ms_p99'])} ms; best "
            f"of {r['num_eligible']} cells within the budget):",
            "",
            f"  ```bash\n  {r['override']}\n  ```",
        ]
    return lines


def markdown(data: dict) -> str:
    cells = data["cells"]
    ok = [c for c in cells if c["is_ok"]]
    head = [
        f"# Batch x parallelism study: {data['model']} on {data['device']}",
        "",
        f"Host: {data['host']}; {len(cells)} cells ({len(ok)} fitted); sampler "
        f"{data['sample_rate_hz']:g} Hz. Command: `{data['command']}`.",
        "",
    ]
    if data["notes"]:  # first: a series that did not run is why cells are missing below
        head += ["## Not measured", "", *[f"- {n}" for n in data["notes"]], ""]
    body = [
        "## Cells",
        "",
        *cell_table(cells),
        "",
        "## Batch-size thresholds",
        "",
        *threshold_table(data["thresholds"]),
        "",
        "## Accuracy against batch 1",
        "",
        *flags_section(cells),
        "",
        "## Communication",
        "",
        *comm_section(data["comm_ratio"], data["nvlink_method"]),
        "",
        "## The paper's findings and ours",
        "",
        *findings_section(data["findings"]),
        "",
        "## Recommendation",
        "",
        *recommendation_section(data["recommendations"], data["budget"]),
    ]
    if ok:
        walls = [c["wall_s"] for c in ok]
        body += ["", f"Cell wall time: median {statistics.median(walls):.1f} s."]
    return "\n".join(head + body) + "\n"
