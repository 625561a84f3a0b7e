"""Tensor-parallel collectives on this host's GPUs, in one spawned process a rank:

1. all-reduce latency and bus bandwidth per message size (bf16): NCCL eager, NCCL replayed from a
   CUDA graph, PyTorch's symmetric-memory one-shot and two-shot (eager and graphed) where this
   torch has them, and the engine's choice (TensorParallel after use_symm_mem("auto"));
2. a model shape's logits at TP=N against TP=1 (the same synthetic weights, one prompt);
3. a TP=N batch-1 decode step replayed from a CUDA graph under the profiler: the share of its
   GPU time in communication kernels.

    python -m scripts.bench_all_reduce --out DIR [--tiny]   (--tiny: CPU, gloo)
Writes bench_all_reduce.json. Needs torch (+ the pipeline package), not hydra/modelopt.
"""

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from packaging.version import Version

from pipeline.engine.engine_config import ModelConfig
from pipeline.engine.execution.scoring import prompt_logits
from pipeline.engine.layers.batch_metadata import BatchMetadata
from pipeline.engine.models.llama import LlamaForCausalLM
from pipeline.engine.parallel.mapping import Mapping
from pipeline.engine.parallel.tensor_parallel import TensorParallel
from pipeline.synthetic.shapes import LLAMA_8B, TINY
from pipeline.synthetic.weights import SyntheticWeights, checkpoint_config

SIZES = [16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
COMM_KERNELS = ("nccl", "all_reduce", "allreduce", "one_shot", "two_shot", "symm", "allgather")


def _timed(fn, device, iters: int) -> float:
    """us per call, eager."""
    for _ in range(3):
        fn()
    dist.barrier()
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - start) / iters * 1e6
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / iters * 1e3


def _graphed(fn, per_graph: int, replays: int) -> float:
    """us per call, replayed from a graph of per_graph calls."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            fn()
    graph.replay()
    dist.barrier()
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / (replays * per_graph) * 1e3


def _try(fn) -> float | str:
    try:
        return round(fn(), 2)
    except Exception as exc:  # noqa: BLE001 - recorded in the table instead
        return f"error: {type(exc).__name__}: {str(exc)[:160]}"


def all_reduce_table(tp: TensorParallel, device: torch.device, sizes: list[int]) -> list[dict]:
    world = dist.get_world_size()
    group_name = dist.group.WORLD.group_name
    is_cuda = device.type == "cuda"
    symm = None
    if is_cuda:
        from torch.distributed import _symmetric_memory as symm_mem

        if Version(torch.__version__.split("+")[0]) < Version("2.9"):  # since: every group
            symm_mem.enable_symm_mem_for_group(group_name)
        try:
            symm = symm_mem.empty(max(sizes) // 2, dtype=torch.bfloat16, device=device)
            symm_mem.rendezvous(symm, group_name)
        except Exception as exc:  # noqa: BLE001
            symm = f"error: {exc!r}"[:200]
    return [_size_row(nbytes, tp, device, symm, group_name, world) for nbytes in sizes]


def _size_row(nbytes: int, tp: TensorParallel, device, symm, group_name: str, world: int) -> dict:
    x = torch.randn(nbytes // 2, device=device).to(torch.bfloat16)
    iters = 50 if nbytes <= 4 << 20 else 10
    row = {
        "bytes": nbytes,
        "nccl_eager_us": _try(lambda: _timed(lambda: dist.all_reduce(x), device, iters)),
    }
    if device.type == "cuda":
        row["nccl_graph_us"] = _try(lambda: _graphed(lambda: dist.all_reduce(x), 10, 5))
        if isinstance(symm, torch.Tensor):
            ops = torch.ops.symm_mem
            view = symm[: x.numel()]

            def one():
                return ops.one_shot_all_reduce_copy(view, x, "sum", group_name)

            def two():
                view.copy_(x)
                return ops.two_shot_all_reduce_(view, "sum", group_name)

            row["symm_one_shot_eager_us"] = _try(lambda: _timed(one, device, iters))
            row["symm_one_shot_graph_us"] = _try(lambda: _graphed(one, 10, 5))
            row["symm_two_shot_graph_us"] = _try(lambda: _graphed(two, 10, 5))
        row["engine_graph_us"] = _try(lambda: _graphed(lambda: tp.all_reduce(x), 10, 5))
    best = min(v for k, v in row.items() if k.endswith("_us") and isinstance(v, float))
    row["best_bus_gb_s"] = round(nbytes * 2 * (world - 1) / world / best / 1e3, 1)
    return row


def _model(cfg: dict, mapping: Mapping, tp: TensorParallel, device) -> LlamaForCausalLM:
    m = ModelConfig.from_pretrained_config(cfg, "synthetic")
    weights = SyntheticWeights(cfg, mapping.rank, device)
    dtype = getattr(torch, cfg["dtype"])
    return LlamaForCausalLM(m, weights, dtype, device, 512, mapping, tp)


def _logits(model, cfg, mapping, ids) -> torch.Tensor:
    _, kv = mapping.local_heads(cfg["num_attention_heads"], cfg["num_key_value_heads"])
    layers = len(model.layers)
    return prompt_logits(model, ids, layers, kv, cfg["head_size"], model.dtype)[0].float()


def _whole_logits(shape, dtype: str, device, ids) -> torch.Tensor:
    cfg = checkpoint_config(shape, dtype, 1, 1, None)
    with torch.inference_mode():
        logits = _logits(_model(cfg, Mapping(), TensorParallel(), device), cfg, Mapping(), ids)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return logits


def _diff(a: torch.Tensor, b: torch.Tensor) -> dict:
    diff = (a - b).abs()
    return {
        "max_abs_diff": round(diff.max().item(), 4),
        "mean_abs_diff": round(diff.mean().item(), 5),
        "relative_l2": round(((a - b).norm() / b.norm()).item(), 5),
        "argmax_agreement": round((a.argmax(-1) == b.argmax(-1)).float().mean().item(), 4),
    }


def compare_logits(shape, dtype, tp, device, seed: int = 0) -> dict | None:
    """TP=world vs TP=1 logits of one prompt (rank 0 builds both), and, for a half-precision
    dtype, both against a float32 TP=1 model of the same weights: the tolerance is what the
    dtype itself moves the logits (TP=world's distance to float32 within 1.5x TP=1's)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    cfg = checkpoint_config(shape, dtype, world, 1, None)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, shape["vocab_size"], (1, 128), generator=g).to(device)
    with torch.inference_mode():
        split = _logits(
            _model(cfg, Mapping(world, 1, rank), tp, device), cfg, Mapping(world, 1, rank), ids
        )
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if rank != 0:
        return None
    whole = _whole_logits(shape, dtype, device, ids)
    result = {"positions": ids.shape[1], "logits_std": round(whole.std().item(), 4)}
    result |= _diff(split, whole)
    if dtype != "float32":
        exact = _whole_logits(shape, "float32", device, ids)
        result["tp1_vs_float32"] = _diff(whole, exact)
        result["tp_vs_float32"] = _diff(split, exact)
        result["within_tolerance"] = (
            result["tp_vs_float32"]["relative_l2"] <= 1.5 * result["tp1_vs_float32"]["relative_l2"]
        )
    return result


