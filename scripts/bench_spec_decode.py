"""Speculative decoding on one GPU, on and off in one run.

    python -m scripts.bench_spec_decode --out $OUT [--tiny] [--gguf FILE] [--no-8b]

Models: the Llama-3.1-8B and SmolLM2-135M shapes with random bf16 weights (--tiny: a tiny fp32
model on the CPU, the unit test). With random weights a draft is almost never accepted, so
acceptance itself is measured on real weights by the CPU tests; here, per model:
- verify steps: the time of one batch-1 step over 1 + k query tokens (k = 1..8 drafts, all
  rejected) against a 1-token step of the same engine (both read their tokens before the next
  step), and against a token of the engine without speculation (overlap scheduling, several
  steps a launch); the projected speedup at each --acceptance rate a is
  E(a, k) x (off ms per token) / (verify ms), E = (1 - a**(k + 1)) / (1 - a) tokens a step
  (a projection: real acceptance depends on the model pair and the workload);
- batch-1 decode of a copy-heavy prompt (a random passage given twice) with prompt lookup on,
  against off: with random weights its drafts fail, which shows what the adaptive mode leaves
  of the overhead;
- offline throughput at batch 64 and 512, speculation on (its defaults) and off: while the
  engine holds more than spec.max_batch_size (32) requests, running or waiting, no request
  drafts, and steps keep overlap scheduling and several steps a launch, so on should equal off
  (--tiny: batches 4 and 8 over a limit of 2); the median of --batch-repeats runs, and that
  run's steps, launches, verify steps, rows and drafts, the pacer's steps a launch when it began
  and the host's ms a launch, on and off.
With --gguf (SmolLM2-135M-Instruct's GGUF; needs the gguf package) SmolLM2 is measured on its
real weights instead of its shape (scripts/spec_real_weights.py): the same three parts, then
batch-1 greedy decode of real English prompts in the chat template, speculation off against
each setting, with its acceptance rate and mean accepted drafts a verify step:
- prompt lookup on a copy task (repeat a passage of a novel), k in --lookup-k, fixed and
  adaptive;
- draft models cut from the target (its first N blocks, final norm and head; N in
  --draft-layers) on ordinary chat prompts, k in --draft-k, fixed and adaptive.
A --gguf that does not exist is skipped with a message (the SmolLM2 shape runs instead).
--tiny --gguf runs that path on the CPU in fp32 with a few tokens.
Writes bench_spec_decode.json + bench_spec_decode.md into --out. Needs torch + transformers.
"""

import argparse
import importlib.util
import json
import logging
import shutil
import tempfile
import time
from dataclasses import replace
from operator import itemgetter
from pathlib import Path

import torch

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.core.engine_times import ms_per_launch
from pipeline.synthetic.shapes import LLAMA_8B, SMOLLM2, TINY
from scripts.engine_run import (
    Workload,
    free_memory,
    median_run,
    offline_throughput,
    prompts_for,
    sync,
)
from scripts.model_shapes import build_engine, random_hf_model, write_checkpoint, write_tokenizer
from scripts.spec_real_weights import (
    batch1_markdown,
    batch1_table,
    best,
    real_engines,
    settings_of,
)

log = logging.getLogger("bench_spec_decode")
MAX_DRAFTS = 8
STEP_WORK = Workload(num_requests=1, input_len=128, output_len=512, max_batch_size=512)
TINY_STEP_WORK = Workload(num_requests=1, input_len=12, output_len=160, max_batch_size=8)
TINY_REAL_WORK = Workload(num_requests=1, input_len=12, output_len=16, max_batch_size=8)
REAL_INPUT_LEN = 512  # the real-weights engines' prompt limit: a chat-templated passage fits
REAL_KV_BLOCKS = 128  # batch-1 engines: a request's blocks, not most of the GPU per engine
COUNTED = (  # engine stats() summed over a run: its counts are the difference
    "num_steps",
    "num_launches",
    "spec_num_verify_steps",
    "spec_num_verify_rows",
    "spec_num_drafted_tokens",
)


class FixedDrafts:
    """A proposer that always drafts `num` tokens (seeded random ids): the verify step's cost
    at every k, whatever the weights predict."""

    def __init__(self, num: int, vocab_size: int):
        self.num, self.vocab_size = num, vocab_size
        self.generator = torch.Generator().manual_seed(0)

    def propose(self, seqs, num_drafts: list[int]) -> list[list[int]]:
        return [
            torch.randint(
                0, self.vocab_size, (min(self.num, k),), generator=self.generator
            ).tolist()
            for k in num_drafts
        ]

    def drop(self, seq) -> None:
        """Nothing kept per request."""

    def close(self) -> None:
        """Nothing to release."""


