"""Weight offload on one GPU: streamed engines against their PCIe bound and the resident engine.

    python -m scripts.bench_weight_offload --out DIR [--runs 8b,70b] [--budget-70b-gb 48] [--tiny]

- Llama-3.1-8B shape, bf16: resident, and with a budget that streams half its decoder layers
  (same run, so the ratio compares like with like);
- Llama-3.1-70B shape in FP8 (~70 GB of weights) on one 80 GB GPU: larger than the GPU, so it
  runs only streamed (--budget-70b-gb of decoder layers resident).
Each run: batch-1 decode tok/s and an offline run (512 requests of 128 prompt / 128 output
tokens at t=0), each against the PCIe bound: the streamed bytes a step over the measured
host-to-device GB/s give the most steps a second the copies allow (the goal is >= 80% of it).
Weights are synthetic (pipeline.synthetic.weights), drawn on the GPU layer by layer as the
engine builds, so a streamed layer goes to pinned host memory before the next is drawn and
neither the GPU nor the host ever holds two copies. Writes bench_weight_offload.json + .md to DIR
after each run. --tiny: the same code on the CPU with a six-layer shape (the unit test). Needs
torch + transformers, not hydra/modelopt.
"""

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

import torch

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.execution.offload_plan import GB, NUM_STAGING
from pipeline.synthetic.shapes import LLAMA_8B, TINY
from pipeline.synthetic.weights import HOOK, checkpoint_config, write_engine
from scripts.bench_multi_gpu import LLAMA_70B, build_limits
from scripts.engine_run import Workload, free_memory, offline_throughput, prompts_for
from scripts.model_shapes import write_tokenizer

log = logging.getLogger("bench_weight_offload")
WORK = Workload(num_requests=512, input_len=128, output_len=128, max_batch_size=512)
WORK_70B = Workload(num_requests=512, input_len=128, output_len=128, max_batch_size=256)
TINY_SHAPE = {**TINY, "num_hidden_layers": 6}
TINY_WORK = Workload(num_requests=8, input_len=12, output_len=8, max_batch_size=4)
DECODE_TOKENS = {"8b": 64, "70b": 12, "tiny": 8}  # batch-1 tokens a sample (2 samples)
PCT_GOAL = 80.0


def layer_bytes(shape: dict, quant: str | None, dtype: str) -> int:
    """One decoder layer's linear weights: what the streamer copies a layer."""
    hidden, inter = shape["hidden_size"], shape["intermediate_size"]
    head = hidden // shape["num_attention_heads"]
    kv = shape["num_key_value_heads"] * head
    params = hidden * (hidden + 2 * kv) + hidden * hidden + 3 * hidden * inter
    return params * (1 if quant == "FP8" else getattr(torch, dtype).itemsize)


def half_streamed_budget(shape: dict, quant: str | None, dtype: str) -> float:
    # half the layers resident plus the staging buffers, and half a layer to spare for scales
    resident = shape["num_hidden_layers"] // 2 + NUM_STAGING + 0.5
    return resident * layer_bytes(shape, quant, dtype) / GB


def runs(args) -> list[tuple]:
    """(group, name, shape, dtype, quant, budget GB or None, workload)"""
    if args.tiny:
        half = half_streamed_budget(TINY_SHAPE, None, "float32")
        fp8 = (NUM_STAGING + 2.5) * layer_bytes(TINY_SHAPE, "FP8", "bfloat16") / GB
        return [
            ("tiny", "tiny_f32_resident", TINY_SHAPE, "float32", None, None, TINY_WORK),
            ("tiny", "tiny_f32_half_streamed", TINY_SHAPE, "float32", None, half, TINY_WORK),
            ("tiny", "tiny_fp8_streamed", TINY_SHAPE, "bfloat16", "FP8", fp8, TINY_WORK),
        ]
    half = half_streamed_budget(LLAMA_8B, None, "bfloat16")
    table = {
        "8b": [
            ("8b", "llama8b_bf16_resident", LLAMA_8B, "bfloat16", None, None, WORK),
            ("8b", "llama8b_bf16_half_streamed", LLAMA_8B, "bfloat16", None, half, WORK),
        ],
        "70b": [
            ("70b", "llama70b_fp8_streamed", LLAMA_70B, "bfloat16", "FP8", args.budget_70b_gb)
            + (WORK_70B,)
        ],
    }
    return [run for group in args.runs.split(",") for run in table[group]]


def _pct(rate: float, bound: float | None) -> float | None:
    return None if bound is None else 100 * rate / bound


def measure(engine: LLMEngine, vocab_size: int, work: Workload, group: str) -> dict:
    """Batch-1 decode (median of 2, the launch's first delta excluded) and the offline run."""
    warm = SamplingParams(max_tokens=2, ignore_eos=True)
    engine.generate(prompts_for(vocab_size, work, 2, seed=1), warm)
    params = SamplingParams(max_tokens=DECODE_TOKENS[group], ignore_eos=True)
    rates = []
    for _ in range(2):
        out = engine.generate(prompts_for(vocab_size, work, 1), params)[0]
        first = min(engine.num_scheduler_steps, len(out.token_ids))
        rates.append((len(out.token_ids) - first) / (out.finish_time_s - out.first_token_time_s))
    before = engine.stats()["num_steps"]
    prompts = prompts_for(vocab_size, work, work.num_requests, seed=2)
    result = {"decode_tok_s": statistics.median(rates)}
    result |= offline_throughput(engine, prompts, work, None)
    steps = engine.stats()["num_steps"] - before
    result |= {"offline_steps": steps, "offline_steps_per_s": steps / result["throughput_wall_s"]}
    return result


