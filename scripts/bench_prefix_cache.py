"""Prefix caching and its host tier, on and off in one run: random-weight engines of a model shape
(weights made on the device, nothing written), three workloads each.

    python -m scripts.bench_prefix_cache --out DIR [--tiny] [--models llama-3.1-8b-shape ...]

(a) shared system prompt: every request is the same 2,048-token prefix + 128 tokens of its own,
    128 out, all at t=0 (one request warms each engine first): TTFT p50 / p99 and out tok/s,
    caching on vs off;
(b) multi-turn chat (scripts/multi_turn_chat.py): U users x T turns, each turn the conversation
    so far + a new message; each user's next turn arrives a think time (exponential, seeded)
    after that user's previous reply ended, the first turns spread over a start window, so only
    part of the users are active at once; the GPU KV pool holds a third of the working set, the
    host tier all of it: TTFT p50 / p99 of the turns after the first, host-tier and prefix hit
    rates, with the host tier on vs off, and the PCIe GB/s its copies reach: each batched copy's
    during the run (timed on the copy stream), the bytes over the whole run, and offload and
    load of 64 blocks timed alone on the same engine;
(c) unique 128/128 prompts: out tok/s with caching on vs off (the bookkeeping's cost), the
    median of 5 runs a side, each of new prompts.
Writes bench_prefix_cache.json + bench_prefix_cache.md. --tiny: a tiny fp32 model on the CPU.
"""

import argparse
import dataclasses
import json
import logging
import math
import tempfile
import time
from dataclasses import dataclass, replace
from operator import itemgetter
from pathlib import Path

import numpy as np
import torch

from pipeline.bench.metrics import percentiles
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.core.engine_times import ms_per_launch
from pipeline.engine.core.heap import frozen
from pipeline.engine.scheduling.prefix_cache import host_slot_ref
from pipeline.specs.build import BuildSpec
from pipeline.synthetic.shapes import LLAMA_8B, SMOLLM2, TINY
from pipeline.synthetic.weights import HOOK, checkpoint_config, write_engine
from scripts.engine_run import Workload, free_memory, median_run, offline_throughput
from scripts.model_shapes import write_tokenizer
from scripts.multi_turn_chat import ChatPlan, active_users, chat, ttft_summary

log = logging.getLogger("bench_prefix_cache")
SHAPES = {"llama-3.1-8b-shape": LLAMA_8B, "smollm2-135m-shape": SMOLLM2}


@dataclass(frozen=True)
class Plan:
    num_requests: int = 512  # (a) and (c)
    prefix_len: int = 2048  # (a)
    unique_len: int = 128  # (a) and (c)
    output_len: int = 128  # (a) and (c)
    # (b): conversations of up to 3k tokens, where a returning turn's history outweighs a
    # step's fixed costs in its TTFT; 24 users' 6 turns take ~40 s a side at the 8B shape
    num_users: int = 24
    num_turns: int = 6
    message_len: int = 256
    reply_len: int = 256
    # (b) mean think time and first turns' window, in a reply's time alone: about 40% of the
    # users have a turn in flight at once
    think_replies: float = 1.5
    start_window_replies: float = 3.0
    pool_fraction: float = 1 / 3  # (b) GPU KV pool / working set
    # (a) and (c): every request may hold a batch slot, so the KV pool alone decides how many
    # run at once; at 256, 512 requests ran as two waves at the SmolLM2 shape with caching on or
    # off, and TTFT p50 fell on the second wave's wait for the first wave's decode
    max_batch_size: int = 512
    # (c): a SmolLM2-shape run is a third of a second on the GPU, and single runs of it
    # scattered by several percent, more than the 2% the comparison is about
    unique_repeats: int = 5
    block_size: int = 32
    num_swap_blocks: int = 64  # PCIe probe


TINY_PLAN = Plan(
    num_requests=6,
    prefix_len=40,
    unique_len=8,
    output_len=4,
    num_users=3,
    num_turns=3,
    message_len=10,
    reply_len=4,
    # every turn at once, each user's next one at its previous one's end: the tiny run's host
    # hits do not depend on the CPU's timing
    think_replies=0.0,
    start_window_replies=0.0,
    max_batch_size=4,
    unique_repeats=2,
    block_size=8,
    num_swap_blocks=4,
)


