"""TensorRT-LLM's published H100 workload matrix, run on the torch engine, in one command.

    python -m scripts.bench_trtllm_matrix --out $OUT [--rows 128x128,2048x128]
        [--dtypes fp8,bf16] [--previous FILE] [--budget-s 520] [--profile-steps 8] [--tiny]

Llama-3.1-8B shape, random weights (speed does not depend on the values; EOS is ignored), one
GPU. Each row runs its requests all at t=0 and counts output tokens as trtllm-bench's "Total
Output Throughput" does (output tokens / wall time from the first request to the last token).
FP8 is FP8 weights, activations and KV cache (the ModelOpt recipe of NVIDIA's published FP8
checkpoints); BF16 is the unquantized model.

The published counts (30,000 requests of 128/128 ...) take hours; each row here runs the
smallest count that keeps the engine at its steady state: at least twice the requests the KV
cache holds at once, and about --row-s seconds of work at the published rate. The evidence is in
the results: the steady window (from the step the running batch first reaches its peak to the
step it falls below 90% of it, when the queue has drained), the rate inside it, and its share
of the run.

Where each row's time goes: --profile-steps steps of it run under torch.profiler mid-run (once
40% of its output tokens are out), each with a device sync after it; the report gives each
kernel class's device time (scripts.profile_report's classes: GEMM, prompt and decode
attention, ...) and the GPU's idle time as shares of a step. Each row also reports its model
TFLOP/s (request_flops over the wall time), and TensorRT-LLM's at its published rate.

A matrix does not fit one call: rows run in order until the next would pass --budget-s, then
the results so far are written. Pass the earlier bench_trtllm_matrix.json as --previous and the
rows it holds are kept, not run again.
"""

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import record_function

from pipeline.bench.metrics import percentiles
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.synthetic.shapes import LLAMA_8B, TINY
from scripts.engine_run import Workload, free_memory, sync
from scripts.model_shapes import build_engine, random_hf_model, write_checkpoint, write_tokenizer
from scripts.profile_engine import profiling
from scripts.profile_report import KERNEL_CLASS_NAMES, STEP_RANGE, summarize_trace
from scripts.quant_checkpoints import activation_amax, write_quantized_checkpoint

log = logging.getLogger("bench_trtllm_matrix")

# Llama-3.1-8B FP8, one H100 SXM 80GB, output tok/s: (isl, osl) -> (v0.17 engine flow, current
# docs, published request count). TensorRT-LLM docs/source/performance/perf-overview.md.
PUBLISHED = {
    (128, 128): (28837, 28312, 30000),
    (128, 2048): (21109, 22714, 3000),
    (128, 4096): (13594, 14325, 1500),
    (500, 2000): (16501, 17660, 3000),
    (1000, 1000): (15245, 15220, 3000),
    (1000, 2000): (None, 13899, 1500),
    (2048, 128): (3557, 3450, 3000),
    (2048, 2048): (9488, 9305, 1500),
    (5000, 500): (3559, 3459, 1500),
    (20000, 2000): (1401, 1351, 1000),
}
TINY_ROWS = {(16, 8): (None, 100, 24), (48, 4): (None, 50, 16)}
FORMATS = {"fp8": "fp8_kv", "bf16": None}  # matrix dtype -> scripts.quant_checkpoints format
# --profile-steps start this far into a row's output: mid-run, where the batch is whatever the
# row settles at (the KV cache bounds a long row's; the step's token budget a prompt-heavy one's)
PROFILE_AT = 0.4


def row_name(row: tuple[int, int]) -> str:
    return f"{row[0]}x{row[1]}"


def parse_row(name: str) -> tuple[int, int]:
    isl, osl = name.split("x")
    return int(isl), int(osl)


