"""Multi-LoRA serving against the base model alone, in one GPU run.

    python -m scripts.bench_lora --out DIR [--tiny]

A Llama-3.1-8B-shaped engine with random bf16 weights (pipeline.synthetic: nothing on disk) and
16 random rank-16 adapters on all seven linears, written in peft's format. Measured in this one
run, the base engine first, then the engine with the adapters (16 device slots):
- offline: 512 requests of 128 prompt + 128 new tokens at t=0, spread evenly over the adapters
  (out tok/s; the same requests without adapters on the LoRA engine too);
- batch-1 decode tok/s (median of 3), base and with an adapter;
- adapter load time (read, check, convert to the engine's layout) and memory per adapter (its
  device slot, its host copy); the LoRA kernels a batch-1 decode step launches.
Ratios are against the base engine of the same run (goals: offline >= 0.8x, batch-1 >= 0.85x).
Writes bench_lora.json + bench_lora.md. --tiny: the same code on CPU with a tiny fp32 model.
"""

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import save_file

from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.engine_config import ModelConfig
from pipeline.engine.lora.weights import full_shapes
from pipeline.lora.adapters import TARGET_MODULES
from pipeline.synthetic.shapes import LLAMA_8B, TINY
from pipeline.synthetic.weights import HOOK, checkpoint_config, write_engine
from scripts.bench_multi_gpu import build_limits
from scripts.engine_run import Workload, free_memory, prompts_for, sync
from scripts.model_shapes import write_tokenizer

WORK = Workload(num_requests=512, input_len=128, output_len=128, max_batch_size=512)
TINY_WORK = Workload(num_requests=8, input_len=12, output_len=8, max_batch_size=4)
GOALS = {"offline": 0.8, "decode": 0.85}


def model_config(shape: dict) -> ModelConfig:
    cfg = checkpoint_config(shape, "bfloat16", 1, 1, None)
    return ModelConfig.from_pretrained_config(cfg, "bench_lora")


def write_adapter(shape: dict, rank: int, seed: int, dtype: torch.dtype, out_dir: Path) -> None:
    """A random LoRA on every linear, as peft's save_pretrained writes it."""
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(shape["num_hidden_layers"]):
        for module, (out, inp) in full_shapes(model_config(shape)).items():
            kind = "self_attn" if module in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            key = f"base_model.model.model.layers.{layer}.{kind}.{module}.lora_"
            tensors[key + "A.weight"] = (torch.randn(rank, inp, generator=g) / inp**0.5).to(dtype)
            tensors[key + "B.weight"] = (torch.randn(out, rank, generator=g) * 0.01).to(dtype)
    out_dir.mkdir(parents=True)
    save_file(tensors, out_dir / "adapter_model.safetensors")
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": 2 * rank,
        "target_modules": list(TARGET_MODULES),
        "bias": "none",
    }
    (out_dir / "adapter_config.json").write_text(json.dumps(config))


def offline(engine: LLMEngine, prompts: list[list[int]], names: list, work: Workload) -> dict:
    """Every request at t=0, request i with adapter names[i % len(names)], stepped to the end."""
    start = time.perf_counter()
    for i, prompt in enumerate(prompts):
        params = SamplingParams(
            max_tokens=work.output_len, ignore_eos=True, lora_name=names[i % len(names)]
        )
        engine.add_request(prompt, params)
    num_out = 0
    while engine.has_unfinished():
        num_out += sum(len(d.token_ids) for d in engine.step())
    wall_s = time.perf_counter() - start
    return {"out_tok_s": num_out / wall_s, "wall_s": wall_s, "num_out_tokens": num_out}


def decode(
    engine: LLMEngine, vocab: int, work: Workload, name: str | None
) -> tuple[float, list[int]]:
    """Batch-1 decode tok/s (after the first token), median of 3; its greedy tokens."""
    params = SamplingParams(max_tokens=work.output_len, ignore_eos=True, lora_name=name)
    rates = []
    for _ in range(3):
        out = engine.generate(prompts_for(vocab, work, 1), params)[0]
        first = min(engine.num_scheduler_steps, len(out.token_ids))
        span = out.finish_time_s - out.first_token_time_s
        rates.append((len(out.token_ids) - first) / span)
    return statistics.median(rates), out.token_ids


def slot_bytes(engine: LLMEngine) -> int:
    """Device bytes one adapter's slot takes in every adapted linear."""
    lora = engine.model_runner.lora
    total = 0
    for layer in lora.layers:
        for module in layer.values():
            total += module.lora_a[0].nbytes + module.lora_b[:, 0].numel() * module.lora_b.itemsize
    return total


def decode_launches(engine: LLMEngine) -> int:
    """LoRA kernels a batch-1 decode step launches (lora_bgmv's; 0 in plain PyTorch)."""
    lora = engine.model_runner.lora
    if lora.batch.bgmv is None:
        return 0
    num_linears = sum(len(layer) for layer in lora.layers)
    return lora.batch.bgmv.NUM_LAUNCHES_PER_LINEAR * num_linears


