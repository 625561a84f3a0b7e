"""Benchmark the torch engine against HF transformers on one GPU, in one command.

    PYTHONPATH=. python scripts/bench_engine.py --out $OUT [--smollm-ckpt DIR] [--tiny]
        [--quant int8_wo,int4_wo,int4_awq,fp8 [--quant-models NAMES] [--quant-decode-only]]

Models: a Llama-3.1-8B-shaped model with random bf16 weights (the same weights serve HF and,
through a TensorRT-LLM checkpoint and the torch backend's build, the engine), then SmolLM2 in
bf16: its converted checkpoint with --smollm-ckpt, else its shape with random weights (speed
does not depend on the values; EOS is ignored). First, correctness self-checks of the GPU paths
(bench_gpu_checks.py). Measured in this one run: copy bandwidth, batch-1 decode tok/s and its %
of the HBM roofline, offline throughput (all requests at t=0), HF `generate` (eager, and static
cache = compiled) and HF continuous batching (`generate_batch`); optional HF baselines are
skipped when they would overrun --budget-s. Writes bench_engine.json + bench_engine.md to --out
(after each model, so a later failure keeps earlier results). --tiny runs the same code on CPU
with a tiny model (the unit test). Needs torch + transformers, not hydra/modelopt.

--quant: then the engine alone on each quantized format of the same weights (bench_quant.py),
relative to the BF16 engine of this run; optional HF baselines leave time for it.
"""

import argparse
import gc
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the pipeline package, when run without PYTHONPATH=.

from pipeline.backends.torch_backend import TorchBackend  # noqa: E402
from pipeline.checkpoint.trtllm_config import pretrained_config  # noqa: E402
from pipeline.engine import LLMEngine, SamplingParams  # noqa: E402
from pipeline.engine.layers.linear import kernel_counts  # noqa: E402
from pipeline.specs.build import BuildSpec  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, when imported by tests
from bench_hf_baselines import (  # noqa: E402
    bench_hf,
    hf_from_checkpoint,
    hf_to_trtllm,
    prompts_for,
    random_hf_model,
    sync,
)
from bench_quant import (  # noqa: E402
    QuantPlan,
    activation_amax,
    add_quant_args,
    quant_plan,
    write_quantized_checkpoint,
)
from bench_report import decode_bytes, prefix_agreement, tables, vs_bf16  # noqa: E402

log = logging.getLogger("bench_engine")

LLAMA_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "max_position_embeddings": 131072,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "tie_word_embeddings": False,
}
SMOLLM2 = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "vocab_size": 49152,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": True,
}
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}


@dataclass(frozen=True)
class Workload:
    num_requests: int = 512
    input_len: int = 128
    output_len: int = 128
    # engine build limit (CUDA graphs for 1, 2, 4, ... up to it): every request in flight at
    # once, as trtllm-bench sizes it; 256 left half the requests queued behind the first half
    max_batch_size: int = 512
    hf_batch: int = 64  # HF static batching: requests per generate() call
    hf_num_batches: int = 2  # HF static batching: calls measured (a sample of the workload)
    hf_cb_requests: int = 256  # HF generate_batch: requests
    hf_static_cache: bool = True  # also time HF generate with a static (compiled) cache
    hf_cb_warmup: bool = True  # generate_batch's own warm-up (CUDA graph capture)
    hf_reserve_s: float = 240  # run-time left for what follows an optional HF baseline
    copy_bytes: int = 2 << 30


TINY_WORKLOAD = Workload(
    num_requests=6,
    input_len=12,
    output_len=6,
    max_batch_size=4,
    hf_batch=3,
    hf_num_batches=1,
    hf_static_cache=False,
    hf_cb_warmup=False,
    hf_cb_requests=0,
    copy_bytes=8 << 20,
)  # CPU generate_batch: ~20 s


def free_memory() -> None:
    torch._dynamo.reset()  # compiled HF graphs (and their CUDA graph pools) hold the weights
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


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


def write_tokenizer(vocab_size: int, out_dir: Path) -> Path:
    """A word-level tokenizer over the whole vocab: the bench feeds token ids, the engine dir
    needs a tokenizer to load."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(out_dir)
    return out_dir


def write_checkpoint(tensors: dict, hf_config: dict, dtype: str, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, out_dir / "rank0.safetensors", metadata={"format": "pt"})
    cfg = pretrained_config({"architectures": ["LlamaForCausalLM"], **hf_config}, dtype, 1, 1)
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    return out_dir


def build_engine(ckpt_dir: Path, tokenizer_dir: Path, out_dir: Path, work: Workload) -> Path:
    """The torch backend's build, exactly as `python -m pipeline build backend=torch` runs it."""
    build = BuildSpec(
        max_batch_size=work.max_batch_size,
        max_input_len=work.input_len,
        max_seq_len=work.input_len + work.output_len,
        max_num_tokens=max(8192, work.input_len),
        tokens_per_block=32,
    )
    spec = SimpleNamespace(build=build, deploy=None, backend=SimpleNamespace(device="auto"))
    out_dir.mkdir(parents=True)
    TorchBackend(spec).build(ckpt_dir, tokenizer_dir, out_dir)
    return out_dir