def decode_comm_share(shape, dtype, tp, device, context: int = 128) -> dict:
    """A TP=world batch-1 decode step of `shape` in a CUDA graph, profiled."""
    from torch.profiler import ProfilerActivity, profile

    world, rank = dist.get_world_size(), dist.get_rank()
    cfg = checkpoint_config(shape, dtype, world, 1, None)
    mapping = Mapping(world, 1, rank)
    model = _model(cfg, mapping, tp, device)
    _, kv = mapping.local_heads(cfg["num_attention_heads"], cfg["num_key_value_heads"])
    block = 32
    num_blocks = context // block + 1
    cache = torch.zeros(
        len(model.layers),
        2,
        num_blocks,
        block,
        kv,
        cfg["head_size"],
        dtype=model.dtype,
        device=device,
    )
    rows = torch.tensor([[context - 1], [context - 1], [context]], device=device)
    tables = torch.arange(num_blocks, device=device).view(1, -1)
    meta = BatchMetadata.for_decode(rows, tables, torch.tensor([0, 1], device=device))
    ids = torch.zeros(1, dtype=torch.int64, device=device)
    with torch.inference_mode():
        step = lambda: model.compute_logits(model(ids, meta, cache))  # noqa: E731
        step()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        step_us = _timed(graph.replay, device, 50)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                graph.replay()
            torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.device_time for e in kernels) / 20
    comm = (
        sum(e.device_time for e in kernels if any(k in e.name.lower() for k in COMM_KERNELS)) / 20
    )
    names = sorted({e.name[:60] for e in kernels if any(k in e.name.lower() for k in COMM_KERNELS)})
    return {
        "step_us": round(step_us, 1),
        "kernel_us": round(total, 1),
        "comm_kernel_us": round(comm, 1),
        "comm_share_of_step": round(comm / step_us, 3),
        "comm_kernels": names[:6],
    }


def _rank_main(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    is_cuda = not args.tiny
    device = torch.device("cuda", rank) if is_cuda else torch.device("cpu")
    if is_cuda:
        torch.cuda.set_device(device)
    store = dist.TCPStore(
        "127.0.0.1", port, world, is_master=rank == 0, timeout=timedelta(seconds=300)
    )
    dist.init_process_group("nccl" if is_cuda else "gloo", store=store, rank=rank, world_size=world)
    tp = TensorParallel(world, rank, dist.group.WORLD)
    choice = tp.use_symm_mem("auto", torch.bfloat16, device) if is_cuda else "gloo"
    shape = TINY if args.tiny else LLAMA_8B
    dtype = "float32" if args.tiny else "bfloat16"
    result = {"world_size": world, "engine_all_reduce": choice}
    sizes = [16 << 10, 64 << 10] if args.tiny else SIZES
    result["all_reduce"] = all_reduce_table(tp, device, sizes)
    result["logits_tp_vs_tp1"] = compare_logits(shape, dtype, tp, device)
    torch.cuda.empty_cache() if is_cuda else None
    if is_cuda:
        result["decode_step_comm"] = decode_comm_share(shape, dtype, tp, device)
    if rank == 0:
        (Path(args.out) / "bench_all_reduce.json").write_text(json.dumps(result, indent=2))
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiny", action="store_true", help="CPU, gloo, a tiny shape")
    args = parser.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    world = 2 if args.tiny else torch.cuda.device_count()
    port = 29500 + os.getpid() % 1000
    mp.spawn(_rank_main, args=(world, port, args), nprocs=world, join=True)
    print(json.dumps(json.loads((Path(args.out) / "bench_all_reduce.json").read_text()), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
