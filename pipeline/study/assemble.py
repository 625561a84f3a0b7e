"""The study's result: its cells judged (summary.py), the findings, the recommendation, written
as study.json (every cell's raw numbers), study.md and the figures."""

import dataclasses
import json
import shlex
import socket
import sys
from pathlib import Path

from pipeline.study.findings import findings
from pipeline.study.plots import plot_all
from pipeline.study.recommend import recommend
from pipeline.study.report import markdown
from pipeline.study.sampling import nvlink_method
from pipeline.study.summary import comm_ratio, flag_accuracy, thresholds


def command() -> str:
    """The command line that ran the study, to paste into a shell (the CLI passes the stage as
    ++stage=study and every value override with the ++ it adds: cli._overrides_checked_together)."""
    args = [a.removeprefix("++") for a in sys.argv[1:] if not a.startswith("+hydra.")]
    if "stage=study" not in args:
        return "pipeline.stages.study.run() from Python"
    words = ("study" if a == "stage=study" else shlex.quote(a) for a in args)
    return " ".join(["python -m pipeline", *words])


def assemble(cells: list[dict], study, model: str, device: str, notes: list[str]) -> dict:
    flag_accuracy(cells, study.accuracy)
    limits, ratio = thresholds(cells), comm_ratio(cells)
    sources = next((c["profile_sources"] for c in cells if c.get("profile_sources")), [])
    return {
        "model": model,
        "device": device,
        "host": socket.gethostname(),
        "command": command(),
        "study": dataclasses.asdict(study),
        "sample_rate_hz": study.sample_rate_hz,
        "budget": study.budget,
        "nvlink_method": nvlink_method(sources),
        "profile_notes": sorted({n for c in cells for n in c.get("profile_notes", [])}),
        "cells": cells,
        "thresholds": limits,
        "comm_ratio": ratio,
        "findings": findings(cells, limits, ratio),
        "recommendations": recommend(cells, study.budget),
        "notes": notes,
    }


def write_study(out_dir: Path, data: dict) -> dict[str, Path]:
    paths = {"json": out_dir / "study.json", "markdown": out_dir / "study.md"}
    paths["json"].write_text(json.dumps(data, indent=1, default=str) + "\n")
    paths["markdown"].write_text(markdown(data))
    paths |= plot_all(data, out_dir)
    return paths
