"""The torch engine on several GPUs of one host against one GPU, every number in one run:

- batch-1 decode tok/s and an offline run (all requests at t=0) of Llama-3.1-8B-shaped BF16
  engines at TP=1, TP=2 and PP=2, and of a Llama-3.1-70B shape in FP8 at TP=2 (synthetic weights
  made on the GPUs: pipeline.synthetic.weights);
- real SmolLM2 weights (--smollm2-gguf: a GGUF, e.g. its first layers from
  scripts.gguf_keep_layers) at PP=2 against PP=1: greedy tokens equal;
- with --collectives, scripts.bench_all_reduce first (all-reduce table, TP logits, the share
  of a TP decode step in communication).

    python -m scripts.bench_multi_gpu --out DIR [--runs 8b,70b,smollm2]
        [--smollm2-gguf FILE] [--collectives] [--budget-s 540] [--tiny]
Writes bench_multi_gpu.json + .md to DIR after each run. --tiny: the same code on the CPU (gloo)
with a tiny shape (the unit test). Needs torch + transformers, not hydra/modelopt.
"""

import argparse
import contextlib
import faulthandler
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.specs.build import BuildSpec
from pipeline.synthetic.shapes import LLAMA_8B, TINY
from pipeline.synthetic.weights import HOOK, checkpoint_config, write_engine
from scripts.engine_run import Workload, free_memory, offline_throughput, prompts_for
from scripts.gpu_activity import gpu_sampler, rank0_trace, util_means
from scripts.model_shapes import write_tokenizer

log = logging.getLogger("bench_multi_gpu")
LLAMA_70B = {
    **LLAMA_8B,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
}
LLAMA_405B = {
    **LLAMA_8B,
    "hidden_size": 16384,
    "intermediate_size": 53248,
    "num_hidden_layers": 126,
    "num_attention_heads": 128,
    "num_key_value_heads": 8,
}
WORK = Workload(num_requests=512, input_len=128, output_len=128, max_batch_size=512)
WORK_70B = Workload(num_requests=512, input_len=128, output_len=128, max_batch_size=256)
TINY_WORK = Workload(num_requests=8, input_len=12, output_len=8, max_batch_size=4)
PROBE = {
    **LLAMA_8B,
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
}
PROBE_WORK = Workload(num_requests=64, input_len=32, output_len=32, max_batch_size=64)
# a probe's runtime options, in order: the runs take those of the first probe that finishes
PROBE_RUNTIMES = [{}, {"overlap_scheduling": False}, {"use_cuda_graph": False}]
# a run's own engine options, over the probe's runtime
RUN_OPTIONS = {"llama8b_bf16_tp2_nccl": {"all_reduce": "nccl"}}
# BENCH_TRACE_RUNS=name,...: rank 0's torch.profiler tables of those runs, to BENCH_TRACE_DIR
TRACED = set(filter(None, os.environ.get("BENCH_TRACE_RUNS", "").split(",")))
# group -> [(name, shape, dtype, quant, tp, pp, workload, time limit s on 2x H100)]
RUNS = {
    "probe": [
        ("probe_tp2", PROBE, "bfloat16", None, 2, 1, PROBE_WORK, 45),
        ("probe_pp2", PROBE, "bfloat16", None, 1, 2, PROBE_WORK, 45),
    ],
    "8b": [
        ("llama8b_bf16_tp1", LLAMA_8B, "bfloat16", None, 1, 1, WORK, 60),
        ("llama8b_bf16_tp2", LLAMA_8B, "bfloat16", None, 2, 1, WORK, 75),
        ("llama8b_bf16_tp2_nccl", LLAMA_8B, "bfloat16", None, 2, 1, WORK, 75),
        ("llama8b_bf16_pp2", LLAMA_8B, "bfloat16", None, 1, 2, WORK, 75),
    ],
    "70b": [("llama70b_fp8_tp2", LLAMA_70B, "bfloat16", "FP8", 2, 1, WORK_70B, 180)],
    # 4 GPUs: bf16 needs 4 (141 GB of weights); FP8 against its smallest mapping, TP=2
    "70b4": [
        ("llama70b_bf16_tp4", LLAMA_70B, "bfloat16", None, 4, 1, WORK_70B, 240),
        ("llama70b_fp8_tp2", LLAMA_70B, "bfloat16", "FP8", 2, 1, WORK_70B, 180),
        ("llama70b_fp8_tp4", LLAMA_70B, "bfloat16", "FP8", 4, 1, WORK_70B, 180),
    ],
    # 8 GPUs: 70B bf16 against TP=4; 405B FP8 (~405 GB) fits only at TP=8
    "tp8": [
        ("llama70b_bf16_tp4", LLAMA_70B, "bfloat16", None, 4, 1, WORK_70B, 240),
        ("llama70b_bf16_tp8", LLAMA_70B, "bfloat16", None, 8, 1, WORK_70B, 240),
        ("llama405b_fp8_tp8", LLAMA_405B, "bfloat16", "FP8", 8, 1, WORK_70B, 420),
    ],
}
RUNS["pp"] = [r for r in RUNS["8b"] if r[0] in ("llama8b_bf16_tp1", "llama8b_bf16_pp2")]
TINY_RUNS = {
    "probe": [("probe_tp2", TINY, "float32", None, 2, 1, TINY_WORK, 120)],
    "8b": [
        ("tiny_tp1", TINY, "float32", None, 1, 1, TINY_WORK, 30),
        ("tiny_tp2", TINY, "float32", None, 2, 1, TINY_WORK, 30),
        ("tiny_pp2", TINY, "float32", None, 1, 2, TINY_WORK, 30),
    ],
    "70b4": [
        ("tiny_tp2", TINY, "float32", None, 2, 1, TINY_WORK, 300),
        ("tiny_tp4", TINY, "float32", None, 4, 1, TINY_WORK, 300),
    ],
}
SMOLLM2_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village at the edge of a dark forest, there lived",
    "Water boils at a temperature of",
]


