"""The cost of log probabilities on the GPU, on and off in one run:

    python -m scripts.bench_logprobs --out DIR [--tiny]

For each model shape (SmolLM2-135M and Llama-3.1-8B, random bf16 weights: scripts.model_shapes),
one engine: out tok/s of offline runs at batch 1 / 64 / 512 (every request at t=0, 128 prompt
tokens, --output-len new ones) with no log probabilities and with each token's top-5
(SamplingParams.logprobs=5), and a 2,048-token prompt's prefill alone against the same prefill
with every prompt token's top-5 (prompt_logprobs=5; at a 128k vocabulary the logits of 2,048
positions are 1 GiB of float32, computed in chunks). Greedy tokens must be the same either way.
Writes bench_logprobs.json and bench_logprobs.md. --tiny: a tiny fp32 model on the CPU (the
unit test).
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.synthetic.shapes import LLAMA_8B, SMOLLM2, TINY
from scripts.engine_run import TINY_WORKLOAD, Workload, free_memory, prompts_for, sync
from scripts.model_shapes import build_engine, random_hf_model, write_checkpoint, write_tokenizer

TOP = 5
SHAPES = {"smollm2-135m-shape": SMOLLM2, "llama-3.1-8b-shape": LLAMA_8B}


def offline(engine: LLMEngine, prompts, output_len: int, logprobs: int | None):
    """(out tok/s, each request's tokens) of these prompts all at t=0."""
    params = SamplingParams(max_tokens=output_len, ignore_eos=True, logprobs=logprobs)
    sync(engine.model_runner.device)
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    sync(engine.model_runner.device)
    wall_s = time.perf_counter() - start
    return sum(len(o.token_ids) for o in outs) / wall_s, [o.token_ids for o in outs]


def prefill_ms(engine: LLMEngine, prompt: list[int], prompt_logprobs: int | None) -> float:
    """Median of 3: one prompt's prefill (and its one sampled token)."""
    params = SamplingParams(max_tokens=1, prompt_logprobs=prompt_logprobs)
    times = []
    for _ in range(3):
        sync(engine.model_runner.device)
        start = time.perf_counter()
        (out,) = engine.generate([prompt], params)
        sync(engine.model_runner.device)
        times.append((time.perf_counter() - start) * 1e3)
        assert prompt_logprobs is None or len(out.prompt.logprobs) == len(prompt)
    return statistics.median(times)


def measure(engine: LLMEngine, vocab: int, batches, work: Workload, prefill_len: int) -> dict:
    result = {"batches": {}, "num_scheduler_steps": engine.num_scheduler_steps}
    for batch in batches:
        prompts = prompts_for(vocab, work, batch, seed=batch)
        offline(engine, prompts, work.output_len, TOP)  # warm-up at this batch
        off_tok_s, off_tokens = offline(engine, prompts, work.output_len, None)
        on_tok_s, on_tokens = offline(engine, prompts, work.output_len, TOP)
        result["batches"][str(batch)] = {
            "off_out_tok_s": off_tok_s,
            "top5_out_tok_s": on_tok_s,
            "ratio": on_tok_s / off_tok_s,
            "greedy_equal": on_tokens == off_tokens,
        }
        print(batch, json.dumps(result["batches"][str(batch)]), flush=True)
    g = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, vocab, (prefill_len,), generator=g).tolist()
    prefill_ms(engine, prompt, TOP)  # warm-up
    plain, scored = prefill_ms(engine, prompt, None), prefill_ms(engine, prompt, TOP)
    result["prefill"] = {
        "prompt_tokens": prefill_len,
        "plain_ms": plain,
        "prompt_top5_ms": scored,
        "ratio": scored / plain,
    }
    return result


def markdown(results: dict) -> str:
    rows = [
        f"Device: {results['device']}, {results['dtype']}; out tok/s, top-{TOP} log probabilities",
        "",
        "| model | batch | off tok/s | top-5 on tok/s | on / off | greedy equal |",
        "|---|---|---|---|---|---|",
    ]
    for name, run in results["models"].items():
        for batch, r in run["batches"].items():
            rows.append(
                f"| {name} | {batch} | {r['off_out_tok_s']:,.0f} | {r['top5_out_tok_s']:,.0f} | "
                f"{r['ratio']:.3f} | {r['greedy_equal']} |"
            )
    rows += ["", "| model | prompt tokens | plain prefill ms | prompt top-5 ms | on / off |"]
    rows.append("|---|---|---|---|---|")
    for name, run in results["models"].items():
        p = run["prefill"]
        rows.append(
            f"| {name} | {p['prompt_tokens']} | {p['plain_ms']:.1f} | {p['prompt_top5_ms']:.1f} "
            f"| {p['ratio']:.3f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--tiny", action="store_true", help="CPU, tiny model: tests the script")
    args = parser.parse_args(argv)
    device, dtype = ("cpu", "float32") if args.tiny else ("cuda", "bfloat16")
    shapes = {"tiny": TINY} if args.tiny else {name: SHAPES[name] for name in args.models}
    batches, prefill_len = ((1, 4), 48) if args.tiny else ((1, 64, 512), 2048)
    work = TINY_WORKLOAD if args.tiny else Workload(output_len=args.output_len)
    # the engine's limits: the prefill's prompt fits
    limits = Workload(
        max_batch_size=max(batches), input_len=prefill_len, output_len=work.output_len
    )
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"device": device, "dtype": dtype, "models": {}}
    with tempfile.TemporaryDirectory(prefix="bench_logprobs_") as tmp:
        tmp = Path(tmp)
        for name, shape in shapes.items():
            model = random_hf_model(shape, getattr(torch, dtype), torch.device(device))
            ckpt = write_checkpoint(model, dtype, tmp / f"{name}-ckpt")
            del model
            free_memory()  # the engine gets the GPU to itself
            tokenizer = write_tokenizer(shape["vocab_size"], tmp / f"{name}-tokenizer")
            engine_dir = build_engine(ckpt, tokenizer, tmp / f"{name}-engine", limits)
            engine = LLMEngine.from_engine_dir(engine_dir, device=device, dtype=dtype)
            results["models"][name] = measure(
                engine, shape["vocab_size"], batches, work, prefill_len
            )
            engine.close()
            del engine
            free_memory()  # the next shape's model and KV cache need the GPU the last one held
            (args.out / "bench_logprobs.json").write_text(json.dumps(results, indent=2))
    (args.out / "bench_logprobs.md").write_text(markdown(results) + "\n")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
