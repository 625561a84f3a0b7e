"""Prefix caching's host cost, with no model: the scheduler and block manager driven through the
launches of an offline run, caching off and on, on any machine (CPU included).

    python -m scripts.bench_prefix_bookkeeping [--requests 512] [--prompt-len 128] ...

Each launch is scheduled, its sequences advanced (update_from_launch) and every sampling row
given a token (update_from_output), as the engine does around a model's forward; what caching
adds is the block names (a hash chain a block), the name lookups at admission and the named
blocks' reference counts and eviction. Prints the host ms of the whole run and a request's share,
caching off and on, and their ratio; --evict: a pool with room for half the requests, so named
blocks are evicted as new ones are taken.
"""

import argparse
import json
import time

import numpy as np
import torch

from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.prefix_cache import PrefixCachingBlockManager
from pipeline.engine.scheduling.sampled_tokens import SampledTokens
from pipeline.engine.scheduling.scheduler import Scheduler
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.request.sampling_params import SamplingParams

# what the scheduler calls on a block manager (prefix caching's calls included)
CALLS = (
    "grow",
    "free",
    "take_copies",
    "find_prefix",
    "is_being_computed",
    "swaps_in",
    "grow_from_prefix",
    "computes",
    "cache_launched",
)


class CallTimer:
    """Host seconds spent in the block manager's calls (the outermost call of a nest)."""

    def __init__(self, blocks: BlockManager):
        self.seconds, self._depth = 0.0, 0
        for name in CALLS:
            if hasattr(blocks, name):
                setattr(blocks, name, self._timed(getattr(blocks, name)))

    def _timed(self, call):
        def timed(*args, **kwargs):
            self._depth += 1
            start = time.process_time()
            try:
                return call(*args, **kwargs)
            finally:
                self._depth -= 1
                if not self._depth:
                    self.seconds += time.process_time() - start

        return timed


def run(args: argparse.Namespace, caching: bool, seed: int) -> tuple[float, float]:
    """CPU seconds of one offline run's scheduling, and of its block manager's part."""
    rng = np.random.default_rng(seed)
    blocks_a_request = -(-(args.prompt_len + args.output_len) // args.block_size)
    num_blocks = blocks_a_request * (args.requests // 2 if args.evict else args.requests)
    kind = PrefixCachingBlockManager if caching else BlockManager
    blocks = kind(num_blocks, args.block_size, args.max_batch, blocks_a_request)
    timer = CallTimer(blocks)
    scheduler = Scheduler(blocks, args.max_batch, args.max_num_tokens, "max_utilization", True)
    params = SamplingParams(max_tokens=args.output_len, ignore_eos=True)
    prompts = rng.integers(0, 32000, (args.requests, args.prompt_len)).tolist()
    seqs = [Sequence(str(i), p, params, ()) for i, p in enumerate(prompts)]
    sampled_ids = torch.from_numpy(rng.integers(0, 32000, 4 * args.max_batch))
    start = time.process_time()
    for seq in seqs:
        scheduler.add(seq)
    while scheduler.has_unfinished():
        batch = scheduler.schedule()
        rows = [
            seq
            for seq, n in zip(batch.seqs, batch.num_tokens.tolist(), strict=True)
            if seq.num_computed_tokens + n >= len(seq.token_ids)
        ]
        tokens = sampled_ids[: len(rows)]
        sampled = SampledTokens(rows, tokens, None, 1)
        scheduler.update_from_launch(batch, sampled)
        scheduler.update_from_output(sampled, tokens.tolist())
    return time.process_time() - start, timer.seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=512)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--block-size", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--max-num-tokens", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--evict", action="store_true")
    args = parser.parse_args(argv)
    results = []
    for block_size in args.block_size:
        args.block_size = block_size
        # interleaved and the best of each: the machine's other load shifts both alike
        times = {False: [], True: []}
        for repeat in range(args.repeats):
            for caching in (False, True):
                times[caching].append(run(args, caching, repeat))
        (off, off_blocks), (on, on_blocks) = min(times[False]), min(times[True])
        results.append(
            {
                "block_size": block_size,
                "evict": args.evict,
                "run_ms_off": 1e3 * off,
                "run_ms_on": 1e3 * on,
                "blocks_ms_off": 1e3 * off_blocks,
                "blocks_ms_on": 1e3 * on_blocks,
                "blocks_added_us_a_request": 1e6 * (on_blocks - off_blocks) / args.requests,
            }
        )
        print(json.dumps(results[-1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