def build_limits(work: Workload) -> BuildSpec:
    return BuildSpec(
        max_batch_size=work.max_batch_size,
        max_input_len=work.input_len,
        max_seq_len=work.input_len + work.output_len,
        max_num_tokens=max(8192, work.input_len) if work.max_batch_size > 8 else 64,
        tokens_per_block=32 if work.max_batch_size > 8 else 8,
    )


def measure(
    engine: LLMEngine,
    vocab_size: int,
    work: Workload,
    device: torch.device,
    trace_dir: Path | None = None,
) -> dict:
    """Batch-1 decode tok/s (median of 3, the launch's first delta excluded) and the offline run
    of work.num_requests prompts."""
    params = SamplingParams(max_tokens=work.output_len, ignore_eos=True)
    engine.generate(prompts_for(vocab_size, work, 4, seed=1), params)  # warm-up
    rates, tokens = [], []
    for _ in range(3):
        out = engine.generate(prompts_for(vocab_size, work, 1), params)[0]
        tokens = out.token_ids
        first = min(engine.num_scheduler_steps, len(tokens))
        rates.append((len(tokens) - first) / (out.finish_time_s - out.first_token_time_s))
    result = {"decode_tok_s": statistics.median(rates), "greedy_tokens": tokens[:16]}
    prompts = prompts_for(vocab_size, work, work.num_requests, seed=2)
    if device.type == "cuda":
        torch.cuda.synchronize()
    sampler = gpu_sampler(device)
    with sampler or contextlib.nullcontext():
        result |= offline_throughput(engine, prompts, work, None)
    result["offline_gpu_util_pct"] = util_means(sampler)
    if trace_dir is not None:
        result["trace"] = rank0_trace(engine, vocab_size, work, trace_dir)
    stats = engine.stats()
    return result | {
        "num_scheduler_steps": stats["num_scheduler_steps"],
        "num_kv_blocks": stats["num_total_blocks"],
        "num_preemptions": stats["num_preemptions"],
    }


