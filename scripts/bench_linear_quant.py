"""Quantized linears at decode row counts on the Llama-3.1-8B shapes, one kernel at a time.

    python -m scripts.bench_linear_quant --out $OUT [--rows 1 2 4 8 16 64]

Kernels: bf16 cuBLAS (F.linear), int8 on the tl.dot kernel (int8_matmul.w8a16_dot, the decode
path before the GEMV) and on int8_gemv, int4 on tinygemm (torch._weight_int4pack_mm) and on our
tensor-core kernel (int4_mma), both CUDA only, with group 128 scales. Per shape and row count:
us a call, achieved GB/s (weight + scale bytes / time) and the relative error against
dequantize + matmul in float32. Per row count: a decode step's linears, 32 layers of qkv,
o_proj, gate_up and down plus the bf16 lm_head, in ms and as a ratio to bf16 (attention, norms
and sampling left out).

CUDA times replay a graph of many calls after a warm-up call (which autotunes), cycling
through enough weight copies to miss the 50 MB L2, as a step reading each weight once does.
Writes bench_linear_quant.json and .md to --out. --tiny: small shapes on CPU through triton's
interpreter (TRITON_INTERPRET=1 must be set), which tests the code path; its times mean nothing.
"""

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from pipeline.engine.kernels import int4_mma, int8_gemv, int8_matmul
from pipeline.engine.quant.primitives import (
    dequantize_groupwise,
    pack_int4_tinygemm,
    tinygemm_scales_and_zeros,
)

SHAPES = {
    "qkv": (6144, 4096),
    "o_proj": (4096, 4096),
    "gate_up": (28672, 4096),
    "down": (4096, 14336),
}
TINY_SHAPES = {"qkv": (48, 256), "o_proj": (32, 256), "gate_up": (64, 256), "down": (32, 384)}
LM_HEAD, TINY_LM_HEAD = (128256, 4096), (100, 256)
NUM_LAYERS = 32
GROUP = 128
COPIES_BYTES = 200e6  # weight copies a graph cycles through: 4x the H100's L2
CALLS_PER_GRAPH = 48
GRAPH_REPLAYS = 10
Weights = tuple[tuple, torch.Tensor]  # (kernel arguments after x, dequantized float32 weight)


def _bf16(n: int, k: int, g: torch.Generator, device) -> Weights:
    w = (torch.randn(n, k, generator=g, device=device) * 0.02).to(torch.bfloat16)
    return (w,), w.float()


def _int8(n: int, k: int, g: torch.Generator, device) -> Weights:
    q = torch.randint(-128, 128, (n, k), generator=g, device=device, dtype=torch.int8)
    scale = (torch.rand(n, generator=g, device=device) * 1e-3 + 1e-4).to(torch.bfloat16)
    return (q, scale), q.float() * scale.float()[:, None]


