"""Numbers derived from scripts.bench_engine's runs (bytes a decode step reads, ratios,
greedy agreement) and its tables (bench_engine.md)."""

import json
import math
from pathlib import Path

import torch
from safetensors import safe_open

from scripts.engine_run import Workload

STORED_BYTES = {"F32": 4, "I8": 1, "U8": 1, "F8_E4M3": 1}  # quantized codes and their scales


def decode_bytes(ckpt_dir: Path, dtype: torch.dtype, work: Workload) -> dict:
    """Bytes one batch-1 decode step must read: every weight but the embedding table (one row
    is gathered), plus the KV cache at the mean context of the run. 16-bit tensors count in
    the run dtype (the engine casts them), quantized codes and scales as stored."""
    cfg = json.loads((ckpt_dir / "config.json").read_text())
    with safe_open(ckpt_dir / "rank0.safetensors", "pt") as f:
        slices = [f.get_slice(n) for n in f.keys() if n != "transformer.vocab_embedding.weight"]
        weight_bytes = sum(
            math.prod(s.get_shape()) * STORED_BYTES.get(s.get_dtype(), dtype.itemsize)
            for s in slices
        )
    kv_per_token = (
        2
        * cfg["num_hidden_layers"]
        * cfg["num_key_value_heads"]
        * cfg["head_size"]
        * dtype.itemsize
    )
    mean_context = work.input_len + work.output_len / 2
    return {
        "weight_bytes": weight_bytes,
        "kv_bytes_per_token": kv_per_token,
        "bytes_per_step": weight_bytes + kv_per_token * mean_context,
    }


def prefix_agreement(tokens: list[int], reference: list[int]) -> int:
    """How many greedy tokens match the reference before the first difference."""
    pairs = list(zip(tokens, reference, strict=False))
    return next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs))


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def markdown(results: dict) -> str:
    rows = [
        "| model | metric | engine | HF eager | HF static cache | HF static batch | "
        "HF generate_batch | engine / best HF |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results["models"].items():
        e, hf = r["engine"], r["hf"]
        static = hf.get("static_cache_decode_tok_s")
        best = max(v for v in (hf["decode_tok_s"], static) if v)
        rows.append(
            f"| {name} | batch-1 decode tok/s (% roofline) | {e['decode_tok_s']:.0f} "
            f"({r['engine_pct_roofline']:.0f}%) | {hf['decode_tok_s']:.0f} | "
            f"{f'{static:.0f}' if static else '-'} | - | - | "
            f"{ratio(e['decode_tok_s'], best)} |"
        )
        sb, cb = hf["static_batching"], hf["continuous_batching"]
        cb_tok_s = cb.get("throughput_out_tok_s")
        best = max(v for v in (sb["throughput_out_tok_s"], cb_tok_s) if v)
        rows.append(
            f"| {name} | offline out tok/s ({work_label(results)}) | "
            f"{e['throughput_out_tok_s']:.0f} | - | - | "
            f"{sb['throughput_out_tok_s']:.0f} | "
            f"{f'{cb_tok_s:.0f}' if cb_tok_s else cb.get('error', '-')} | "
            f"{ratio(e['throughput_out_tok_s'], best)} |"
        )
    return "\n".join(rows)


def checks_markdown(checks: dict) -> str:
    kernel_checks = checks["kernels"]
    lines = ["| check | kernel / op | error | ok |", "|---|---|---|---|"]
    if "skipped" in kernel_checks:
        lines.append(f"| Triton kernels | - | - | {kernel_checks['skipped']} |")
    else:
        lines += [
            f"| Triton {name} | triton | max abs {c['max_abs_err']:.2e} | {c['ok']} |"
            for name, c in kernel_checks.items()
        ]
    lines += [
        f"| linear {algo} | {c['kernel']} | rel {c['rel_err']:.2e} | {c['ok']} |"
        for algo, c in checks["linears"].items()
    ]
    return "\n".join(lines)


def work_label(results: dict) -> str:
    w = results["workload"]
    return f"{w['num_requests']} req, {w['input_len']} in / {w['output_len']} out"


def vs_bf16(run: dict, roof: dict, bandwidth: float, bf16_engine: dict) -> dict:
    """An engine run with its roofline (decode_bytes `roof`, copy bandwidth in bytes/s) and its
    ratios to the BF16 engine of the same run."""
    roofline_tok_s = bandwidth / roof["bytes_per_step"]
    tok_s, bf16_tok_s = run.get("throughput_out_tok_s"), bf16_engine.get("throughput_out_tok_s")
    agreement = prefix_agreement(run["greedy_tokens"], bf16_engine["greedy_tokens"])
    return {
        **roof,
        **run,
        "roofline_tok_s": roofline_tok_s,
        "pct_roofline": 100 * run["decode_tok_s"] / roofline_tok_s,
        "decode_speedup_vs_bf16": run["decode_tok_s"] / bf16_engine["decode_tok_s"],
        "throughput_speedup_vs_bf16": tok_s / bf16_tok_s if tok_s and bf16_tok_s else None,
        "greedy_prefix_agreement_vs_bf16": agreement,
    }


def _times(value: float | None) -> str:
    return f"{value:.2f}x" if value else "-"


def _quant_row(name: str, fmt: str, q: dict) -> str:
    if "error" in q:
        return f"| {name} | {fmt} | failed: {q['error']} |" + " |" * 8
    block = q.get("quantization") or {}
    algo = block.get("quant_algo", "-")
    if "group_size" in block:
        algo += f" g{block['group_size']}" + (" prequant" if block["pre_quant_scale"] else "")
    tok_s, ttft = q.get("throughput_out_tok_s"), q.get("ttft_p50_s")
    return (
        f"| {name} | {fmt} | {algo} | {q['decode_tok_s']:.0f} ({q['pct_roofline']:.0f}%) | "
        f"{_times(q['decode_speedup_vs_bf16'])} | "
        f"{f'{tok_s:.0f}' if tok_s else q.get('throughput_error', '-')} | "
        f"{_times(q['throughput_speedup_vs_bf16'])} | {f'{1e3 * ttft:.0f}' if ttft else '-'} | "
        f"{q['weight_bytes'] / 1e9:.2f} | "
        f"{q['greedy_prefix_agreement_vs_bf16']}/{len(q['greedy_tokens'])} | "
        + ", ".join(f"{kernel} x{n}" for kernel, n in q["kernels"].items())
        + " |"
    )


def quant_markdown(results: dict) -> str:
    """The "quantized vs BF16" table, or "" when no model ran quantized formats."""
    rows = [
        "### quantized vs BF16 (same run)",
        "",
        "| model | format | quant_algo | batch-1 decode tok/s (% roofline) | vs BF16 | "
        "offline out tok/s | vs BF16 | TTFT p50 ms | weight GB | greedy prefix = BF16 | linears |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    bandwidth = results["copy_bandwidth_gb_s"] * 1e9
    quantized = {name: r for name, r in results["models"].items() if "quant" in r}
    for name, r in quantized.items():
        rows.append(_quant_row(name, r["dtype"], vs_bf16(r["engine"], r, bandwidth, r["engine"])))
        rows += [_quant_row(name, fmt, q) for fmt, q in r["quant"].items()]
    return "\n".join(rows) if quantized else ""


def tables(results: dict) -> str:
    parts = [markdown(results), quant_markdown(results), checks_markdown(results["checks"])]
    return "\n\n".join(p for p in parts if p)
