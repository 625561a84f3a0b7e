"""Benchmark the torch engine against HF transformers on one GPU, in one command.

    python -m scripts.bench_engine --out $OUT [--smollm-ckpt DIR] [--tiny]
        [--quant int8_wo,int4_wo,int4_awq,fp8 [--quant-models NAMES] [--quant-decode-only]]

Models: a Llama-3.1-8B-shaped model with random bf16 weights (the same weights serve HF and,
through a TensorRT-LLM checkpoint and the torch backend's build, the engine), then SmolLM2 in
bf16: its converted checkpoint with --smollm-ckpt, else its shape with random weights (speed
does not depend on the values; EOS is ignored). First, correctness self-checks of the GPU paths
(scripts.gpu_checks). Measured in this one run: copy bandwidth, batch-1 decode tok/s and its %
of the HBM roofline, offline throughput (all requests at t=0), HF `generate` (eager, and static
cache = compiled) and HF continuous batching (`generate_batch`); optional HF baselines are
skipped when they would overrun --budget-s. Writes bench_engine.json + bench_engine.md to --out
(after each model, so a later failure keeps earlier results). --tiny runs the same code on CPU
with a tiny model (the unit test). Needs torch + transformers, not hydra/modelopt.

--quant: then the engine alone on each quantized format of the same weights
(scripts.quant_checkpoints), relative to the BF16 engine of this run; optional HF baselines
leave time for it.
"""

import argparse
import json
import logging
import shutil
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from pipeline.synthetic.shapes import LLAMA_8B, SMOLLM2, TINY
from scripts.bench_engine_report import decode_bytes, prefix_agreement, tables, vs_bf16
from scripts.engine_run import (
    TINY_WORKLOAD,
    Workload,
    free_memory,
    measure_engine,
    prompts_for,
    sync,
)
from scripts.gpu_checks import gpu_checks
from scripts.hf_baselines import bench_hf, hf_from_checkpoint
from scripts.model_shapes import (
    build_engine,
    random_hf_model,
    write_checkpoint,
    write_tokenizer,
)
from scripts.quant_checkpoints import (
    QuantPlan,
    activation_amax,
    add_quant_args,
    quant_plan,
    write_quantized_checkpoint,
)

log = logging.getLogger("bench_engine")


def copy_bandwidth(device: torch.device, num_bytes: int, iters: int = 10) -> float:
    """Device copy bandwidth in bytes/s, counting bytes read + written (as perf_targets §9)."""
    src = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        dst.copy_(src)
    sync(device)
    return 2 * num_bytes * iters / (time.perf_counter() - start)


def bench_engine_side(
    name: str,
    ckpt_dir: Path,
    hf: dict,
    vocab_size: int,
    work: Workload,
    device: torch.device,
    dtype: torch.dtype,
    scratch: Path,
    bandwidth: float,
) -> dict:
    """Build and run the engine (after the HF model is freed), then relate it to HF's numbers."""
    log.info("%s: engine build + run", name)
    dtype_name = str(dtype).removeprefix("torch.")
    tokenizer_dir = write_tokenizer(vocab_size, scratch / f"{name}-tokenizer")
    engine_dir = build_engine(ckpt_dir, tokenizer_dir, scratch / f"{name}-engine", work)
    engine = measure_engine(engine_dir, device, dtype_name, work, vocab_size)
    shutil.rmtree(engine_dir)  # disk: the 8B's 16 GB copy, while quantized formats follow
    roof = decode_bytes(ckpt_dir, dtype, work)
    roofline_tok_s = bandwidth / roof["bytes_per_step"]
    return {
        "dtype": dtype_name,
        **roof,
        "roofline_tok_s": roofline_tok_s,
        "engine": engine,
        "hf": hf,
        "greedy_prefix_agreement": prefix_agreement(engine["greedy_tokens"], hf["greedy_tokens"]),
        "engine_pct_roofline": 100 * engine["decode_tok_s"] / roofline_tok_s,
        "hf_pct_roofline": 100
        * max(hf["decode_tok_s"], hf.get("static_cache_decode_tok_s") or 0)
        / roofline_tok_s,
    }


def bench_quant_format(
    name: str,
    fmt: str,
    ckpt: Path,
    act_amax: dict[str, float],
    bf16_engine: dict,
    work: Workload,
    device: torch.device,
    dtype: torch.dtype,
    scratch: Path,
    bandwidth: float,
    quant: QuantPlan,
) -> dict:
    """The engine alone on one quantized format of the checkpoint, against the BF16 engine. A
    failure is reported, not raised: one GPU command has to bring back all it can."""
    log.info("%s: %s checkpoint, engine build + run", name, fmt)
    start, out = time.perf_counter(), scratch / f"{name}-{fmt}"
    try:
        quant_dir = write_quantized_checkpoint(ckpt, fmt, act_amax, out / "ckpt", device)
        config = json.loads((quant_dir / "config.json").read_text())
        roof = decode_bytes(quant_dir, dtype, work)
        tokenizer_dir = write_tokenizer(config["vocab_size"], out / "tokenizer")
        engine_dir = build_engine(quant_dir, tokenizer_dir, out / "engine", work)
        shutil.rmtree(quant_dir)  # disk: an 8B format is 5-9 GB, and its engine dir as much again
        dtype_name, vocab = str(dtype).removeprefix("torch."), config["vocab_size"]
        throughput, cap_s = not quant.is_decode_only, quant.throughput_cap_s
        run = measure_engine(engine_dir, device, dtype_name, work, vocab, throughput, cap_s)
        if quant.is_decode_only:
            run["throughput_error"] = "skipped (--quant-decode-only)"
        run = {"quantization": config["quantization"], **run}
        result = vs_bf16(run, roof, bandwidth, bf16_engine)
    except Exception as err:  # noqa: BLE001 - reported in the results
        log.exception("%s: %s failed", name, fmt)
        result = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    shutil.rmtree(out, ignore_errors=True)
    free_memory()  # here, not in the except block, whose traceback still holds the engine
    return result | {"wall_s": time.perf_counter() - start}