def run(args: argparse.Namespace, tmp: Path) -> dict:
    device = torch.device("cpu" if args.tiny else "cuda")
    dtype = "float32" if args.tiny else "bfloat16"
    shape, work = (TINY, TINY_WORK) if args.tiny else (LLAMA_8B, WORK)
    work = replace(work, num_requests=args.num_requests or work.num_requests)
    vocab = shape["vocab_size"]
    tokenizer = write_tokenizer(vocab, tmp / "tokenizer")
    cfg = checkpoint_config(shape, dtype, 1, 1, None)
    engine_dir = write_engine(cfg, build_limits(work), tokenizer, tmp / "engine")
    adapters = tmp / "adapters"
    names = [f"lora{i:02d}" for i in range(args.num_adapters)]
    for i, name in enumerate(names):
        write_adapter(shape, args.rank, i, getattr(torch, dtype), adapters / name)
    prompts = prompts_for(vocab, work, work.num_requests, seed=2)
    result = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}
    result |= {"shape": "tiny" if args.tiny else "llama-3.1-8b", "dtype": dtype}
    result |= {"num_adapters": len(names), "rank": args.rank, "num_requests": work.num_requests}

    def engine_for(**lora) -> LLMEngine:
        return LLMEngine.from_engine_dir(
            engine_dir, device=str(device), weights_loader=HOOK, **lora
        )

    engine = engine_for()
    engine.generate(prompts_for(vocab, work, 4, seed=1), SamplingParams(max_tokens=4))  # warm
    decode_tok_s, base_tokens = decode(engine, vocab, work, None)
    result["base"] = {
        "decode_tok_s": decode_tok_s,
        **offline(engine, prompts, [None], work),
    }
    print("base", json.dumps(result["base"]), flush=True)
    del engine
    free_memory()
    start = time.perf_counter()
    engine = engine_for(lora_dir=str(adapters), lora_max_rank=args.rank, lora_max_loras=len(names))
    load_s = time.perf_counter() - start
    lora = engine.model_runner.lora
    engine.generate(prompts_for(vocab, work, 4, seed=1), SamplingParams(max_tokens=4))
    # every adapter in its slot once before timing (a first use copies it from the host)
    engine.generate(
        [prompts[0]] * len(names), [SamplingParams(max_tokens=2, lora_name=n) for n in names]
    )
    sync(device)
    decode_tok_s, tokens = decode(engine, vocab, work, names[0])
    decode_base_tok_s, lora_base_tokens = decode(engine, vocab, work, None)
    result["lora"] = {
        "engine_load_s": load_s,
        "adapter_load_s_mean": statistics.mean(lora.load_s.values()),
        "adapter_device_mib": slot_bytes(engine) / 2**20,
        "adapter_host_mib": statistics.mean(a.nbytes for a in lora.adapters.values()) / 2**20,
        "decode_tok_s": decode_tok_s,
        "decode_base_tok_s": decode_base_tok_s,
        # no adapter asked: the base engine's greedy tokens; an adapter changes them
        "base_tokens_equal": lora_base_tokens == base_tokens,
        "adapter_tokens_differ": tokens != base_tokens,
        **offline(engine, prompts, names, work),
        "offline_base_only": offline(engine, prompts, [None], work),
        "kernel": "bgmv + sgmv (Triton)" if lora.batch.sgmv is not None else "plain PyTorch",
        "decode_step_lora_launches": decode_launches(engine),
    }
    print("lora", json.dumps(result["lora"]), flush=True)
    del engine, lora
    free_memory()
    base, on = result["base"], result["lora"]
    result["ratios"] = {
        "offline": on["out_tok_s"] / base["out_tok_s"],
        "offline_base_only": on["offline_base_only"]["out_tok_s"] / base["out_tok_s"],
        "decode": on["decode_tok_s"] / base["decode_tok_s"],
        "decode_base_only": on["decode_base_tok_s"] / base["decode_tok_s"],
    }
    return result


def markdown(r: dict) -> str:
    base, on, ratio = r["base"], r["lora"], r["ratios"]

    def verdict(key: str) -> str:
        return "meets" if ratio[key] >= GOALS[key] else "misses"

    return "\n".join(
        [
            f"Multi-LoRA, {r['shape']} {r['dtype']} on {r['device']}: {r['num_adapters']} "
            f"rank-{r['rank']} adapters on all linears, {r['num_requests']} requests spread "
            f"evenly over them; delta kernel: {on['kernel']}.",
            "",
            "| run | out tok/s (offline) | vs base | batch-1 decode tok/s | vs base |",
            "|---|---|---|---|---|",
            f"| base engine | {base['out_tok_s']:,.0f} | 1.00 | "
            f"{base['decode_tok_s']:,.1f} | 1.00 |",
            f"| LoRA engine, requests over the adapters | {on['out_tok_s']:,.0f} | "
            f"{ratio['offline']:.2f} ({verdict('offline')} {GOALS['offline']}) | "
            f"{on['decode_tok_s']:,.1f} | {ratio['decode']:.2f} ({verdict('decode')} "
            f"{GOALS['decode']}) |",
            f"| LoRA engine, no adapter asked | {on['offline_base_only']['out_tok_s']:,.0f} | "
            f"{ratio['offline_base_only']:.2f} | {on['decode_base_tok_s']:,.1f} | "
            f"{ratio['decode_base_only']:.2f} |",
            "",
            f"Adapter load (read, check, convert): {on['adapter_load_s_mean']:.2f} s each; "
            f"memory per adapter: {on['adapter_device_mib']:.1f} MiB in its device slot, "
            f"{on['adapter_host_mib']:.1f} MiB host copy. Greedy tokens without an adapter "
            f"equal the base engine's: {on['base_tokens_equal']}; an adapter changes them: "
            f"{on['adapter_tokens_differ']}. LoRA kernels a batch-1 decode step launches: "
            f"{on['decode_step_lora_launches']}.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true", help="CPU, tiny model: tests the script")
    parser.add_argument("--num-adapters", type=int, default=16)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--num-requests", type=int, help="default: 512 (--tiny: 8)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench_lora_") as tmp:
        result = run(args, Path(tmp))
    (args.out / "bench_lora.json").write_text(json.dumps(result, indent=2))
    table = markdown(result)
    (args.out / "bench_lora.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
