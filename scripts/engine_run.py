"""One engine dir measured in this process: batch-1 decode, then an offline run of every request
at once. What scripts.bench_engine reports for the engine, and what scripts.bench_ab runs in a
fresh process per source tree, so this module imports only the engine and the bench's metrics
(an older tree's `pipeline` must serve it)."""

import gc
import statistics
import time
from dataclasses import dataclass

import torch

from pipeline.bench.metrics import percentiles
from pipeline.engine import LLMEngine, SamplingParams
from pipeline.engine.layers.linear import kernel_counts


@dataclass(frozen=True)
class Workload:
    num_requests: int = 512
    input_len: int = 128
    output_len: int = 128
    # engine build limit (CUDA graphs for 1, 2, 4, ... up to it): every request in flight at
    # once, as trtllm-bench sizes it; 256 left half the requests queued behind the first half
    max_batch_size: int = 512
    hf_batch: int = 64  # HF static batching: requests per generate() call
    hf_num_batches: int = 2  # HF static batching: calls measured (a sample of the workload)
    hf_cb_requests: int = 256  # HF generate_batch: requests
    hf_static_cache: bool = True  # also time HF generate with a static (compiled) cache
    hf_cb_warmup: bool = True  # generate_batch's own warm-up (CUDA graph capture)
    hf_reserve_s: float = 240  # run-time left for what follows an optional HF baseline
    copy_bytes: int = 2 << 30


TINY_WORKLOAD = Workload(
    num_requests=6,
    input_len=12,
    output_len=6,
    max_batch_size=4,
    hf_batch=3,
    hf_num_batches=1,
    hf_static_cache=False,
    hf_cb_warmup=False,
    hf_cb_requests=0,
    copy_bytes=8 << 20,
)  # CPU generate_batch: ~20 s


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prompts_for(vocab_size: int, work, count: int, seed: int = 0) -> list[list[int]]:
    """`count` prompts of work.input_len random token ids (seeded: both sides of a comparison
    get the same ones)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (count, work.input_len), generator=g).tolist()


def free_memory() -> None:
    torch._dynamo.reset()  # compiled HF graphs (and their CUDA graph pools) hold the weights
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def median_run(runs: list, key):
    """The run whose key(run) is the median (the upper one of an even count): a whole run, so
    its other numbers are that run's too."""
    return sorted(runs, key=key)[len(runs) // 2]


def offline_throughput(
    engine: LLMEngine, prompts: list[list[int]], work: Workload, cap_s: float | None
) -> dict:
    """All prompts at t=0, stepped to the end (generate()'s loop); past cap_s the rest is
    aborted and no rate reported, as a partial run is not the workload."""
    params = SamplingParams(max_tokens=work.output_len, ignore_eos=True)
    start = time.perf_counter()
    ids = [engine.add_request(p, params) for p in prompts]
    ttfts, num_out, is_capped = {}, 0, False
    while engine.has_unfinished():
        if cap_s is not None and not is_capped and time.perf_counter() - start > cap_s:
            is_capped = True
            for request_id in ids:
                engine.abort(request_id)  # False for the finished ones: nothing to do
        for delta in engine.step():
            num_out += len(delta.token_ids)
            if delta.token_ids:
                ttfts.setdefault(delta.request_id, time.perf_counter() - start)
    wall_s = time.perf_counter() - start
    if is_capped:
        return {
            "throughput_out_tok_s": None,
            "throughput_error": f"stopped at the {cap_s:.0f} s cap: {num_out} of "
            f"{len(prompts) * work.output_len} tokens ({num_out / wall_s:.0f} tok/s so far)",
        }
    ttft = percentiles(list(ttfts.values()), (50, 99))
    return {
        "throughput_out_tok_s": num_out / wall_s,
        "throughput_total_tok_s": (num_out + len(prompts) * work.input_len) / wall_s,
        "throughput_wall_s": wall_s,
        "num_requests": len(prompts),
        "num_out_tokens": num_out,
        "ttft_p50_s": ttft["p50"],
        "ttft_p99_s": ttft["p99"],
    }


def measure_engine(
    engine_dir,
    device: torch.device,
    dtype: str,
    work: Workload,
    vocab_size: int,
    throughput: bool = True,
    throughput_cap_s: float | None = None,
    runtime: dict | None = None,
) -> dict:
    """Load the engine dir; batch-1 decode tok/s (median of 3) and its greedy tokens; with
    `throughput`, the offline run of work.num_requests prompts."""
    start = time.perf_counter()
    engine = LLMEngine.from_engine_dir(engine_dir, device=str(device), dtype=dtype, **runtime or {})
    load_s = time.perf_counter() - start
    params = SamplingParams(max_tokens=work.output_len, ignore_eos=True)
    start = time.perf_counter()
    engine.generate(prompts_for(vocab_size, work, 4, seed=1), params)
    warmup_s = time.perf_counter() - start
    decode_tok_s, tokens = [], []
    for _ in range(3):
        out = engine.generate(prompts_for(vocab_size, work, 1), params)[0]
        tokens = out.token_ids
        # the first token's time is that of the launch's first delta, which carries one token
        # for each step of a launch (num_scheduler_steps)
        first = min(engine.num_scheduler_steps, len(tokens))
        decode_tok_s.append((len(tokens) - first) / (out.finish_time_s - out.first_token_time_s))
    result = {
        "load_s": load_s,
        "warmup_s": warmup_s,
        "decode_tok_s": statistics.median(decode_tok_s),
        "num_scheduler_steps": engine.num_scheduler_steps,
        "greedy_tokens": tokens,
        "kernels": kernel_counts(engine.model_runner.model),
    }
    if throughput:
        prompts = prompts_for(vocab_size, work, work.num_requests, seed=2)
        sync(device)  # each step syncs on its sampled tokens, so the last one ends the run
        result |= offline_throughput(engine, prompts, work, throughput_cap_s)
    stats = engine.stats()
    del engine
    free_memory()
    return result | {
        "num_kv_blocks": stats["num_total_blocks"],
        "num_preemptions": stats["num_preemptions"],
        "cuda_graph_batch_sizes": stats["cuda_graph_batch_sizes"],
    }