def offline_throughput(
    engine: LLMEngine, prompts: list[list[int]], work: Workload, cap_s: float | None
) -> dict:
    """All prompts at t=0, stepped to the end (generate()'s loop); past cap_s the rest is
    aborted and no rate reported, as a partial run is not the workload."""
    params = SamplingParams(max_tokens=work.output_len, ignore_eos=True)
    start = time.perf_counter()
    ids = [engine.add_request(p, params) for p in prompts]
    ttfts, num_out, is_capped = {}, 0, False
    while engine.has_unfinished():
        if cap_s is not None and not is_capped and time.perf_counter() - start > cap_s:
            is_capped = True
            for request_id in ids:
                engine.abort(request_id)  # False for the finished ones: nothing to do
        for delta in engine.step():
            num_out += len(delta.token_ids)
            if delta.token_ids:
                ttfts.setdefault(delta.request_id, time.perf_counter() - start)
    wall_s = time.perf_counter() - start
    if is_capped:
        return {
            "throughput_out_tok_s": None,
            "throughput_error": f"stopped at the {cap_s:.0f} s cap: {num_out} of "
            f"{len(prompts) * work.output_len} tokens ({num_out / wall_s:.0f} tok/s so far)",
        }
    ttft_list = sorted(ttfts.values())
    return {
        "throughput_out_tok_s": num_out / wall_s,
        "throughput_total_tok_s": (num_out + len(prompts) * work.input_len) / wall_s,
        "throughput_wall_s": wall_s,
        "num_requests": len(prompts),
        "num_out_tokens": num_out,
        "ttft_p50_s": ttft_list[len(ttft_list) // 2],
        "ttft_p99_s": ttft_list[int(len(ttft_list) * 0.99)],
    }


def bench_engine(
    engine_dir: Path,
    device: torch.device,
    dtype: str,
    work: Workload,
    vocab_size: int,
    throughput: bool = True,
    throughput_cap_s: float | None = None,
    runtime: dict | None = None,
) -> dict:
    start = time.perf_counter()
    engine = LLMEngine.from_engine_dir(engine_dir, device=str(device), dtype=dtype, **runtime or {})
    load_s = time.perf_counter() - start
    params = SamplingParams(max_tokens=work.output_len, ignore_eos=True)
    start = time.perf_counter()
    engine.generate(prompts_for(vocab_size, work, 4, seed=1), params)
    warmup_s = time.perf_counter() - start
    decode_tok_s, tokens = [], []
    for _ in range(3):
        out = engine.generate(prompts_for(vocab_size, work, 1), params)[0]
        tokens = out.token_ids
        # the first token's time is that of the launch's first delta, which carries one token
        # for each step of a launch (num_scheduler_steps)
        first = min(engine.num_scheduler_steps, len(tokens))
        decode_tok_s.append((len(tokens) - first) / (out.finish_time_s - out.first_token_time_s))
    result = {
        "load_s": load_s,
        "warmup_s": warmup_s,
        "decode_tok_s": statistics.median(decode_tok_s),
        "num_scheduler_steps": engine.num_scheduler_steps,
        "greedy_tokens": tokens,
        "kernels": kernel_counts(engine.model_runner.model),
    }
    if throughput:
        prompts = prompts_for(vocab_size, work, work.num_requests, seed=2)
        sync(device)  # each step syncs on its sampled tokens, so the last one ends the run
        result |= offline_throughput(engine, prompts, work, throughput_cap_s)
    stats = engine.stats()
    del engine
    free_memory()
    return result | {
        "num_kv_blocks": stats["num_total_blocks"],
        "num_preemptions": stats["num_preemptions"],
        "cuda_graph_batch_sizes": stats["cuda_graph_batch_sizes"],
    }


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
    engine = bench_engine(engine_dir, device, dtype_name, work, vocab_size)
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
        run = bench_engine(engine_dir, device, dtype_name, work, vocab, throughput, cap_s)
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
        ckpt = write_checkpoint(hf_to_trtllm(model), source, dtype_name, scratch / f"{name}-ckpt")
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
    # imported here: bench_ab.py imports this module against an older tree's `pipeline` package,
    # which these checks of the current one need not match
    from bench_gpu_checks import gpu_checks

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
    sys.exit(main())
