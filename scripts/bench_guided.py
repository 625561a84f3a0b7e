"""Guided decoding's cost: JSON-schema requests against free ones on the same engine, one run.

    python -m scripts.bench_guided --out DIR [--models smollm2-135m-shape llama-3.1-8b-shape]
        [--batches 1 64 512] [--repeats 3] [--tiny]

Each model shape gets random bf16 weights and a byte-level tokenizer of its vocabulary size
(scripts.byte_tokenizer: no tokenizer files needed); its engine is built once. Then for each
batch size, that many prompts of --input-len random tokens all at t=0, --output-len new tokens
each: free, then under a JSON schema (an array of objects with an integer, a string and an enum
array, at least --output-len items, so no request ends before the free ones do), out tok/s and
the ratio guided / free (goal: >= 0.9 at batch 64). Both run the engine's auto steps a launch
(a guided row's bitmask is filled step by step behind the forward). Each batch size is warmed
up, guided and free, before it is timed; then free and guided run --repeats times, alternating,
and the median run of each side is reported with every pair's ratio. Writes
bench_guided.json and bench_guided.md. --tiny runs it on CPU with a tiny fp32 model.
Needs xgrammar (pip install xgrammar==0.2.8) beside torch and transformers.
"""

import argparse
import json
import shutil
import time
from dataclasses import replace
from operator import itemgetter
from pathlib import Path

import torch

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.core.heap import frozen
from pipeline.request.guided import json_schema_guide
from pipeline.synthetic.shapes import LLAMA_8B, SMOLLM2, TINY
from scripts.byte_tokenizer import write_byte_tokenizer
from scripts.engine_run import Workload, free_memory, median_run, prompts_for, sync
from scripts.model_shapes import build_engine, random_hf_model, write_checkpoint

MODELS = {"smollm2-135m-shape": SMOLLM2, "llama-3.1-8b-shape": LLAMA_8B}
GOAL_BATCH, GOAL_RATIO = 64, 0.9


def bench_schema(min_items: int) -> dict:
    item = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}},
        },
        "required": ["id", "name", "tags"],
    }
    return {
        "type": "object",
        "properties": {"items": {"type": "array", "items": item, "minItems": min_items}},
        "required": ["items"],
    }


def offline(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams) -> dict:
    """Every prompt at t=0, stepped to the end: out tok/s over the wall time."""
    sync(engine.model_runner.device)
    start = time.perf_counter()
    ids = {engine.add_request(p, params) for p in prompts}
    num_out, reasons = 0, {}
    while engine.has_unfinished():
        for delta in engine.step():
            if delta.request_id in ids:
                num_out += len(delta.token_ids)
                if delta.finished:
                    reasons[delta.finish_reason] = reasons.get(delta.finish_reason, 0) + 1
    wall_s = time.perf_counter() - start
    return {"out_tok_s": num_out / wall_s, "num_out_tokens": num_out, "wall_s": wall_s} | {
        "finish_reasons": reasons
    }


def measure(
    engine: LLMEngine, vocab: int, work: Workload, batches: list[int], repeats: int
) -> dict:
    free = SamplingParams(max_tokens=work.output_len, ignore_eos=True)
    guide = json_schema_guide(bench_schema(work.output_len))
    guided = replace(free, guide=guide)
    start = time.perf_counter()
    engine.validate_request([1], guided)  # compiles the schema (what a first request pays)
    compile_ms = (time.perf_counter() - start) * 1e3
    rows = {}
    for batch in batches:
        # each batch size warms up first: Triton specializes the bitmask kernel on its row
        # count (1, and multiples of 16, compile a variant of their own: ~0.3 s on the clock)
        warm = prompts_for(vocab, work, batch, seed=batch + 1)
        engine.generate(warm, replace(free, max_tokens=4))
        engine.generate(warm, replace(guided, max_tokens=4))
        prompts = prompts_for(vocab, work, batch, seed=batch)
        # free and guided alternate, so a slow spell of the host falls on both; a batch of 64
        # on the small shape is a fifth of a second, and single runs of it scattered +-20%
        runs = [
            (offline(engine, prompts, free), offline(engine, prompts, guided))
            for _ in range(repeats)
        ]
        off = median_run([f for f, _ in runs], key=itemgetter("out_tok_s"))
        on = median_run([g for _, g in runs], key=itemgetter("out_tok_s"))
        rows[str(batch)] = {
            "free": off,
            "guided": on,
            "ratio": on["out_tok_s"] / off["out_tok_s"],
            "ratios_each_run": [g["out_tok_s"] / f["out_tok_s"] for f, g in runs],
        }
    return {"schema_compile_ms": compile_ms, "repeats": repeats, "batches": rows}