def random_ids(rng: np.random.Generator, vocab: int, n: int) -> list[int]:
    return rng.integers(0, vocab, n).tolist()


def engine_for(engine_dir: Path, device: torch.device, **runtime) -> LLMEngine:
    return LLMEngine.from_engine_dir(engine_dir, str(device), weights_loader=HOOK, **runtime)


def shared_prefix(engine: LLMEngine, plan: Plan, vocab: int) -> dict:
    rng = np.random.default_rng(0)
    prefix = random_ids(rng, vocab, plan.prefix_len)
    work = Workload(input_len=plan.prefix_len + plan.unique_len, output_len=plan.output_len)
    warm = [prefix + random_ids(rng, vocab, plan.unique_len)]
    prompts = [prefix + random_ids(rng, vocab, plan.unique_len) for _ in range(plan.num_requests)]
    engine.generate(warm, SamplingParams(max_tokens=plan.output_len, ignore_eos=True))
    before = engine.stats()
    result = offline_throughput(engine, prompts, work, None)
    return result | hit_rates(before, engine.stats())


def unique_prompts(engine: LLMEngine, plan: Plan, vocab: int) -> dict:
    """The median of plan.unique_repeats runs, each of new prompts (a repeat of the same ones
    would hit the cache); the same prompts on both sides."""
    rng = np.random.default_rng(1)
    work = Workload(input_len=plan.unique_len, output_len=plan.output_len)
    runs = []
    for _ in range(plan.unique_repeats):
        prompts = [random_ids(rng, vocab, plan.unique_len) for _ in range(plan.num_requests)]
        before = engine.stats()
        run = offline_throughput(engine, prompts, work, None)
        after = engine.stats()  # the engine thread's split says whether a slow run waited on it
        launches = after["num_launches"] - before["num_launches"]
        steps = after["num_scheduler_steps"]  # the pacer's steps a launch at the run's end
        runs.append(
            run
            | ms_per_launch(after, before)
            | {"num_launches": launches, "num_steps_a_launch": steps}
        )
    each = sorted(round(run["throughput_out_tok_s"]) for run in runs)
    median = median_run(runs, key=itemgetter("throughput_out_tok_s"))
    return median | {"throughput_out_tok_s_each_run": each}


def chat_plan(plan: Plan, reply_s: float) -> ChatPlan:
    """(b)'s users, their think time and start window scaled by a reply's time alone."""
    return ChatPlan(
        num_users=plan.num_users,
        num_turns=plan.num_turns,
        message_len=plan.message_len,
        reply_len=plan.reply_len,
        think_s=plan.think_replies * reply_s,
        start_window_s=plan.start_window_replies * reply_s,
    )


def reply_seconds(engine: LLMEngine, plan: Plan, vocab: int) -> float:
    """A turn's time alone: a message in, a reply out (also warms the engine)."""
    rng = np.random.default_rng(3)
    params = SamplingParams(max_tokens=plan.reply_len, ignore_eos=True)
    prompt = [random_ids(rng, vocab, plan.message_len)]
    engine.generate(prompt, params)
    start = time.perf_counter()
    engine.generate(prompt, params)
    return time.perf_counter() - start


def multi_turn(engine: LLMEngine, chats: ChatPlan, vocab: int) -> dict:
    tier = engine.model_runner.host_tier
    if tier is not None and tier.is_cuda:  # each batched copy timed on the copy stream
        tier.timed = True
    before, start = engine.stats(), time.perf_counter()
    turns = chat(engine, chats, vocab)
    wall_s = time.perf_counter() - start
    after = engine.stats()
    copied_gb = 0.0 if tier is None else tier.num_copied_bytes / 1e9
    batch_rates = [] if tier is None else tier.batch_gb_s()
    costs = engine.model_runner.swap_costs
    return {
        **ttft_summary(turns),
        **active_users(turns),
        "think_s": chats.think_s,
        "start_window_s": chats.start_window_s,
        "wall_s": wall_s,
        "num_kv_blocks": after["num_total_blocks"],
        "num_host_blocks": after["num_host_blocks"],
        "host_copied_gb": copied_gb,
        "host_copy_gb_s_over_run": copied_gb / wall_s,  # the tier's traffic over the whole run
        "host_copy_batches": 0 if tier is None else tier.num_batches,
        # each batched copy's GB/s on the copy stream (CUDA): the link while it is used
        "host_batch_gb_s_p50": percentiles(batch_rates, (50,))["p50"] if batch_rates else 0.0,
        "swap_costs": None if costs is None else dataclasses.asdict(costs),
        **hit_rates(before, after),
    }