def _int4(n: int, k: int, g: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.randint(-8, 8, (n, k), generator=g, device=device, dtype=torch.int8)
    scale = (torch.rand(n, k // GROUP, generator=g, device=device) * 1e-2 + 1e-3).bfloat16()
    return q, scale


def _int4_tinygemm(n: int, k: int, g: torch.Generator, device) -> Weights:
    q, scale = _int4(n, k, g, device)
    packed = torch._convert_weight_to_int4pack(pack_int4_tinygemm(q), 8)  # 8: k % 128 == 0
    sz = tinygemm_scales_and_zeros(scale.float()).to(torch.bfloat16)
    return (packed, sz), dequantize_groupwise(q, scale)


def _int4_mma(n: int, k: int, g: torch.Generator, device) -> Weights:
    q, scale = _int4(n, k, g, device)
    return int4_mma.pack(q, scale), dequantize_groupwise(q, scale)


KERNELS: dict[str, tuple[Callable, Callable, Callable[[int, int], float]]] = {
    # name: (make weights, call(x, *weights), bytes read)
    "bf16": (_bf16, F.linear, lambda n, k: 2 * n * k),
    "int8_dot": (_int8, int8_matmul.w8a16_dot, lambda n, k: n * k + 2 * n),
    "int8_gemv": (_int8, int8_gemv.w8a16_gemv, lambda n, k: n * k + 2 * n),
    "int4_tinygemm": (
        _int4_tinygemm,
        lambda x, packed, sz: torch._weight_int4pack_mm(x, packed, GROUP, sz),
        lambda n, k: n * k / 2 + 4 * n * k / GROUP,
    ),
    "int4_mma": (
        _int4_mma,
        lambda x, words, scales: int4_mma.matmul(x, words, scales, GROUP),
        lambda n, k: n * k / 2 + 2 * n * k / GROUP,
    ),
}
CUDA_ONLY = ("int4_tinygemm", "int4_mma")


def time_us(calls: list[Callable[[], torch.Tensor]], device: torch.device) -> float:
    """Mean us a call; the first call of each (autotune, compile) is not timed."""
    for call in calls:
        call()
    if device.type == "cpu":
        start = time.perf_counter()
        for call in calls:
            call()
        return (time.perf_counter() - start) * 1e6 / len(calls)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    num_calls = max(1, CALLS_PER_GRAPH // len(calls)) * len(calls)
    with torch.cuda.graph(graph):
        for i in range(num_calls):
            calls[i % len(calls)]()
    graph.replay()  # the first replay uploads the graph
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(GRAPH_REPLAYS):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (GRAPH_REPLAYS * num_calls)


def bench_shape(name: str, n: int, k: int, rows: list[int], device: torch.device) -> list[dict]:
    # -> one result a row count: [M, K] x [N, K] weights, several copies to miss L2
    make, call, num_bytes = KERNELS[name]
    g = torch.Generator(device=device).manual_seed(n + k)
    num_copies = 1 if device.type == "cpu" else max(1, round(COPIES_BYTES / num_bytes(n, k)))
    copies = [make(n, k, g, device) for _ in range(num_copies)]
    reference = copies[0][1]
    for i in range(len(copies)):
        copies[i] = copies[i][0]  # keep the kernel arguments only
    results = []
    for num_rows in rows:
        x = torch.randn(num_rows, k, generator=g, device=device).to(torch.bfloat16)
        expected = x.float() @ reference.T
        err = ((call(x, *copies[0]).float() - expected).norm() / expected.norm()).item()
        us = time_us([lambda w=w, x=x: call(x, *w) for w in copies], device)
        result = {"kernel": name, "n": n, "k": k, "rows": num_rows, "us": us, "rel_err": err}
        results.append(result | {"gb_s": num_bytes(n, k) / us / 1e3})
    return results


def step_estimates(results: list[dict], shapes: dict) -> list[dict]:
    """A decode step's linears per kernel and row count, and its speed-up over bf16."""
    us = {(r["kernel"], r["shape"], r["rows"]): r["us"] for r in results}
    steps = []
    for kernel, rows in sorted({(r["kernel"], r["rows"]) for r in results}):
        layers_us = NUM_LAYERS * sum(us[kernel, s, rows] for s in shapes)
        step_ms = (layers_us + us["bf16", "lm_head", rows]) / 1e3
        steps.append({"kernel": kernel, "rows": rows, "step_ms": step_ms})
    bf16 = {s["rows"]: s["step_ms"] for s in steps if s["kernel"] == "bf16"}
    return [s | {"vs_bf16": bf16[s["rows"]] / s["step_ms"]} for s in steps]


def autotuned() -> dict[str, dict[str, str]]:
    """The config each autotuned kernel picked, per key (N, K, row tile, dtypes)."""
    tuners = {"int8_dot": int8_matmul._decode, "int8_gemv": int8_gemv._tuned}
    tuned = {name: {str(k): str(c) for k, c in t.cache.items()} for name, t in tuners.items()}
    return tuned | {"int4_mma": int4_mma.tuned_configs()}


def markdown(report: dict) -> str:
    shapes = [*report["shapes"], "lm_head"]
    lines = [f"# Quantized linears, decode rows ({report['device']})", ""]
    steps = {(s["kernel"], s["rows"]): s for s in report["steps"]}
    for rows in report["rows"]:
        lines += [f"## {rows} row(s): GB/s (us)", ""]
        lines += ["| kernel | " + " | ".join(shapes) + " | step ms | vs bf16 |"]
        lines += ["|---" * (len(shapes) + 3) + "|"]
        for kernel in report["kernels"]:
            cells = {
                r["shape"]: f"{r['gb_s']:.0f} ({r['us']:.1f})"
                for r in report["results"]
                if r["kernel"] == kernel and r["rows"] == rows
            }
            step = steps.get((kernel, rows))
            tail = [f"{step['step_ms']:.3f}", f"{step['vs_bf16']:.2f}x"] if step else ["", ""]
            lines.append(
                f"| {kernel} | " + " | ".join([cells.get(s, "") for s in shapes] + tail) + " |"
            )
        lines.append("")
    return "\n".join(lines)


def run(kernels: list[str], rows: list[int], is_tiny: bool) -> dict:
    device = torch.device("cpu" if is_tiny else "cuda")
    shapes, lm_head = (TINY_SHAPES, TINY_LM_HEAD) if is_tiny else (SHAPES, LM_HEAD)
    if is_tiny:
        kernels = [k for k in kernels if k not in CUDA_ONLY]
    results = []
    for kernel in kernels:
        todo = {**shapes, "lm_head": lm_head} if kernel == "bf16" else shapes
        for shape, (n, k) in todo.items():
            results += [r | {"shape": shape} for r in bench_shape(kernel, n, k, rows, device)]
    return {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "rows": rows,
        "kernels": kernels,
        "shapes": {**shapes},
        "lm_head": lm_head,
        "results": results,
        "steps": step_estimates(results, shapes),
        "autotuned": autotuned(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 2, 4, 8, 16, 64])
    parser.add_argument("--kernels", nargs="+", choices=list(KERNELS), default=list(KERNELS))
    parser.add_argument("--tiny", action="store_true", help="CPU, interpreter: tests the script")
    args = parser.parse_args(argv)
    if "bf16" not in args.kernels:
        parser.error("--kernels needs bf16: the step estimate is a ratio to it")
    report = run(args.kernels, args.rows, args.tiny)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_linear_quant.json").write_text(json.dumps(report, indent=1))
    table = markdown(report)
    (args.out / "bench_linear_quant.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