def run_engine(
    spec: tuple, tokenizer_dir: Path, work_dir: Path, device: torch.device, runtime: dict
) -> dict:
    name, shape, dtype, quant, tp, pp, work, _ = spec
    runtime = {**runtime, **RUN_OPTIONS.get(name, {})}
    cfg = checkpoint_config(shape, dtype, tp, pp, quant)
    variant = "-".join(f"{k}={v}" for k, v in sorted(runtime.items())) or "default"
    engine_dir = write_engine(
        cfg, build_limits(work), tokenizer_dir, work_dir / f"{name}-{variant}"
    )
    start = time.perf_counter()
    engine = LLMEngine.from_engine_dir(
        engine_dir, device=str(device), weights_loader=HOOK, **runtime
    )
    load_s = time.perf_counter() - start
    try:
        trace_root = Path(os.environ.get("BENCH_TRACE_DIR", work_dir))
        trace_dir = trace_root / f"trace-{name}" if name in TRACED else None
        result = measure(engine, shape["vocab_size"], work, device, trace_dir)
    finally:
        engine.close()
        del engine
        free_memory()
    return {
        "model": f"{shape['num_hidden_layers']}x{shape['hidden_size']} {quant or dtype}",
        "tp": tp,
        "pp": pp,
        "dtype": dtype,
        "quant": quant,
        "runtime": runtime,
        "load_s": load_s,
        **result,
    }


def run_isolated(args: argparse.Namespace, what: str, runtime: dict, limit_s: float) -> dict:
    """Run one engine (or the SmolLM2 check) in a process of its own, in a session of its own:
    past limit_s every process in it (the engine's worker ranks too) prints its Python stacks
    (SIGUSR1) and is killed, and the result says so."""
    result_path = Path(args.work_dir) / f"{what}.result.json"
    result_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "scripts.bench_multi_gpu", "--out", args.out, "--child", what]
    command += ["--runtime", json.dumps(runtime), "--work-dir", str(args.work_dir)]
    command += ["--smollm2-gguf", args.smollm2_gguf or ""] + (["--tiny"] if args.tiny else [])
    proc = subprocess.Popen(command, start_new_session=True)
    try:
        proc.wait(limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGUSR1)
        time.sleep(3)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return {"error": f"no result in {limit_s:.0f} s: killed (Python stacks in the log)"}
    if not result_path.is_file():
        return {"error": f"exited with code {proc.returncode} (see the log)"}
    return json.loads(result_path.read_text())


def child_main(args: argparse.Namespace) -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    device = torch.device("cpu" if args.tiny else "cuda")
    work_dir = Path(args.work_dir)
    runtime = json.loads(args.runtime)
    if args.child == "smollm2":
        dtype = "float32" if args.tiny else "bfloat16"
        result = run_smollm2(Path(args.smollm2_gguf), work_dir, device, dtype)
    else:
        runs = TINY_RUNS if args.tiny else RUNS
        spec = next(s for group in runs.values() for s in group if s[0] == args.child)
        tokenizer_dir = work_dir / "tokenizer"
        result = run_engine(spec, tokenizer_dir, work_dir, device, runtime)
    path = work_dir / f"{args.child}.result.json"
    path.write_text(json.dumps(result, default=str))
    logging.shutdown()
    os._exit(0)  # no interpreter teardown


def run_smollm2(gguf: Path, work_dir: Path, device: torch.device, dtype: str) -> dict:
    """Real weights: PP=1 and PP=2 engines of the same GGUF, greedy tokens of real prompts."""
    from pipeline.backends.torch_backend import build_engine_dir
    from pipeline.checkpoint.hf_to_trtllm import convert
    from pipeline.gguf_import import gguf_to_hf

    hf = work_dir / "smollm2_hf"
    gguf_to_hf(gguf, hf)
    build = BuildSpec(max_batch_size=8, max_input_len=64, max_seq_len=128, max_num_tokens=256)
    params = SamplingParams(max_tokens=48)
    outputs = {}
    for pp in (1, 2):
        ckpt, engine_dir = work_dir / f"smollm2_ckpt_pp{pp}", work_dir / f"smollm2_pp{pp}"
        ckpt.mkdir()
        engine_dir.mkdir()
        convert(hf, ckpt, dtype, 1, pp)
        build_engine_dir(build, ckpt, hf, engine_dir)
        engine = LLMEngine.from_engine_dir(engine_dir, device=str(device))
        try:
            outputs[pp] = [o.token_ids for o in engine.generate(SMOLLM2_PROMPTS, params)]
            text = engine.decode(outputs[pp][0])
        finally:
            engine.close()
            del engine
            free_memory()
    layers = json.loads((hf / "config.json").read_text())["num_hidden_layers"]
    return {
        "num_layers": layers,
        "dtype": dtype,
        "greedy_equal": outputs[1] == outputs[2],
        "tokens_pp1": outputs[1],
        "tokens_pp2": outputs[2],
        "first_text": text,
    }