def step_ms(engine: LLMEngine, prompt: list[int], num_steps: int, max_tokens: int) -> float:
    """Mean ms of an engine step() of one request decoding (after its prompt and 3 steps)."""
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    request_id = engine.add_request(prompt, params)
    for _ in range(4):
        engine.step()
    sync(engine.model_runner.device)
    start = time.perf_counter()
    for _ in range(num_steps):
        engine.step()
    elapsed = time.perf_counter() - start
    engine.abort(request_id)
    while engine.has_unfinished():
        engine.step()
    return 1e3 * elapsed / num_steps


def decode_tok_s(engine: LLMEngine, prompt: list[int], max_tokens: int) -> float:
    """Batch-1 decode tokens/s after the first token (median of 3)."""
    rates = []
    for _ in range(3):
        out = engine.generate([prompt], SamplingParams(max_tokens=max_tokens, ignore_eos=True))[0]
        first = min(engine.num_scheduler_steps, len(out.token_ids))
        rates.append((len(out.token_ids) - first) / (out.finish_time_s - out.first_token_time_s))
    return sorted(rates)[1]


def verify_steps(engine_dir: Path, args, vocab: int, work: Workload) -> dict:
    """Batch-1 step ms over 1 + k tokens (k = 0..MAX_DRAFTS), every step read at once."""
    engine = LLMEngine.from_engine_dir(
        engine_dir,
        device=args.device,
        dtype=args.dtype,
        overlap_scheduling=False,
        num_scheduler_steps=1,
        speculation={
            "method": "prompt_lookup",
            "num_draft_tokens": MAX_DRAFTS,
            "adaptive": False,
            "max_batch_size": 0,
        },
    )
    prompt = prompts_for(vocab, work, 1)[0]
    ms = {}
    for k in range(MAX_DRAFTS + 1):
        engine.speculator.proposer = FixedDrafts(k, vocab)
        ms[k] = step_ms(engine, prompt, args.num_steps, work.output_len)
        log.info("verify step, %d drafts: %.3f ms", k, ms[k])
    del engine
    free_memory()
    return ms


