"""Engine A/B in one GPU run: the same random-weight engines measured from two source trees.

    git worktree add /tmp/before <commit>
    PYTHONPATH=. python scripts/bench_ab.py --out $OUT --before-tree /tmp/before \
        [--models llama-3.1-8b-shape smollm2-135m-shape] [--quant int8_wo,int4_awq,fp8]

Each model's checkpoint and engine dir are written once (bench_engine.py's shapes and build);
every measurement then runs in a fresh process that imports `pipeline` from its tree (this one,
or --before-tree), so both see the same weights, engine limits and workload: batch-1 decode
tok/s (median of 3), then --num-requests prompts of 128 tokens x 128 new tokens all at t=0
(out tok/s, TTFT p50/p99, wall). --quant adds this tree's engine on each quantized format of
the first model's weights. Writes bench_ab.json + bench_ab.md after every measurement.
--tiny runs the same code on CPU with a tiny fp32 model (the unit test).
"""

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

MODELS = ("llama-3.1-8b-shape", "smollm2-135m-shape")


def measure(tree: str, engine_dir: str, device: str, dtype: str, n: int) -> dict:
    """Runs in the child process, with `tree` first on sys.path."""
    from pipeline.engine import LLMEngine, SamplingParams
    from pipeline.engine.layers.linear import kernel_counts

    engine = LLMEngine.from_engine_dir(engine_dir, device=device, dtype=dtype)
    vocab = engine.vocab_size
    prompts = torch.randint(0, vocab, (n, 128), generator=torch.Generator().manual_seed(2))
    params = SamplingParams(max_tokens=128, ignore_eos=True)
    engine.generate(prompts[:4].tolist(), params)  # warm-up
    decode = []
    for prompt in prompts[:3].tolist():
        out = engine.generate([prompt], params)[0]
        decode.append((len(out.token_ids) - 1) / (out.finish_time_s - out.first_token_time_s))
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None
    sync()
    start = time.perf_counter()
    outs = engine.generate(prompts.tolist(), params)
    sync()
    wall_s = time.perf_counter() - start
    ttfts = sorted(o.first_token_time_s - o.arrival_time_s for o in outs)
    return {
        "tree": tree,
        "decode_tok_s": statistics.median(decode),
        "out_tok_s": sum(len(o.token_ids) for o in outs) / wall_s,
        "ttft_p50_s": ttfts[len(ttfts) // 2],
        "ttft_p99_s": ttfts[int(len(ttfts) * 0.99)],
        "wall_s": wall_s,
        "max_batch_size": engine.max_batch_size,
        "kernels": kernel_counts(engine.model_runner.model),
    }


def run_child(tree: Path, engine_dir: Path, args: argparse.Namespace) -> dict:
    code = (
        f"import sys, json; sys.path[:0] = [{str(tree)!r}, {str(REPO / 'scripts')!r}]; "
        f"from bench_ab import measure; print('RESULT', json.dumps(measure("
        f"{str(tree)!r}, {str(engine_dir)!r}, {args.device!r}, {args.dtype!r}, "
        f"{args.num_requests})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(lines[0][7:]) if lines else {"error": proc.stderr[-2000:]}


def markdown(results: dict) -> str:
    rows = [
        "| model | run | batch-1 decode tok/s | out tok/s | TTFT p50 / p99 s | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for key, r in results["runs"].items():
        if "error" in r:
            rows.append(f"| {key.replace('/', ' | ')} | error | | | |")
            continue
        rows.append(
            f"| {key.replace('/', ' | ')} | {r['decode_tok_s']:.0f} | {r['out_tok_s']:,.0f} | "
            f"{r['ttft_p50_s']:.2f} / {r['ttft_p99_s']:.2f} | {r['wall_s']:.1f} |"
        )
    return "\n".join(rows)


def write(results: dict, out: Path) -> None:
    (out / "bench_ab.json").write_text(json.dumps(results, indent=2))
    (out / "bench_ab.md").write_text(markdown(results) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--before-tree", type=Path, help="a checkout of the baseline commit")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--quant", default="", help="formats for the first model, e.g. int8_wo")
    parser.add_argument("--num-requests", type=int, default=512)
    parser.add_argument("--max-batch-size", type=int, default=512)
    parser.add_argument("--tiny", action="store_true", help="CPU, tiny model: tests the script")
    args = parser.parse_args(argv)
    # here, not at the top: bench_engine puts this tree first on sys.path, and the children
    # import `measure` from this file with their own tree first
    from bench_engine import (
        LLAMA_8B,
        SMOLLM2,
        TINY,
        Workload,
        build_engine,
        write_checkpoint,
        write_tokenizer,
    )
    from bench_hf_baselines import hf_to_trtllm, random_hf_model
    from bench_quant import activation_amax, write_quantized_checkpoint

    args.device, args.dtype = ("cpu", "float32") if args.tiny else ("cuda", "bfloat16")
    shapes = {"tiny": TINY} if args.tiny else {MODELS[0]: LLAMA_8B, MODELS[1]: SMOLLM2}
    names = ["tiny"] if args.tiny else args.models
    work = Workload(max_batch_size=args.max_batch_size)
    trees = {"after": REPO, **({"before": args.before_tree} if args.before_tree else {})}
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"device": args.device, "num_requests": args.num_requests, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="bench_ab_") as tmp:
        tmp = Path(tmp)
        for i, name in enumerate(names):
            shape, dtype = shapes[name], getattr(torch, args.dtype)
            model = random_hf_model(shape, dtype, torch.device(args.device))
            ckpt = write_checkpoint(hf_to_trtllm(model), shape, args.dtype, tmp / f"{name}-ckpt")
            tokenizer = write_tokenizer(shape["vocab_size"], tmp / f"{name}-tokenizer")
            prompts = torch.randint(0, shape["vocab_size"], (4, 128)).tolist()
            amax = activation_amax(model, prompts) if args.quant and i == 0 else {}
            del model
            engines = {"bf16": build_engine(ckpt, tokenizer, tmp / f"{name}-engine", work)}
            for fmt in args.quant.split(",") if args.quant and i == 0 else []:
                qckpt = write_quantized_checkpoint(
                    ckpt, fmt, amax, tmp / f"{name}-{fmt}-ckpt", torch.device(args.device)
                )
                engines[fmt] = build_engine(qckpt, tokenizer, tmp / f"{name}-{fmt}-engine", work)
                shutil.rmtree(qckpt)
            for fmt, engine_dir in engines.items():
                for label, tree in trees.items() if fmt == "bf16" else [("after", REPO)]:
                    key = f"{name}/{label} {fmt}"
                    results["runs"][key] = run_child(tree, engine_dir, args)
                    print(key, json.dumps(results["runs"][key])[:300], flush=True)
                    write(results, args.out)
                shutil.rmtree(engine_dir)
            shutil.rmtree(ckpt)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
