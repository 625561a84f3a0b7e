"""Engine A/B in one GPU run: the same random-weight engines measured from two source trees.

    git worktree add /tmp/before <commit>
    python -m scripts.bench_ab --out $OUT --before-tree /tmp/before \
        [--models llama-3.1-8b-shape smollm2-135m-shape] [--quant int8_wo,int4_awq,fp8]

Each model's checkpoint and engine dir are written once (scripts.model_shapes); every
measurement then runs this tree's scripts/engine_run.py measure_engine in a fresh process that
imports `pipeline` from its tree (this one, or --before-tree), so both see the same weights, engine
limits and workload: batch-1 decode tok/s (median of 3), then --num-requests prompts of 128
tokens x 128 new tokens all at t=0 (out tok/s, TTFT p50/p99, wall). --quant adds each run on
each quantized format of the first model's weights. Writes bench_ab.json + bench_ab.md after every
measurement. --tiny runs the same code on CPU with a tiny fp32 model (the unit test).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import torch

from pipeline.synthetic.shapes import LLAMA_8B, SMOLLM2, TINY
from scripts.engine_run import TINY_WORKLOAD, Workload, prompts_for
from scripts.model_shapes import (
    build_engine,
    random_hf_model,
    write_checkpoint,
    write_tokenizer,
)
from scripts.quant_checkpoints import activation_amax, write_quantized_checkpoint

REPO = Path(__file__).resolve().parent.parent
MODELS = ("llama-3.1-8b-shape", "smollm2-135m-shape")

MEASURE = Path(__file__).resolve().with_name("engine_run.py")

# `pipeline` from the tree (first on PYTHONPATH), the measurement code from this one, loaded from
# its file under a name of its own: an older tree's own scripts package (with its engine_run)
# must not stand in for it, and a newer tree measures the same way
CHILD = """
import importlib.util, json, sys
from pathlib import Path
import torch
measure, result_path, engine_dir, device, dtype, work, vocab, runtime = sys.argv[1:]
spec = importlib.util.spec_from_file_location("bench_ab_engine_run", measure)
engine_run = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = engine_run  # its dataclasses look their module up
spec.loader.exec_module(engine_run)
work = engine_run.Workload(**json.loads(work))
result = engine_run.measure_engine(
    Path(engine_dir), torch.device(device), dtype, work, int(vocab), runtime=json.loads(runtime)
)
Path(result_path).write_text(json.dumps(result))
"""


def run_child(
    tree: Path, engine_dir: Path, args: argparse.Namespace, work, vocab: int, runtime: dict
) -> dict:
    """measure_engine in a fresh process that imports `pipeline` from `tree`; its result comes
    back in a JSON file (what it prints is only its log)."""
    with tempfile.TemporaryDirectory(prefix="bench_ab_child_") as tmp:
        result_path = Path(tmp) / "result.json"
        argv = [str(MEASURE), str(result_path), str(engine_dir), args.device, args.dtype]
        argv += [json.dumps(asdict(work)), str(vocab), json.dumps(runtime)]
        paths = [str(Path(tree).resolve()), os.environ.get("PYTHONPATH", "")]
        env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, paths))}
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, env=env, cwd=tree
        )
        if proc.returncode == 0 and result_path.is_file():
            result = json.loads(result_path.read_text())
        else:
            result = {"error": f"exited with code {proc.returncode}: {proc.stderr[-2000:]}"}
    # relative to this tree: results are committed, and machine paths mean nothing elsewhere
    return {"tree": os.path.relpath(tree, REPO), **result}


def runtime_options(text: str) -> dict:
    """'num_scheduler_steps=4,max_batch_size=64' -> {name: int}."""
    try:
        return {k.strip(): int(v) for k, v in (item.split("=") for item in text.split(","))}
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use KEY=INT[,KEY=INT...]") from None


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
            f"| {key.replace('/', ' | ')} | {r['decode_tok_s']:.0f} | "
            f"{r['throughput_out_tok_s']:,.0f} | {r['ttft_p50_s']:.2f} / {r['ttft_p99_s']:.2f} | "
            f"{r['throughput_wall_s']:.1f} |"
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
    parser.add_argument("--max-batch-size", type=int, help="default: the workload's (512)")
    parser.add_argument("--input-len", type=int, help="prompt tokens (default: the workload's 128)")
    parser.add_argument("--output-len", type=int, help="new tokens (default: the workload's 128)")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        type=runtime_options,
        help="one more run of this tree with engine runtime options, e.g. num_scheduler_steps=4"
        " (repeatable; KEY=INT[,KEY=INT])",
    )
    parser.add_argument("--tiny", action="store_true", help="CPU, tiny model: tests the script")
    args = parser.parse_args(argv)
    args.device, args.dtype = ("cpu", "float32") if args.tiny else ("cuda", "bfloat16")
    shapes = {"tiny": TINY} if args.tiny else {MODELS[0]: LLAMA_8B, MODELS[1]: SMOLLM2}
    names = ["tiny"] if args.tiny else args.models
    work = replace(
        TINY_WORKLOAD if args.tiny else Workload(),
        num_requests=args.num_requests,
        **{
            key: getattr(args, key)
            for key in ("max_batch_size", "input_len", "output_len")
            if getattr(args, key)
        },
    )
    # label -> (tree, engine runtime options)
    runs = {"after": (REPO, {}), **({"before": (args.before_tree, {})} if args.before_tree else {})}
    for options in args.variant:
        runs["after " + ",".join(f"{k}={v}" for k, v in options.items())] = (REPO, options)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"device": args.device, "num_requests": args.num_requests, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="bench_ab_") as tmp:
        tmp = Path(tmp)
        for i, name in enumerate(names):
            shape, dtype = shapes[name], getattr(torch, args.dtype)
            model = random_hf_model(shape, dtype, torch.device(args.device))
            ckpt = write_checkpoint(model, args.dtype, tmp / f"{name}-ckpt")
            tokenizer = write_tokenizer(shape["vocab_size"], tmp / f"{name}-tokenizer")
            prompts = prompts_for(shape["vocab_size"], work, 4, seed=3)
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
                for label, (tree, runtime) in runs.items():
                    key = f"{name}/{label} {fmt}"
                    run = run_child(tree, engine_dir, args, work, shape["vocab_size"], runtime)
                    results["runs"][key] = run
                    print(key, json.dumps(results["runs"][key])[:300], flush=True)
                    write(results, args.out)
                shutil.rmtree(engine_dir)
            shutil.rmtree(ckpt)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
