"""Prefix caching's host cost, with no model: the block manager's calls of an offline run of
unique prompts, caching off and on, timed phase by phase on any machine (CPU included).

    python -m scripts.bench_prefix_bookkeeping [--requests 512] [--prompt-len 128] ...

The calls are the scheduler's, in its order, for --requests prompts admitted at once:
- admit: find_prefix, is_being_computed, swaps_in and grow_from_prefix (caching off: grow);
- prefill: computes (the first block the prompt fills, noted for requests admitted beside it)
  and the launch's cache_blocks;
- decode: a token a request a step, grow() as blocks fill (blocks are cached at free);
- free: free() (caching on: the blocks decode filled are cached, kept evictable).
Each phase is the best of --repeats, the variants interleaved (the machine's other load shifts
them alike). Prints each phase's ms caching off and on, and what caching adds a request;
--compare: also with other prefix_cache.py files (an earlier version's: the rest is this tree's).
"""

import argparse
import importlib.util
import json
import time
from pathlib import Path

import numpy as np

from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.prefix_cache import PrefixCachingBlockManager
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.request.sampling_params import SamplingParams

PHASES = ("admit", "prefill", "decode", "free")


def run(args: argparse.Namespace, kind: type[BlockManager], prompts: list) -> dict[str, float]:
    """Seconds of each phase's block-manager calls with this block manager."""
    blocks_a_request = -(-(args.prompt_len + args.output_len) // args.block_size)
    manager = kind(blocks_a_request * len(prompts), args.block_size, len(prompts), blocks_a_request)
    caching = manager.caches_prefixes
    params = SamplingParams(max_tokens=args.output_len, ignore_eos=True)
    seqs = [Sequence(str(i), p, params, ()) for i, p in enumerate(prompts)]
    seconds = {}
    start = time.perf_counter()
    for seq in seqs:
        if caching:
            hit = manager.find_prefix(seq)
            assert not manager.is_being_computed(seq, hit) and not manager.swaps_in(hit)
            assert manager.grow_from_prefix(seq, args.prompt_len, hit)
        else:
            assert manager.grow(seq, args.prompt_len)
    seconds["admit"] = time.perf_counter() - start
    start = time.perf_counter()
    if caching:
        for seq in seqs:
            manager.computes(seq, args.prompt_len)
    for seq in seqs:
        seq.num_computed_tokens = args.prompt_len
    if caching:
        manager.cache_blocks(seqs)
    seconds["prefill"] = time.perf_counter() - start
    decode = 0.0
    for token in range(args.output_len - 1):  # the host's part between two decode launches
        for seq in seqs:
            seq.token_ids.append(token)
        start = time.perf_counter()
        for seq in seqs:
            seq.num_computed_tokens += 1
            manager.grow(seq, seq.num_computed_tokens + 1)
        decode += time.perf_counter() - start
    seconds["decode"] = decode
    start = time.perf_counter()
    for seq in seqs:
        manager.free(seq)
    seconds["free"] = time.perf_counter() - start
    return seconds


def block_managers(compare: list[Path]) -> dict[str, type[BlockManager]]:
    """Off, on, and on with each of the other prefix_cache.py files."""
    kinds = {"off": BlockManager, "on": PrefixCachingBlockManager}
    for i, path in enumerate(compare):
        spec = importlib.util.spec_from_file_location(f"compared_prefix_cache_{i}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kinds[f"on ({path})"] = module.PrefixCachingBlockManager
    return kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=512)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--block-size", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--compare", type=Path, nargs="*", default=[], help="prefix_cache.py")
    args = parser.parse_args(argv)
    kinds = block_managers(args.compare)
    rng = np.random.default_rng(0)
    prompts = rng.integers(0, 32000, (args.requests, args.prompt_len)).tolist()
    for block_size in args.block_size:
        args.block_size = block_size
        best = {name: dict.fromkeys(PHASES, float("inf")) for name in kinds}
        for _ in range(args.repeats):
            for name, kind in kinds.items():
                for phase, seconds in run(args, kind, prompts).items():
                    best[name][phase] = min(best[name][phase], seconds)
        result = {"block_size": block_size}
        for name, phases in best.items():
            result[name] = {phase: round(1e3 * s, 2) for phase, s in phases.items()}
            total = sum(phases.values())
            result[name]["total"] = round(1e3 * total, 2)
            if name != "off":
                added = total - sum(best["off"].values())
                result[name]["added_us_a_request"] = round(1e6 * added / args.requests, 2)
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