def markdown(results: dict) -> str:
    lines = [
        f"Guided (JSON schema) vs free, out tok/s; goal >= {GOAL_RATIO} at batch {GOAL_BATCH}. "
        f"Device: {results['device']}.",
        "",
        "| model | batch | free out tok/s | guided out tok/s | guided / free | each pair |",
        "|---|---|---|---|---|---|",
    ]
    for name, model in results["models"].items():
        for batch, row in model["batches"].items():
            lines.append(
                f"| {name} | {batch} | {row['free']['out_tok_s']:,.0f} | "
                f"{row['guided']['out_tok_s']:,.0f} | {row['ratio']:.2f} | "
                f"{' / '.join(f'{r:.2f}' for r in row['ratios_each_run'])} |"
            )
    compile_ms = ", ".join(
        f"{name} {m['schema_compile_ms']:.0f} ms" for name, m in results["models"].items()
    )
    return "\n".join([*lines, "", f"Schema compile (first request): {compile_ms}."])


def write(results: dict, out: Path) -> None:
    (out / "bench_guided.json").write_text(json.dumps(results, indent=2))
    (out / "bench_guided.md").write_text(markdown(results) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 64, 512])
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="free / guided pairs a batch")
    parser.add_argument("--tiny", action="store_true", help="CPU, tiny model: tests the script")
    args = parser.parse_args(argv)
    device, dtype = ("cpu", "float32") if args.tiny else ("cuda", "bfloat16")
    shapes = {"tiny": TINY} if args.tiny else {name: MODELS[name] for name in args.models}
    batches = [1, 4] if args.tiny else args.batches
    output_len = 8 if args.tiny else args.output_len
    work = Workload(
        input_len=24 if args.tiny else args.input_len,  # the probe prompt: 24 byte tokens
        output_len=output_len,
        max_batch_size=max(batches),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
    results |= {"workload": {"input_len": work.input_len, "output_len": output_len}, "models": {}}
    scratch = args.out / "scratch"
    for name, shape in shapes.items():
        work_dir = scratch / name
        shutil.rmtree(work_dir, ignore_errors=True)
        model = random_hf_model(shape, getattr(torch, dtype), torch.device(device))
        ckpt = write_checkpoint(model, dtype, work_dir / "ckpt")
        del model
        free_memory()
        vocab = shape["vocab_size"]
        tokenizer = write_byte_tokenizer(vocab, work_dir / "tokenizer")
        engine_dir = build_engine(ckpt, tokenizer, work_dir / "engine", work)
        engine = LLMEngine.from_engine_dir(engine_dir, device=device, dtype=dtype)
        # as the served engine process: a full collection over the whole load is a pause of
        # tens of ms, in whichever run (free or guided) it lands
        try:
            with frozen():  # random prompts avoid the end token (the vocabulary's last)
                results["models"][name] = measure(engine, vocab - 1, work, batches, args.repeats)
        finally:
            engine.close()
        del engine
        free_memory()
        shutil.rmtree(work_dir, ignore_errors=True)
        write(results, args.out)
    shutil.rmtree(scratch, ignore_errors=True)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