def hit_rates(before: dict, after: dict) -> dict:
    queried = after["num_prefix_queried_tokens"] - before["num_prefix_queried_tokens"]
    hits = after["num_prefix_hit_tokens"] - before["num_prefix_hit_tokens"]
    host = (after["num_host_hit_blocks"] - before["num_host_hit_blocks"]) * after["block_size"]
    return {
        "prefix_hit_rate": hits / queried if queried else 0.0,
        "host_hit_rate": host / queried if queried else 0.0,
    }


def pcie_gb_s(engine: LLMEngine, num_blocks: int) -> dict:
    """The host tier's copies of num_blocks blocks timed alone: offload, then load back (over
    what the engine cached: the engine's last use)."""
    runner = engine.model_runner
    tier, device = runner.host_tier, runner.device
    num_blocks = min(num_blocks, tier.pool.shape[0], runner.num_kv_blocks)
    blocks = np.arange(num_blocks)
    slots = np.array([host_slot_ref(s) for s in range(num_blocks)])
    rates = {}
    for name, pairs in (("offload", (blocks, slots)), ("load", (slots, blocks))):
        copies = np.stack(pairs, axis=1)
        tier.copy(copies)  # warm
        sync(device)
        start = time.perf_counter()
        tier.copy(copies)
        sync(device)
        rates[f"{name}_gb_s"] = num_blocks * tier.block_nbytes / (time.perf_counter() - start) / 1e9
    return rates


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_model(name: str, shape: dict, plan: Plan, device, dtype: str, scratch: Path) -> dict:
    vocab = shape["vocab_size"]
    tokenizer = write_tokenizer(vocab, scratch / f"{name}-tokenizer")
    cfg = checkpoint_config(shape, dtype, 1, 1, None)
    chat_len = chat_plan(plan, 0.0).chat_len
    build = BuildSpec(
        max_batch_size=plan.max_batch_size,
        max_input_len=max(plan.prefix_len + plan.unique_len, chat_len),
        max_seq_len=max(plan.prefix_len + plan.unique_len + plan.output_len, chat_len),
        max_num_tokens=8192 if device.type == "cuda" else 64,
        tokens_per_block=plan.block_size,
    )
    engine_dir = write_engine(cfg, build, tokenizer, scratch / name)
    result, chats = {}, None
    for label, caching in (("off", False), ("on", True)):
        engine = engine_for(engine_dir, device, enable_prefix_caching=caching)
        # the load out of garbage collection, as the served engine process has it: a full
        # collection over it is a pause of tens of ms in whichever run it lands (one (c) run
        # at the SmolLM2 shape lasts ~0.35 s)
        try:
            with frozen():
                if chats is None:  # both (b) runs: the same think times, in seconds
                    chats = chat_plan(plan, reply_seconds(engine, plan, vocab))
                result[f"shared_prefix_{label}"] = shared_prefix(engine, plan, vocab)
                result[f"unique_{label}"] = unique_prompts(engine, plan, vocab)
        finally:
            engine.close()
            del engine
            free_memory()
    # (b): the pool a third of the working set, the host tier room for all of it (+ a margin)
    blocks_a_chat = math.ceil(chat_len / plan.block_size)
    working_set = plan.num_users * blocks_a_chat
    num_kv_blocks = max(blocks_a_chat + 1, int(working_set * plan.pool_fraction))
    block_bytes = block_nbytes(cfg, plan.block_size, dtype)
    host_gb = 1.25 * working_set * block_bytes / 2**30
    for label, gb in (("off", 0.0), ("on", host_gb)):
        engine = engine_for(engine_dir, device, num_kv_blocks=num_kv_blocks, host_kv_cache_gb=gb)
        try:
            with frozen():
                result[f"multi_turn_host_{label}"] = multi_turn(engine, chats, vocab)
                if gb:
                    result["pcie"] = pcie_gb_s(engine, plan.num_swap_blocks)
        finally:
            engine.close()
            del engine
            free_memory()
    result["working_set_blocks"] = working_set
    return result


