"""Current metrics vs a baseline's, one rule per metric: relative (speed), absolute (perplexity),
exact (greedy tokens, error counts). Only a change in the worse direction beyond the tolerance is
a regression; a change in the better direction is reported as such and passes."""

import math
from dataclasses import dataclass

from pipeline.bench.baseline import MetricRule, rule_of


@dataclass(frozen=True, slots=True)
class Row:
    metric: str
    baseline: object
    current: object
    change: str
    allowed: str
    status: str  # ok | better | REGRESSED | MISSING

    @property
    def is_regression(self) -> bool:
        return self.status in ("REGRESSED", "MISSING")


def _worse_by(base: float, cur: float, rule: MetricRule) -> float:
    """How much worse `cur` is than `base` in the rule's units (> 0 worse, < 0 better)."""
    delta = cur - base
    if rule.kind == "relative":
        delta = (
            delta / abs(base) if base else (0.0 if cur == base else math.copysign(math.inf, delta))
        )
    if rule.better == "higher":
        return -delta
    if rule.better == "lower":
        return delta
    return abs(delta)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return f"[{len(value)} items]"
    return str(value)


def compare_metric(name: str, entry: dict, current) -> Row:
    rule, base = rule_of(entry), entry["value"]
    if current is None:
        return Row(name, _fmt(base), "-", "-", "-", "MISSING")
    if rule.kind == "exact":
        if current == base:
            return Row(name, _fmt(base), _fmt(current), "same", "exact", "ok")
        if isinstance(base, list) and isinstance(current, list):
            diff = sum(a != b for a, b in zip(base, current, strict=False)) + abs(
                len(base) - len(current)
            )
            change = f"{diff} of {max(len(base), len(current))} differ"
        else:
            change = f"{_fmt(base)} -> {_fmt(current)}"
        return Row(name, _fmt(base), _fmt(current), change, "exact", "REGRESSED")
    if not isinstance(current, int | float) or math.isnan(current):
        return Row(name, _fmt(base), _fmt(current), "not a number", "-", "REGRESSED")
    worse = _worse_by(float(base), float(current), rule)
    if rule.kind == "relative":
        change = f"{(current - base) / base * 100:+.1f}%" if base else "n/a"
        allowed = f"{rule.tolerance * 100:.0f}% {'drop' if rule.better == 'higher' else 'rise'}"
    else:
        change = f"{current - base:+.4g}"
        allowed = (
            f"+-{rule.tolerance:g}"
            if rule.better == "equal"
            else f"{rule.tolerance:g} {'drop' if rule.better == 'higher' else 'rise'}"
        )
    if worse > rule.tolerance:
        status = "REGRESSED"
    elif worse < 0 and rule.better != "equal":
        status = "better"
    else:
        status = "ok"
    return Row(name, _fmt(base), _fmt(current), change, allowed, status)


def compare(baseline_metrics: dict, current: dict) -> list[Row]:
    """One row per baseline metric (a metric only the current run has is not judged)."""
    return [
        compare_metric(name, entry, current.get(name)) for name, entry in baseline_metrics.items()
    ]


def format_table(rows: list[Row]) -> str:
    """A markdown table (readable as plain text too)."""
    header = ("metric", "baseline", "current", "change", "allowed", "status")
    lines = [header] + [
        (r.metric, r.baseline, r.current, r.change, r.allowed, r.status) for r in rows
    ]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    out = [
        "| " + " | ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)) + " |"
        for line in lines
    ]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)