def copy_prompt(vocab: int, work: Workload) -> list[int]:
    """A random passage, then the passage again up to its middle: a copy task's prompt."""
    passage = prompts_for(vocab, replace(work, input_len=work.input_len // 2), 1, seed=3)[0]
    return passage + passage[: len(passage) // 2]


def on_off(engine_dir: Path, args, vocab: int, work: Workload, batches: tuple[int, ...]) -> dict:
    """Batch-1 copy-task decode and offline throughput at each batch, speculation on and off."""
    out = {}
    on = {"method": "prompt_lookup", "max_batch_size": args.spec_max_batch_size}
    for name, speculation in (("off", None), ("on", on)):
        engine = LLMEngine.from_engine_dir(
            engine_dir, device=args.device, dtype=args.dtype, speculation=speculation
        )
        engine.generate(prompts_for(vocab, work, 4, seed=1), SamplingParams(max_tokens=8))
        side = {"decode_tok_s": decode_tok_s(engine, copy_prompt(vocab, work), work.output_len)}
        for batch in batches:
            batch_work = replace(work, num_requests=batch, output_len=args.batch_output_len)
            prompts = prompts_for(vocab, batch_work, batch, seed=2)
            runs = []  # a batch of 512 takes a quarter second on the GPU: the median of a few
            for _ in range(args.batch_repeats):
                before = engine.stats()
                rate = offline_throughput(engine, prompts, batch_work, None)["throughput_out_tok_s"]
                runs.append((rate, run_counts(before, engine.stats())))
            rate, counts = median_run(runs, key=itemgetter(0))
            side[f"batch{batch}_out_tok_s"], side[f"batch{batch}_counts"] = rate, counts
        side["stats"] = {k: v for k, v in engine.stats().items() if k.startswith("spec_")}
        out[name] = side
        log.info("speculation %s: %s", name, side)
        del engine
        free_memory()
    return out


def run_counts(before: dict, after: dict) -> dict:
    """What one offline run did, from the engine's stats() before and after it: its steps and
    launches, verify steps (each runs alone, one step a launch) and their rows and drafts, the
    steps a plain launch ran when it began (the pacer's, which earlier runs moved), and the
    host's ms a launch."""
    delta = {key: after[key] - before[key] for key in COUNTED}
    return {
        **delta,
        "steps_per_launch": delta["num_steps"] / max(1, delta["num_launches"]),
        "num_scheduler_steps_at_start": before["num_scheduler_steps"],
        "host_ms_per_launch": ms_per_launch(after, before)["host_ms_per_launch"],
    }


def projections(ms: dict, off_tok_s: float, rates: list[float]) -> list[dict]:
    off_ms = 1e3 / off_tok_s
    rows = []
    for k in range(1, MAX_DRAFTS + 1):
        row = {"k": k, "verify_ms": ms[k], "vs_1_token_step": ms[k] / ms[0]}
        row["vs_off_token"] = ms[k] / off_ms
        for a in rates:
            tokens = (1 - a ** (k + 1)) / (1 - a)
            row[f"projected_speedup_a{a:g}"] = tokens * off_ms / ms[k]
        rows.append(row)
    return rows


def bench_model(name: str, shape: dict, args, scratch: Path) -> dict:
    device = torch.device(args.device)
    work = TINY_STEP_WORK if args.tiny else STEP_WORK
    log.info("%s: random weights, checkpoint, engine", name)
    model = random_hf_model(shape, getattr(torch, args.dtype), device)
    ckpt = write_checkpoint(model, args.dtype, scratch / f"{name}-ckpt")
    del model
    free_memory()
    vocab = shape["vocab_size"]
    tokenizer = write_tokenizer(vocab, scratch / f"{name}-tokenizer")
    engine_dir = build_engine(ckpt, tokenizer, scratch / f"{name}-engine", work)
    shutil.rmtree(ckpt)
    results = steps_and_batches(engine_dir, args, vocab, work)
    shutil.rmtree(engine_dir)
    return results


def steps_and_batches(engine_dir: Path, args, vocab: int, work) -> dict:
    """The verify-step table and its projection, and batch-1 / batch on vs off."""
    ms = verify_steps(engine_dir, args, vocab, work)
    batches = (4, 8) if args.tiny else (64, 512)
    sides = on_off(engine_dir, args, vocab, work, batches)
    off = sides["off"]
    return {
        "step_ms": ms,
        "verify": projections(ms, off["decode_tok_s"], args.acceptance),
        "sides": sides,
        "copy_decode_on_vs_off": sides["on"]["decode_tok_s"] / off["decode_tok_s"],
        **{
            f"batch{b}_on_vs_off": sides["on"][f"batch{b}_out_tok_s"] / off[f"batch{b}_out_tok_s"]
            for b in batches
        },
    }


def has_gguf_reader() -> bool:
    """transformers reads a GGUF with the `gguf` package."""
    return importlib.util.find_spec("gguf") is not None


def bench_real(gguf: Path, args, scratch: Path) -> dict:
    """SmolLM2's real weights: the shape's three parts, then the batch-1 settings table."""
    work = TINY_REAL_WORK if args.tiny else STEP_WORK
    build_work = replace(work, input_len=REAL_INPUT_LEN)
    real = real_engines(gguf, args.draft_layers, args.dtype, build_work, scratch)
    target = real.engines[real.num_layers]
    results = steps_and_batches(target, args, real.vocab_size, work)
    rows = batch1_table(real, settings_of(args), args, args.max_tokens, REAL_KV_BLOCKS)
    return results | {"batch1": rows, "best": best(rows)}


def counts_markdown(sides: dict) -> list[str]:
    """Each offline run's counts, speculation off and on (run_counts)."""
    lines = [
        "",
        "| run | speculation | steps | launches | steps / launch | verify steps | verify rows | "
        "drafts | pacer's steps at start | host ms / launch |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, side in sides.items():
        for key in (k for k in side if k.endswith("_counts")):
            c = side[key]
            lines.append(
                f"| {key.removesuffix('_counts')} | {name} | {c['num_steps']} | "
                f"{c['num_launches']} | {c['steps_per_launch']:.2f} | "
                f"{c['spec_num_verify_steps']} | {c['spec_num_verify_rows']} | "
                f"{c['spec_num_drafted_tokens']} | {c['num_scheduler_steps_at_start']} | "
                f"{c['host_ms_per_launch']:.3f} |"
            )
    return lines


def markdown(results: dict, device: str) -> str:
    lines = [f"# Speculative decoding ({device})", ""]
    for name, r in results.items():
        rates = [k.removeprefix("projected_speedup_a") for k in r["verify"][0] if "projected" in k]
        lines += [
            f"## {name}",
            "",
            f"1-token step {r['step_ms']['0']:.3f} ms; off: "
            f"{r['sides']['off']['decode_tok_s']:.0f} tok/s batch-1. Speedups are a projection "
            f"at acceptance rate a (the verify steps' drafts are random tokens, rejected).",
            "",
            "| k | verify ms | / 1-token step | / off token | "
            + " | ".join(f"projected a={a}" for a in rates)
            + " |",
            "|---|---|---|---|" + "---|" * len(rates),
        ]
        for row in r["verify"]:
            cells = [f"{row[f'projected_speedup_a{a}']:.2f}x" for a in rates]
            lines.append(
                f"| {row['k']} | {row['verify_ms']:.3f} | {row['vs_1_token_step']:.2f} | "
                f"{row['vs_off_token']:.2f} | " + " | ".join(cells) + " |"
            )
        lines += ["", "| measured | on / off |", "|---|---|"]
        lines.append(
            f"| batch-1 copy task decode (prompt lookup) | {r['copy_decode_on_vs_off']:.3f} |"
        )
        for key in (k for k in r if k.startswith("batch") and k.endswith("_on_vs_off")):
            lines.append(f"| {key.removesuffix('_on_vs_off')} offline throughput | {r[key]:.3f} |")
        lines += counts_markdown(r["sides"])
        if "batch1" in r:
            lines += batch1_markdown(r["batch1"])
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true", help="a tiny fp32 model on the CPU")
    parser.add_argument("--acceptance", default="0.5,0.7,0.9", help="rates to project at")
    parser.add_argument("--num-steps", type=int, default=30, help="steps timed per k")
    parser.add_argument("--batch-output-len", type=int, default=64)
    parser.add_argument("--batch-repeats", type=int, default=3, help="runs a batch (median)")
    parser.add_argument("--gguf", type=Path, help="SmolLM2-135M-Instruct's GGUF: real weights")
    parser.add_argument("--draft-layers", default="2,4,6", help="draft models' blocks kept")
    parser.add_argument("--draft-k", default="2,3,4,5", help="draft models' k")
    parser.add_argument("--lookup-k", default="4,8,12,16", help="prompt lookup's k")
    parser.add_argument("--num-prompts", type=int, default=4, help="real prompts per task")
    parser.add_argument("--no-8b", action="store_true", help="SmolLM2 alone (minutes less)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args.acceptance = [float(a) for a in args.acceptance.split(",")]
    for key in ("draft_layers", "draft_k", "lookup_k"):
        setattr(args, key, tuple(int(v) for v in getattr(args, key).split(",")))
    real = args.gguf is not None and args.gguf.is_file() and has_gguf_reader()
    if args.gguf is not None and not real:
        log.warning(
            "--gguf %s: no such file, or no `gguf` package to read it; SmolLM2's real-weights "
            "part is skipped (its shape runs instead)",
            args.gguf,
        )
    if args.tiny:
        args.device, args.dtype, args.num_steps, args.batch_output_len = "cpu", "float32", 5, 8
        args.batch_repeats = 1
        args.spec_max_batch_size, args.num_prompts = 2, 1
        args.draft_layers, args.draft_k, args.lookup_k = (2,), (2,), (2,)
        args.max_tokens = {"copy": 12, "chat": 8}
        models = {"smollm2-135m-real": None} if real else {"tiny": TINY}
    else:
        args.device, args.dtype, args.spec_max_batch_size = "cuda", "bfloat16", 32
        args.max_tokens = {"copy": 160, "chat": 192}
        smollm2 = {"smollm2-135m-real": None} if real else {"smollm2-135m-shape": SMOLLM2}
        models = {**smollm2, "llama-3.1-8b-shape": LLAMA_8B}  # SmolLM2 first: the real weights
        if args.no_8b:
            del models["llama-3.1-8b-shape"]
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_spec_decode_") as tmp:
        for name, shape in models.items():
            if shape is None:
                results[name] = bench_real(args.gguf, args, Path(tmp))
            else:
                results[name] = bench_model(name, shape, args, Path(tmp))
            # after each model: a later failure keeps the earlier results
            report = json.loads(json.dumps({"device": device, "models": results}))
            (args.out / "bench_spec_decode.json").write_text(json.dumps(report, indent=2))
            (args.out / "bench_spec_decode.md").write_text(markdown(report["models"], device))
    print((args.out / "bench_spec_decode.md").read_text())


if __name__ == "__main__":
    main()
