"""Which numbers regress judges, and how each is judged by default (relative for speed and
latency, absolute for perplexity, exact for greedy tokens and error counts)."""

from pipeline.bench.baseline import MetricRule

SPEED = ("output_tok_s", "request_per_s")
LATENCY = ("ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "e2e_ms_p50", "e2e_ms_p99")


def current_metrics(bench_report: dict, accuracy: dict) -> dict:
    """{"<target>.<metric>": value, "accuracy.ppl": ..., "accuracy.greedy_tokens": [[...]]}"""
    out = {}
    for target, result in bench_report["targets"].items():
        summary = result["summary"]
        for key in SPEED + LATENCY + ("num_errors",):
            out[f"{target}.{key}"] = summary[key]
    out["accuracy.ppl"] = accuracy["ppl"]
    out["accuracy.greedy_tokens"] = accuracy["greedy_tokens"]
    return out


def default_rules(names, options) -> dict[str, MetricRule]:
    rules = {}
    for name in names:
        key = name.rpartition(".")[2]
        if key in SPEED:
            rules[name] = MetricRule("relative", options.speed_tolerance, "higher")
        elif key in LATENCY:
            rules[name] = MetricRule("relative", options.latency_tolerance, "lower")
        elif key == "ppl":
            rules[name] = MetricRule("absolute", options.ppl_tolerance, "lower")
        else:  # num_errors, greedy_tokens
            rules[name] = MetricRule("exact", 0.0, "equal")
    return rules