def request_count(row: tuple[int, int], kv_tokens: int, max_batch: int, row_s: float) -> int:
    """Requests for a steady-state run of `row`: twice what the KV cache holds at once, and
    about row_s seconds at the published rate; never more than the published count."""
    isl, osl = row
    table = PUBLISHED.get(row) or TINY_ROWS[row]
    rate, published_count = max(r for r in table[:2] if r), table[2]
    in_flight = min(max_batch, kv_tokens // (isl + osl))
    by_time = int(row_s * rate / osl)
    return max(1, min(published_count, max(2 * in_flight, by_time)))


def steady_window(trace: list[tuple[float, int, int]]) -> dict:
    """trace: (seconds since start, output tokens so far, running requests) after each step."""
    peak = max(running for _, _, running in trace)
    first = next(i for i, (_, _, running) in enumerate(trace) if running == peak)
    last = next((i for i in range(first, len(trace)) if trace[i][2] < 0.9 * peak), len(trace) - 1)
    (t0, n0, _), (t1, n1, _) = trace[first], trace[last]
    span = t1 - t0
    return {
        "peak_running": peak,
        "steady_s": span,
        "steady_share": span / trace[-1][0] if trace[-1][0] else 0.0,
        "steady_out_tok_s": (n1 - n0) / span if span > 0 else None,
    }


def profile_steps(engine: LLMEngine, device: torch.device, num_steps: int) -> tuple[list, dict]:
    """num_steps engine steps under torch.profiler, each in its own range with a device sync
    after it (so each step's kernels fall inside it): the steps' deltas and where their time
    went (scripts.profile_report's per-step means, plus each step's wall ms)."""
    deltas, wall_ms = [], []
    with tempfile.TemporaryDirectory(prefix="trtllm_matrix_trace_") as tmp:
        path = Path(tmp) / "trace.json"
        with profiling(device, path):
            for _ in range(num_steps):
                if not engine.has_unfinished():
                    break
                start = time.perf_counter()
                with record_function(STEP_RANGE):
                    deltas += engine.step()
                sync(device)
                wall_ms.append(1e3 * (time.perf_counter() - start))
        summary = summarize_trace(json.loads(path.read_text())["traceEvents"])
    wall = sum(wall_ms) / len(wall_ms)
    summary |= {"wall_ms": wall, "gpu_idle_share": 1 - summary["gpu_busy_ms"] / wall}
    return deltas, summary


def run_row(
    engine: LLMEngine,
    device: torch.device,
    shape: dict,
    row: tuple[int, int],
    count: int,
    num_profile_steps: int = 0,
) -> dict:
    """All `count` requests of `row` at t=0, stepped to the end; with num_profile_steps, that
    many steps are profiled mid-run, once PROFILE_AT of the run's output tokens are out."""
    isl, osl = row
    g = torch.Generator().manual_seed(isl * 7919 + osl)
    prompts = torch.randint(0, shape["vocab_size"], (count, isl), generator=g).tolist()
    params = SamplingParams(max_tokens=osl, ignore_eos=True)
    start = time.perf_counter()
    for prompt in prompts:
        engine.add_request(prompt, params)
    first, last, num_out, trace, profiled = {}, {}, 0, [], None
    while engine.has_unfinished():
        if profiled is None and num_profile_steps and num_out >= PROFILE_AT * count * osl:
            deltas, profiled = profile_steps(engine, device, num_profile_steps)
        else:
            deltas = engine.step()
        now = time.perf_counter() - start
        for delta in deltas:
            if delta.token_ids:
                num_out += len(delta.token_ids)
                first.setdefault(delta.request_id, now)
                last[delta.request_id] = now
        trace.append((now, num_out, len(engine.scheduler.running)))
    wall_s = time.perf_counter() - start
    itl = [(last[r] - first[r]) / (osl - 1) for r in first if osl > 1]
    ttft, itl_p = percentiles(list(first.values()), (50, 99)), percentiles(itl or [0.0], (50, 99))
    return {
        "num_requests": count,
        "out_tok_s": num_out / wall_s,
        "num_out_tokens": num_out,
        "wall_s": wall_s,
        "ttft_p50_s": ttft["p50"],
        "ttft_p99_s": ttft["p99"],
        "itl_p50_s": itl_p["p50"],
        "itl_p99_s": itl_p["p99"],
        # the arithmetic rate reached: for a prompt-heavy row, how fast its GEMMs ran
        "model_tflops": request_flops(shape, row) * count / wall_s / 1e12,
        **steady_window(trace),
    } | ({"profile": profiled} if profiled else {})


def request_flops(shape: dict, row: tuple[int, int]) -> float:
    """The model's arithmetic for one request of `row`: 2 FLOPs a weight a token through the
    decoder's linears, the LM head once a generated token, and causal attention (QK^T and PV,
    2 FLOPs a multiply-add, each token against those before it)."""
    isl, osl = row
    n = isl + osl
    h, layers = shape["hidden_size"], shape["num_hidden_layers"]
    head = shape.get("head_dim") or h // shape["num_attention_heads"]
    q, kv = shape["num_attention_heads"] * head, shape["num_key_value_heads"] * head
    linear = layers * (h * q + 2 * h * kv + q * h + 3 * h * shape["intermediate_size"])
    attention = 2 * layers * q * n * n  # sum over positions p of 4 * p * q
    return 2 * linear * n + 2 * h * shape["vocab_size"] * osl + attention


def estimate_s(row: tuple[int, int], count: int) -> float:
    table = PUBLISHED.get(row) or TINY_ROWS[row]
    return count * row[1] / max(r for r in table[:2] if r)


def make_engine_dir(
    shape: dict, fmt: str | None, rows: list, max_batch: int, scratch: Path, device, dtype
) -> Path:
    """The shape's random weights as a checkpoint (quantized to fmt), built for the rows' limits."""
    model = random_hf_model(shape, dtype, device)
    dtype_name = str(dtype).removeprefix("torch.")
    ckpt = write_checkpoint(model, dtype_name, scratch / "ckpt")
    if fmt:
        g = torch.Generator().manual_seed(3)
        calib = torch.randint(0, shape["vocab_size"], (4, 128), generator=g).tolist()
        amax = activation_amax(model, calib)
        del model
        free_memory()
        ckpt = write_quantized_checkpoint(ckpt, fmt, amax, scratch / f"ckpt-{fmt}", device)
    else:
        del model
        free_memory()
    max_in = max(isl for isl, _ in rows)
    max_seq = max(isl + osl for isl, osl in rows)
    limits = Workload(input_len=max_in, output_len=max_seq - max_in, max_batch_size=max_batch)
    tokenizer = write_tokenizer(shape["vocab_size"], scratch / "tokenizer")
    return build_engine(ckpt, tokenizer, scratch / f"engine-{fmt or 'bf16'}", limits)


def published_row(row: tuple[int, int], shape: dict) -> dict:
    """TensorRT-LLM's numbers for the row, and the arithmetic rate its better one means (its
    published requests at its published rate)."""
    v017, current, count = PUBLISHED.get(row) or TINY_ROWS[row]
    best = max(r for r in (v017, current) if r)
    return {
        "trtllm_v0_17": v017,
        "trtllm_current": current,
        "trtllm_requests": count,
        "trtllm_model_tflops": request_flops(shape, row) * best / row[1] / 1e12,
    }


def table(results: dict) -> str:
    lines = [
        f"Device: {results['device']}; torch {results['torch']}. Output tok/s, all requests at "
        "t=0; ratio against the better of TensorRT-LLM's two published FP8 numbers.",
        "",
        "| ISL/OSL | requests (published) | FP8 out tok/s | BF16 out tok/s | TensorRT-LLM FP8 "
        "| FP8 ratio | model TFLOP/s, FP8 / TensorRT-LLM | steady share | FP8 TTFT p50/p99 s "
        "| FP8 ITL p50/p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in results["rows"].items():
        fp8, bf16 = row.get("fp8", {}), row.get("bf16", {})
        best = max(r for r in (row["trtllm_v0_17"], row["trtllm_current"]) if r)
        rate = fp8.get("out_tok_s")

        def fmt(x, spec=",.0f"):
            return "-" if x is None else format(x, spec)

        lines.append(
            f"| {name} | {fmt(fp8.get('num_requests') or bf16.get('num_requests'), 'd')} "
            f"({row['trtllm_requests']:,}) | {fmt(rate)} | {fmt(bf16.get('out_tok_s'))} "
            f"| {best:,} | {fmt(rate / best if rate else None, '.2f')}x "
            f"| {fmt(fp8.get('model_tflops'))} / {fmt(row.get('trtllm_model_tflops'))} "
            f"| {fmt(fp8.get('steady_share'), '.0%')} "
            f"| {fmt(fp8.get('ttft_p50_s'), '.2f')} / {fmt(fp8.get('ttft_p99_s'), '.2f')} "
            f"| {fmt(1e3 * fp8['itl_p50_s'] if fp8 else None, '.1f')} / "
            f"{fmt(1e3 * fp8['itl_p99_s'] if fp8 else None, '.1f')} |"
        )
    return "\n".join(lines)


def profile_table(results: dict) -> str:
    """Where a profiled step's time went, a row per profiled ISL/OSL and format: device ms of
    each kernel class as a share of the step's wall time, and the GPU's idle share."""
    lines = [
        "Profiled steps (mid-run): mean wall ms a step, then each kernel class's device "
        "time and the GPU's idle time as shares of it.",
        "",
        "| ISL/OSL | format | steps | wall ms | "
        + " | ".join(KERNEL_CLASS_NAMES)
        + " | GPU idle |",
        "|---|---|---|---|" + "---|" * len(KERNEL_CLASS_NAMES) + "---|",
    ]
    for name, row in results["rows"].items():
        for side in FORMATS:
            prof = row.get(side, {}).get("profile")
            if not prof:
                continue
            wall = prof["wall_ms"]
            shares = " | ".join(f"{prof['gpu_ms'][c] / wall:.0%}" for c in KERNEL_CLASS_NAMES)
            lines.append(
                f"| {name} | {side} | {prof['num_profiled_steps']} | {wall:.1f} | {shares} "
                f"| {prof['gpu_idle_share']:.0%} |"
            )
    return "\n".join(lines) if len(lines) > 4 else ""


def write_results(results: dict, out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_trtllm_matrix.json").write_text(json.dumps(results, indent=2))
    text = "\n\n".join(part for part in (table(results), profile_table(results)) if part)
    (out_dir / "bench_trtllm_matrix.md").write_text(text + "\n")
    return text


def run(args: argparse.Namespace) -> dict:
    deadline = time.perf_counter() + args.budget_s
    device = torch.device("cpu" if args.tiny else "cuda")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    shape, known = (TINY, TINY_ROWS) if args.tiny else (LLAMA_8B, PUBLISHED)
    rows = [parse_row(r) for r in args.rows.split(",")] if args.rows else []
    rows = rows or list(known)
    unknown = [row_name(r) for r in rows if r not in known]
    if unknown:
        raise SystemExit(f"--rows: {unknown} are not in the matrix ({[*map(row_name, known)]})")
    previous = json.loads(args.previous.read_text()) if args.previous else {}
    results = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "rows": previous.get("rows", {}),
    }
    for dtype_key in args.dtypes.split(","):
        todo = [r for r in rows if dtype_key not in results["rows"].get(row_name(r), {})]
        if not todo:
            continue
        with tempfile.TemporaryDirectory(prefix="trtllm_matrix_") as tmp:
            log.info("%s: building the engine for %s", dtype_key, [*map(row_name, todo)])
            engine_dir = make_engine_dir(
                shape, FORMATS[dtype_key], todo, args.max_batch_size, Path(tmp), device, dtype
            )
            engine = LLMEngine.from_engine_dir(
                engine_dir, device=str(device), dtype=str(dtype).removeprefix("torch.")
            )
            stats = engine.stats()
            kv_tokens = stats["num_total_blocks"] * stats["block_size"]
            for row in todo:
                count = request_count(row, kv_tokens, args.max_batch_size, args.row_s)
                if time.perf_counter() + estimate_s(row, count) > deadline:
                    log.info("%s %s: left for the next call (budget)", dtype_key, row_name(row))
                    continue
                log.info("%s %s: %d requests", dtype_key, row_name(row), count)
                result = run_row(engine, device, shape, row, count, args.profile_steps)
                entry = results["rows"].setdefault(row_name(row), published_row(row, shape))
                entry[dtype_key] = result | {"kv_tokens": kv_tokens}
                write_results(results, args.out)  # a later failure keeps this row
            del engine
            sync(device)
            free_memory()
    results["rows"] = dict(sorted(results["rows"].items(), key=lambda kv: parse_row(kv[0])))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", default="", help="ISLxOSL,... (default: the whole matrix)")
    parser.add_argument("--dtypes", default="fp8,bf16")
    parser.add_argument("--previous", type=Path, help="an earlier bench_trtllm_matrix.json")
    parser.add_argument("--budget-s", type=float, default=520)
    parser.add_argument("--row-s", type=float, default=30, help="work per row, in seconds")
    parser.add_argument("--max-batch-size", type=int, default=1024)
    parser.add_argument(
        "--profile-steps",
        type=int,
        default=8,
        help="steps of each row profiled once its batch is steady (0: none)",
    )
    parser.add_argument("--tiny", action="store_true", help="CPU, tiny model: tests the script")
    args = parser.parse_args(argv)
    if args.tiny:
        args.max_batch_size = min(args.max_batch_size, 8)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    results = run(args)
    print(write_results(results, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