def report(results: dict) -> str:
    """Each engine against the first one of its model (shape and quantization) in the run: TP=1
    where it ran, else the smallest mapping that fits."""
    lines = [
        "| run | tp | pp | decode tok/s (b=1) | x base | offline out tok/s | x base | load s |"
    ]
    lines.append("|---|---|---|---|---|---|---|---|")
    engines = results.get("engines", {})
    bases = {}
    for r in engines.values():
        if "error" not in r:
            bases.setdefault(r.get("model"), r)
    for name, r in engines.items():
        if "error" in r:
            lines.append(f"| {name} | | | error: {r['error'][:120]} | | | | |")
            continue
        base = bases[r.get("model")]
        ratio = lambda key, r=r, base=base: f"{r[key] / base[key]:.2f}" if r.get(key) else "-"  # noqa: E731
        lines.append(
            f"| {name} {r.get('runtime') or ''} | {r['tp']} | {r['pp']} | {r['decode_tok_s']:.1f} "
            f"| {ratio('decode_tok_s')} "
            f"| {r.get('throughput_out_tok_s') or 0:.0f} | {ratio('throughput_out_tok_s')} "
            f"| {r['load_s']:.0f} |"
        )
    if "smollm2" in results:
        lines.append(f"\nSmolLM2 PP=2 vs PP=1: {json.dumps(results['smollm2'])[:400]}")
    return "\n".join(lines) + "\n"


def write(results: dict, out: Path) -> None:
    (out / "bench_multi_gpu.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "bench_multi_gpu.md").write_text(report(results))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", default="probe,8b,smollm2,70b")
    parser.add_argument("--smollm2-gguf")
    parser.add_argument("--collectives", action="store_true")
    parser.add_argument("--budget-s", type=float, default=540)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument(
        "--runtimes",
        default=json.dumps(PROBE_RUNTIMES),
        help="JSON list of engine runtime options the probe tries, in order",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--runtime", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--work-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.child:
        return child_main(args)
    started = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.gettempdir()) / "bench_multi_gpu"  # the GPU host's disk, not OUT
    args.work_dir = str(out / "work" if args.tiny else scratch)
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    results = {"torch": torch.__version__, "engines": {}}
    if not args.tiny:
        results["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        results["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    runs = TINY_RUNS if args.tiny else RUNS
    write_tokenizer((TINY if args.tiny else LLAMA_8B)["vocab_size"], work_dir / "tokenizer")
    runtime = None  # the first probe runtime that works
    left = lambda: args.budget_s - (time.perf_counter() - started)  # noqa: E731
    for group in args.runs.split(","):
        if group == "smollm2" and args.smollm2_gguf:
            results["smollm2"] = run_isolated(args, "smollm2", {}, min(120, left()))
            write(results, out)
        for spec in runs.get(group, []):
            name, limit_s = spec[0], spec[-1]
            if runtime is None and group != "probe" and "probe" in args.runs.split(","):
                results["engines"][name] = {"error": "skipped: no probe runtime worked"}
                continue
            candidates = json.loads(args.runtimes) if runtime is None else [runtime]
            for option in candidates:
                if left() < limit_s:
                    results["engines"][name] = {"error": "skipped: over --budget-s"}
                    break
                log.info("run %s %s", name, option)
                result = run_isolated(args, name, option, limit_s)
                if "error" in result and len(candidates) > 1:  # keep each try's outcome
                    results["engines"][f"{name} {json.dumps(option)}"] = result
                results["engines"][name] = result
                write(results, out)
                if "error" not in result:
                    runtime = option
                    break
    if args.collectives and left() > 60:
        from scripts.bench_all_reduce import main as bench_all_reduce

        try:
            bench_all_reduce(["--out", str(out), *(["--tiny"] if args.tiny else [])])
            results["collectives"] = json.loads((out / "bench_all_reduce.json").read_text())
        except Exception as exc:  # noqa: BLE001 - the engine results stand
            log.exception("collectives failed")
            results["collectives"] = {"error": repr(exc)}
    results["wall_s"] = time.perf_counter() - started
    write(results, out)
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
