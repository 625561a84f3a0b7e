"""The stored baseline: `baselines/<model>-<backend>-<hardware>.json`.

{"schema_version": 1, "key", "model", "backend", "hardware", "created_at", "host", "versions",
 "workload": {the bench settings the numbers depend on},
 "metrics": {"<group>.<name>": {"value": number | list, "kind": "relative"|"absolute"|"exact",
                                "tolerance": float (relative: fraction, absolute: units),
                                "better": "higher"|"lower"|"equal"}}}

Tolerances live in the file (they depend on the hardware's noise); an update keeps a metric's
stored tolerance and only takes the default for a metric the file does not have yet.
"""

import json
import math
import platform
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.artifacts import read_json_object
from pipeline.errors import ArtifactError

SCHEMA_VERSION = 1
KINDS = ("relative", "absolute", "exact")
BETTER = ("higher", "lower", "equal")


@dataclass(frozen=True, slots=True)
class MetricRule:
    kind: str
    tolerance: float
    better: str


def baseline_key(model: str, backend: str, hardware: str) -> str:
    return f"{model}-{backend}-{hardware}"


def hardware_key(hardware: str) -> str:
    """`auto` resolved to what this machine is: `cpu`, or the GPU's short name (h100, a100...)."""
    if hardware.lower() != "auto":
        return hardware.lower()
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    from pipeline.hardware import GPU_SM

    name = torch.cuda.get_device_name().lower().replace(" ", "").replace("-", "")
    known = sorted(GPU_SM, key=len, reverse=True)  # "h200" before "h20", "a100" before "a10"
    return next((k for k in known if k in name), name.replace("nvidia", "")[:24])


def _check_metric(path: Path, name: str, entry: dict) -> None:
    problems = []
    if "value" not in entry:
        problems.append("no value")
    if entry.get("kind") not in KINDS:
        problems.append(f"kind={entry.get('kind')!r} not in {KINDS}")
    if entry.get("better", "equal") not in BETTER:
        problems.append(f"better={entry.get('better')!r} not in {BETTER}")
    tol = entry.get("tolerance", 0.0)
    if not isinstance(tol, int | float) or tol < 0 or math.isnan(tol):
        problems.append(f"tolerance={tol!r} must be a number >= 0")
    if problems:
        raise ArtifactError(
            f"{path}: metrics.{name}: {'; '.join(problems)}; fix the file or "
            f"rewrite it with `make update-baseline`"
        )


def read_baseline(path: Path) -> dict:
    if not path.is_file():
        raise ArtifactError(
            f"regress: no baseline at {path}; create it from this run with "
            f"`make update-baseline` (or set bench.regress.baseline to a file)"
        )
    data = read_json_object(path, "restore it from git or run `make update-baseline`")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ArtifactError(
            f"{path}: schema_version={data.get('schema_version')!r}, expected "
            f"{SCHEMA_VERSION}; run `make update-baseline`"
        )
    for key in ("workload", "metrics"):
        if not isinstance(data.get(key), dict):
            raise ArtifactError(f"{path}: missing {key!r} mapping; run `make update-baseline`")
    for name, entry in data["metrics"].items():
        _check_metric(path, name, entry)
    return data


def rule_of(entry: dict) -> MetricRule:
    return MetricRule(
        entry["kind"], float(entry.get("tolerance", 0.0)), entry.get("better", "equal")
    )


def build_baseline(
    key: str,
    model: str,
    backend: str,
    hardware: str,
    workload: dict,
    current: dict,
    defaults: dict[str, MetricRule],
    previous: dict | None,
    versions: dict,
) -> dict:
    """A baseline from this run's metrics; tolerances from `previous` where it has the metric."""
    old = (previous or {}).get("metrics", {})
    metrics = {}
    for name, value in sorted(current.items()):
        rule = rule_of(old[name]) if name in old else defaults[name]
        metrics[name] = {
            "value": value,
            "kind": rule.kind,
            "tolerance": rule.tolerance,
            "better": rule.better,
        }
    return {
        "schema_version": SCHEMA_VERSION,
        "key": key,
        "model": model,
        "backend": backend,
        "hardware": hardware,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "versions": versions,
        "workload": workload,
        "metrics": metrics,
    }


def write_baseline(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path