def run_one(run: tuple, tokenizer_dir: Path, work_dir: Path, device: torch.device) -> dict:
    group, name, shape, dtype, quant, budget, work = run
    cfg = checkpoint_config(shape, dtype, 1, 1, quant)
    engine_dir = write_engine(cfg, build_limits(work), tokenizer_dir, work_dir / name)
    start = time.perf_counter()
    engine = LLMEngine.from_engine_dir(
        engine_dir, device=str(device), weights_loader=HOOK, gpu_weight_budget_gb=budget
    )
    load_s = time.perf_counter() - start
    try:
        streamer = engine.model_runner.streamer
        bound = streamer.bound if streamer else None
        result = {"budget_gb": budget, "load_s": load_s}
        if streamer is not None:
            result |= {
                "num_layers": streamer.num_layers,
                "streamed_layers": len(streamer.streamed),
                "layer_gb": streamer.layer_bytes / GB,
            }
        if bound is not None:
            result |= {
                "streamed_gb_per_step": bound.streamed_bytes / GB,
                "host_to_device_gbps": bound.host_to_device_gbps,
                "bound_steps_per_s": bound.max_steps_per_s,
            }
        result |= measure(engine, shape["vocab_size"], work, group)
        max_steps = bound.max_steps_per_s if bound else None
        result["decode_pct_of_bound"] = _pct(result["decode_tok_s"], max_steps)
        result["offline_pct_of_bound"] = _pct(result["offline_steps_per_s"], max_steps)
        result["use_cuda_graph"] = engine.model_runner.graphs is not None
        return result
    finally:
        engine.close()
        del engine
        free_memory()
        if hasattr(torch._C, "_host_emptyCache"):  # the streamed layers' pinned host memory
            torch._C._host_emptyCache()


def ratios(results: dict) -> None:
    """Each streamed run against the resident run of its group (same run, same GPU)."""
    for name, result in results.items():
        base = results.get(name.rsplit("_", 2)[0] + "_resident")
        if base is None or base is result or "error" in base or "error" in result:
            continue
        result["decode_vs_resident"] = result["decode_tok_s"] / base["decode_tok_s"]
        result["offline_vs_resident"] = (
            result["throughput_out_tok_s"] / base["throughput_out_tok_s"]
        )


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


COLUMNS = (
    ("run", None),
    ("streamed layers", "streamed_layers"),
    ("GB/step", "streamed_gb_per_step"),
    ("H2D GB/s", "host_to_device_gbps"),
    ("bound steps/s", "bound_steps_per_s"),
    ("b1 tok/s", "decode_tok_s"),
    ("b1 % bound", "decode_pct_of_bound"),
    ("offline tok/s", "throughput_out_tok_s"),
    ("offline steps/s", "offline_steps_per_s"),
    ("offline % bound", "offline_pct_of_bound"),
    ("b1 / resident", "decode_vs_resident"),
    ("offline / resident", "offline_vs_resident"),
)


def markdown(results: dict, device: str) -> str:
    lines = [
        f"# Weight offload ({device})",
        "",
        f"Bound: streamed bytes a step / measured host-to-device GB/s; goal >= {PCT_GOAL:.0f}%.",
        "",
        "| " + " | ".join(c for c, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for name, result in results.items():
        if "error" in result:
            lines.append(f"| {name} | error: {result['error']} |")
            continue
        cells = [name] + [_cell(result.get(key)) for _, key in COLUMNS[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", default="8b,70b", help="groups: 8b, 70b")
    parser.add_argument("--budget-70b-gb", type=float, default=48.0)
    parser.add_argument("--tiny", action="store_true", help="CPU, a six-layer shape")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s %(name)s] %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cpu" if args.tiny else "cuda")
    name = "cpu" if args.tiny else torch.cuda.get_device_name(device)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work_dir = Path(tmp)
        planned = runs(args)
        vocab = {run[2]["vocab_size"] for run in planned}
        tokenizers = {v: write_tokenizer(v, work_dir / f"tokenizer-{v}") for v in vocab}
        for run in planned:
            log.info("%s: budget %s GB", run[1], run[5])
            try:
                tokenizer = tokenizers[run[2]["vocab_size"]]
                results[run[1]] = run_one(run, tokenizer, work_dir, device)
            except Exception as err:  # noqa: BLE001 - one command brings back all it can
                log.exception("%s failed", run[1])
                results[run[1]] = {"error": f"{type(err).__name__}: {err}"}
            ratios(results)
            report = {"device": name, "pct_goal": PCT_GOAL, "runs": results}
            (out / "bench_weight_offload.json").write_text(json.dumps(report, indent=2))
            (out / "bench_weight_offload.md").write_text(markdown(results, name))
    print(markdown(results, name))


if __name__ == "__main__":
    main()
