"""A tune run's report: tune.json (every item's default and tuned settings and costs, trials
spent, moves accepted, candidates refused by the gate or inside the noise, and the trace),
tune.md (the table) and the trace plots."""

import json
from pathlib import Path

from pipeline.tune.trace_plot import plot_traces

COLUMNS = (
    "item",
    "default",
    "tuned",
    "default cost",
    "tuned cost",
    "gain",
    "trials",
    "accepted",
    "refused: correctness",
    "refused: noise",
)


def _settings(settings: dict | None) -> str:
    return " ".join(f"{k}={v}" for k, v in (settings or {}).items()) or "-"


def _row(row: dict) -> list[str]:
    if row.get("error"):
        return [row["item"], "error: " + row["error"][:120], *["-"] * (len(COLUMNS) - 2)]
    cached = " (cache)" if row.get("cached") else ""
    return [
        row["item"] + cached,
        _settings(row["default"]),
        _settings(row["tuned"]),
        f"{row['default_cost']:.4g}",
        f"{row['tuned_cost']:.4g}",
        f"{100 * (row.get('gain') or 0.0):+.1f}%",
        str(row.get("num_trials", 0)),
        str(row.get("num_accepted", "-")),
        str(row.get("num_rejected_for_correctness", "-")),
        str(row.get("num_rejected_in_noise", "-")),
    ]


def markdown(report: dict) -> str:
    lines = [
        f"# tune: {report['space']} ({report['model']}, {report['hardware']})",
        "",
        f"Cost: {report['unit']}, lower is better; a tuned value differs from the default only "
        f"when it beat it beyond the noise ({report['confidence']:.0%} one-sided bound over "
        f"{report['repeats']} repeats a trial).",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(_row(r)) + " |" for r in report["items"]]
    for title, text in report.get("sections", {}).items():
        lines += ["", f"## {title}", "", text]
    return "\n".join(lines) + "\n"


def write_report(out_dir: Path, report: dict) -> dict[str, Path]:
    paths = {"json": out_dir / "tune.json", "markdown": out_dir / "tune.md"}
    paths["json"].write_text(json.dumps(report, indent=1, default=str) + "\n")
    paths["markdown"].write_text(markdown(report))
    for i, path in enumerate(plot_traces(report["items"], report["unit"], out_dir)):
        paths[f"trace{i or ''}"] = path
    return paths
