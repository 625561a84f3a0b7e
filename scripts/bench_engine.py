"""Benchmark the torch engine against HF transformers on one GPU, in one command.

    PYTHONPATH=. python scripts/bench_engine.py --out $OUT [--smollm-ckpt DIR] [--tiny]

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
"""

import argparse
import gc
import json
import logging
import math
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors import safe_open
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the pipeline package, when run without PYTHONPATH=.

from pipeline.backends.torch_backend import TorchBackend  # noqa: E402
from pipeline.checkpoint.trtllm_config import pretrained_config  # noqa: E402
from pipeline.engine import LLMEngine, SamplingParams  # noqa: E402
from pipeline.specs.build import BuildSpec  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, when imported by tests
from bench_gpu_checks import gpu_checks  # noqa: E402
from bench_hf_baselines import (  # noqa: E402
    bench_hf,
    hf_from_checkpoint,
    hf_to_trtllm,
    prompts_for,
    random_hf_model,
    sync,
)

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
    max_batch_size: int = 256  # engine build limit (CUDA graphs for 1, 2, 4, ... up to it)
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


def decode_bytes(ckpt_dir: Path, dtype: torch.dtype, work: Workload) -> dict:
    """Bytes one batch-1 decode step must read: every weight but the embedding table (one row
    is gathered), plus the KV cache at the mean context of the run."""
    cfg = json.loads((ckpt_dir / "config.json").read_text())
    with safe_open(ckpt_dir / "rank0.safetensors", "pt") as f:
        weight_bytes = sum(
            math.prod(f.get_slice(name).get_shape()) * dtype.itemsize
            for name in f.keys()
            if name != "transformer.vocab_embedding.weight"
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


def bench_engine(
    engine_dir: Path, device: torch.device, dtype: str, work: Workload, vocab_size: int
) -> dict:
    start = time.perf_counter()
    engine = LLMEngine.from_engine_dir(engine_dir, device=str(device), dtype=dtype)
    load_s = time.perf_counter() - start
    params = SamplingParams(max_tokens=work.output_len, ignore_eos=True)
    start = time.perf_counter()
    engine.generate(prompts_for(vocab_size, work, 4, seed=1), params)
    warmup_s = time.perf_counter() - start
    decode_tok_s, tokens = [], []
    for _ in range(3):
        out = engine.generate(prompts_for(vocab_size, work, 1), params)[0]
        tokens = out.token_ids
        decode_tok_s.append((len(tokens) - 1) / (out.finish_time_s - out.first_token_time_s))
    prompts = prompts_for(vocab_size, work, work.num_requests, seed=2)
    sync(device)
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    sync(device)
    wall_s = time.perf_counter() - start
    num_out = sum(len(o.token_ids) for o in outs)
    ttfts = sorted(o.first_token_time_s - o.arrival_time_s for o in outs)
    stats = engine.stats()
    del engine
    free_memory()
    return {
        "load_s": load_s,
        "warmup_s": warmup_s,
        "decode_tok_s": statistics.median(decode_tok_s),
        "greedy_tokens": tokens,
        "throughput_out_tok_s": num_out / wall_s,
        "throughput_total_tok_s": (num_out + len(prompts) * work.input_len) / wall_s,
        "throughput_wall_s": wall_s,
        "num_requests": len(prompts),
        "num_out_tokens": num_out,
        "ttft_p50_s": ttfts[len(ttfts) // 2],
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
    roof = decode_bytes(ckpt_dir, dtype, work)
    roofline_tok_s = bandwidth / roof["bytes_per_step"]
    pairs = list(zip(engine["greedy_tokens"], hf["greedy_tokens"], strict=False))
    agree = next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs))
    return {
        "dtype": dtype_name,
        **roof,
        "roofline_tok_s": roofline_tok_s,
        "engine": engine,
        "hf": hf,
        "greedy_prefix_agreement": agree,
        "engine_pct_roofline": 100 * engine["decode_tok_s"] / roofline_tok_s,
        "hf_pct_roofline": 100
        * max(hf["decode_tok_s"], hf.get("static_cache_decode_tok_s") or 0)
        / roofline_tok_s,
    }


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
                max_batch_size=512,
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
) -> dict:
    """HF baselines on the model, then (HF freed) the engine on the same weights."""
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
    del model  # the engine gets the GPU to itself
    free_memory()
    return bench_engine_side(name, ckpt, hf, vocab, work, device, dtype, scratch, bandwidth)


def run(args: argparse.Namespace, out_dir: Path) -> dict:
    deadline = time.perf_counter() + args.budget_s
    device = torch.device("cpu" if args.tiny else "cuda")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    plan = model_plan(args)
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
    with tempfile.TemporaryDirectory(prefix="bench_engine_") as tmp:
        for name, source, work in plan:
            start = time.perf_counter()
            results["models"][name] = run_model(
                name, source, work, device, dtype, Path(tmp), bandwidth, deadline
            )
            results["models"][name]["wall_s"] = time.perf_counter() - start
            write_results(results, out_dir)  # partial results survive a later failure
    return results


def write_results(results: dict, out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_engine.json").write_text(json.dumps(results, indent=2))
    table = markdown(results) + "\n\n" + checks_markdown(results["checks"])
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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    start = time.perf_counter()
    results = run(args, args.out)
    results["total_s"] = time.perf_counter() - start
    print(write_results(results, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