def block_nbytes(cfg: dict, block_size: int, dtype: str) -> int:
    head = cfg.get("head_size") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_heads = cfg["num_key_value_heads"]
    itemsize = getattr(torch, dtype).itemsize
    return cfg["num_hidden_layers"] * 2 * block_size * kv_heads * head * itemsize


def ratio(on: float | None, off: float | None) -> float | None:
    return on / off if on and off else None


def markdown(results: dict) -> str:
    rows = [
        "| model | workload | metric | off | on | on / off |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results["models"].items():
        for workload, key, metric in (
            ("(a) shared 2k prefix", "shared_prefix", "ttft_p50_s"),
            ("(a) shared 2k prefix", "shared_prefix", "throughput_out_tok_s"),
            ("(a) shared 2k prefix", "shared_prefix", "prefix_hit_rate"),
            ("(a) shared 2k prefix", "shared_prefix", "ttft_p99_s"),
            ("(b) multi-turn, host tier", "multi_turn_host", "ttft_p50_s"),
            ("(b) multi-turn, host tier", "multi_turn_host", "ttft_p99_s"),
            ("(b) multi-turn, host tier", "multi_turn_host", "host_hit_rate"),
            ("(b) multi-turn, host tier", "multi_turn_host", "prefix_hit_rate"),
            ("(b) multi-turn, host tier", "multi_turn_host", "first_turn_ttft_p50_s"),
            ("(b) multi-turn, host tier", "multi_turn_host", "active_users_mean"),
            ("(c) unique 128/128", "unique", "throughput_out_tok_s"),
        ):
            off, on = r[f"{key}_off"][metric], r[f"{key}_on"][metric]
            cell = ratio(on, off)
            rows.append(
                f"| {name} | {workload} | {metric} | {off:.4g} | {on:.4g} | "
                f"{'' if cell is None else f'{cell:.3f}'} |"
            )
        each = [
            ", ".join(map(str, r[f"unique_{side}"]["throughput_out_tok_s_each_run"]))
            for side in ("off", "on")
        ]
        rows.append(
            f"| {name} | (c) unique 128/128 | out tok/s, each run | {each[0]} | {each[1]} | |"
        )
        pcie, host = r.get("pcie", {}), r["multi_turn_host_on"]
        rows.append(
            f"| {name} | (b) host tier copies | PCIe GB/s offload / load (64 blocks alone); "
            f"a batched copy's p50; over the run | | {pcie.get('offload_gb_s', 0):.1f} / "
            f"{pcie.get('load_gb_s', 0):.1f}; {host['host_batch_gb_s_p50']:.1f}; "
            f"{host['host_copy_gb_s_over_run']:.2f} ({host['host_copy_batches']} batches) | |"
        )
    return "\n".join(rows)


def write(results: dict, out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_prefix_cache.json").write_text(json.dumps(results, indent=2))
    table = markdown(results)
    (out / "bench_prefix_cache.md").write_text(f"# Prefix caching: on vs off\n\n{table}\n")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true", help="a tiny fp32 model on the CPU")
    parser.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--num-requests", type=int, default=Plan.num_requests)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.tiny:
        device, dtype, models = torch.device("cpu"), "float32", {"tiny": TINY}
        plan = replace(TINY_PLAN, num_requests=min(args.num_requests, TINY_PLAN.num_requests))
    else:
        device, dtype = torch.device("cuda"), "bfloat16"
        models = {name: SHAPES[name] for name in args.models}
        plan = replace(Plan(), num_requests=args.num_requests)
    results = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "plan": plan.__dict__,
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench_prefix_cache_") as tmp:
        for name, shape in models.items():
            start = time.perf_counter()
            results["models"][name] = run_model(name, shape, plan, device, dtype, Path(tmp))
            results["models"][name]["wall_s"] = time.perf_counter() - start
            table = write(results, args.out)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