def model_plan(args: argparse.Namespace) -> list[tuple[str, dict | Path, Workload]]:
    """(name, random shape or checkpoint dir, workload) per model, in run order."""
    if args.tiny:
        plan = [("tiny-llama", TINY, TINY_WORKLOAD)]
        if args.smollm_ckpt:
            plan.append(("smollm2-135m", Path(args.smollm_ckpt), TINY_WORKLOAD))
        return plan
    static = not args.no_hf_static_cache
    smollm = Path(args.smollm_ckpt) if args.smollm_ckpt else SMOLLM2
    return [
        (
            "llama-3.1-8b-shape",
            LLAMA_8B,
            Workload(num_requests=args.num_requests, hf_static_cache=static),
        ),
        (
            "smollm2-135m" if args.smollm_ckpt else "smollm2-135m-shape",
            smollm,
            Workload(
                num_requests=args.num_requests,
                hf_cb_requests=args.num_requests,
                hf_static_cache=static,
                hf_reserve_s=60,
            ),
        ),
    ]


def run_model(
    name: str,
    source: dict | Path,
    work: Workload,
    device: torch.device,
    dtype: torch.dtype,
    scratch: Path,
    bandwidth: float,
    deadline: float,
    calibrate: bool = False,
) -> tuple[dict, Path, dict[str, float]]:
    """HF baselines on the model, then (HF freed) the engine on the same weights: (results, the
    engine's checkpoint, with `calibrate` the activation amax of each linear for quant runs)."""
    dtype_name = str(dtype).removeprefix("torch.")
    if isinstance(source, Path):  # a converted checkpoint: HF gets its weights
        ckpt = source
        vocab = json.loads((ckpt / "config.json").read_text())["vocab_size"]
        model = hf_from_checkpoint(ckpt, dtype, device)
    else:  # a shape: random weights, written as a checkpoint for the engine
        vocab = source["vocab_size"]
        model = random_hf_model(source, dtype, device)
        ckpt = write_checkpoint(model, dtype_name, scratch / f"{name}-ckpt")
    log.info("%s: HF baselines", name)
    hf = bench_hf(model, work, vocab, deadline)
    # seed 3: none of the measured prompts (decode 0, warm-up 1, offline 2)
    act_amax = activation_amax(model, prompts_for(vocab, work, 4, seed=3)) if calibrate else {}
    del model  # the engine gets the GPU to itself
    free_memory()
    result = bench_engine_side(name, ckpt, hf, vocab, work, device, dtype, scratch, bandwidth)
    return result, ckpt, act_amax


def run(args: argparse.Namespace, out_dir: Path, quant: QuantPlan | None = None) -> dict:
    quant = quant or QuantPlan()
    deadline = time.perf_counter() + args.budget_s
    device = torch.device("cpu" if args.tiny else "cuda")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    plan = [  # optional HF baselines leave time for the quantized formats that follow them
        (n, s, replace(w, hf_reserve_s=w.hf_reserve_s + quant.reserve_s()) if quant.runs(n) else w)
        for n, s, w in model_plan(args)
    ]
    bandwidth = copy_bandwidth(device, plan[0][2].copy_bytes)
    results = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "copy_bandwidth_gb_s": bandwidth / 1e9,
        "workload": asdict(plan[0][2]),
        "checks": gpu_checks(device, dtype),
        "models": {},
    }
    if quant.formats:
        results["quant_plan"] = asdict(quant)
    with tempfile.TemporaryDirectory(prefix="bench_engine_") as tmp:
        scratch = Path(tmp)
        for name, source, work in plan:
            start = time.perf_counter()
            result, ckpt, act_amax = run_model(
                name, source, work, device, dtype, scratch, bandwidth, deadline, quant.runs(name)
            )
            result["wall_s"] = time.perf_counter() - start
            results["models"][name] = result
            write_results(results, out_dir)  # partial results survive a later failure
            for fmt in quant.formats if quant.runs(name) else ():
                result.setdefault("quant", {})[fmt] = bench_quant_format(
                    name,
                    fmt,
                    ckpt,
                    act_amax,
                    result["engine"],
                    work,
                    device,
                    dtype,
                    scratch,
                    bandwidth,
                    quant,
                )
                write_results(results, out_dir)
    return results


def write_results(results: dict, out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_engine.json").write_text(json.dumps(results, indent=2))
    table = tables(results)
    (out_dir / "bench_engine.md").write_text(table + "\n")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--smollm-ckpt",
        help="converted SmolLM2 TensorRT-LLM checkpoint dir "
        "(unquantized); without it, SmolLM2's shape with random weights",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=450,
        help="optional HF baselines are skipped when they would run past it",
    )
    parser.add_argument("--num-requests", type=int, default=512)
    parser.add_argument(
        "--no-hf-static-cache",
        action="store_true",
        help="skip HF generate with a compiled static cache (saves ~1 min)",
    )
    parser.add_argument("--tiny", action="store_true", help="CPU, tiny model: tests the script")
    add_quant_args(parser)
    args = parser.parse_args(argv)
    try:
        quant = quant_plan(args, [name for name, _, _ in model_plan(args)])
    except ValueError as err:
        parser.error(str(err))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    start = time.perf_counter()
    results = run(args, args.out, quant)
    results["total_s"] = time.perf_counter() - start
    print(write_results(results, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
