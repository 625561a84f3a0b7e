"""This rank's process groups, made the same way on every rank (torch.distributed needs each
group created by all ranks, in the same order): the CPU (gloo) group for launch metadata, the
tensor-parallel group of each stage, and the stage links (NCCL on CUDA, gloo on the CPU)."""

import logging
import threading
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from pipeline.engine.execution.launch_channel import STOP, LaunchChannel
from pipeline.engine.execution.launch_schedule import MICRO_BATCHES_PER_STAGE
from pipeline.engine.parallel.mapping import Mapping, check_devices
from pipeline.engine.parallel.stage_link import StageLink
from pipeline.engine.parallel.tensor_parallel import TensorParallel
from pipeline.engine.parallel.workers import START_TIMEOUT_S, WorkerProcesses, joined_key
from pipeline.errors import ConfigError

logger = logging.getLogger(__name__)
ABORT_WAIT_S = 15.0


@dataclass
class RankGroups:
    mapping: Mapping
    tp: TensorParallel
    link: StageLink | None
    channel: LaunchChannel
    cpu_group: dist.ProcessGroup
    all_reduce: str  # what the tensor-parallel all-reduce runs, for the log
    is_cuda: bool

    def agree_min(self, value: int) -> int:
        """The smallest value over all ranks (a CPU collective: also a barrier)."""
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.cpu_group)
        return int(t.item())

    def close(self, peers_alive: bool = True) -> None:
        """Every rank, after the STOP command: leave the process groups through
        destroy_process_group, as torch.distributed asks of a process before it exits (else
        NCCL warns at exit that it was not called). Gloo groups are destroyed, so a process (a
        test) can start another multi-rank engine afterwards. On CUDA, NCCL's destroy finalizes
        each communicator with its peers, so every rank destroys at the same time, nothing in
        flight (the caller dropped the CUDA graphs that captured collectives: with them alive
        NCCL's teardown hung on 2x H100/H200); a peer that is gone (peers_alive=False) or a
        destroy that does not return in ABORT_WAIT_S gets NCCL's abort instead, which frees the
        communicators at once."""
        if not dist.is_initialized():
            return
        if not self.is_cuda:
            dist.destroy_process_group()
            return
        if peers_alive:
            _bounded(_synchronize_and_destroy, "nccl-destroy")
        if not dist.is_initialized():
            return
        logger.warning("engine: aborting the NCCL groups (a peer rank is gone or stalled)")
        if not _bounded(dist.distributed_c10d._abort_process_group, "nccl-abort"):
            logger.warning(
                "engine: aborting the NCCL groups did not return in %.0f s; they are freed when "
                "this process exits (a new multi-rank engine needs a new process)",
                ABORT_WAIT_S,
            )


def _synchronize_and_destroy() -> None:
    torch.cuda.synchronize()  # nothing in flight (a stalled peer's collective: bounded too)
    dist.destroy_process_group()


def _bounded(fn, name: str) -> bool:
    """Run fn on a thread for at most ABORT_WAIT_S: a teardown that never returns would hold the
    caller (a Triton model's finalize, a benchmark) for ever. True when it returned."""
    thread = threading.Thread(target=fn, name=name, daemon=True)
    thread.start()
    thread.join(ABORT_WAIT_S)
    return not thread.is_alive()


def init_rank_groups(
    mapping: Mapping,
    device: torch.device,
    store: dist.Store,
    timeout_s: float,
    hidden_size: int,
    vocab_size: int,
    dtype: torch.dtype,
    all_reduce: str,
) -> RankGroups:
    if dist.is_initialized():
        raise ConfigError(
            "engine: this process already runs a multi-rank engine (or another "
            "torch.distributed job); close it first (LLMEngine.close())"
        )
    is_cuda = device.type == "cuda"
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(
        "cpu:gloo,cuda:nccl" if is_cuda else "gloo",
        store=store,
        rank=mapping.rank,
        world_size=mapping.world_size,
        timeout=timeout,
    )
    backend = "nccl" if is_cuda else "gloo"
    cpu_group = dist.new_group(backend="gloo", timeout=timeout)
    tp_group = None
    if mapping.tp_size > 1:
        for stage in range(mapping.pp_size):
            group = dist.new_group(mapping.stage_ranks(stage), backend=backend, timeout=timeout)
            if stage == mapping.pp_rank:
                tp_group = group
    tp = TensorParallel(
        mapping.tp_size, mapping.tp_rank, tp_group, src_rank=mapping.stage_ranks(mapping.pp_rank)[0]
    )
    link = None
    if mapping.pp_size > 1:
        link = _stage_link(mapping, backend, timeout, hidden_size, vocab_size, dtype, device)
    return RankGroups(
        mapping=mapping,
        tp=tp,
        link=link,
        channel=LaunchChannel(cpu_group, MICRO_BATCHES_PER_STAGE * mapping.pp_size, device),
        cpu_group=cpu_group,
        all_reduce=tp.use_symm_mem(all_reduce, dtype, device),
        is_cuda=is_cuda,
    )


def _stage_link(mapping, backend, timeout, hidden_size, vocab_size, dtype, device) -> StageLink:
    prev = next_ = logits = None
    tp, pp, rank = mapping.tp_size, mapping.pp_size, mapping.rank
    for t in range(tp):
        for stage in range(pp - 1):
            a, b = stage * tp + t, (stage + 1) * tp + t
            group = dist.new_group([a, b], backend=backend, timeout=timeout)
            if rank == a:
                next_ = (b, group)
            if rank == b:
                prev = (a, group)
    last = (pp - 1) * tp  # the last stage's first rank sends the logits to rank 0
    group = dist.new_group([0, last], backend=backend, timeout=timeout)
    if rank == 0:
        logits = (last, group)
    elif rank == last:
        logits = (0, group)
    return StageLink(hidden_size, vocab_size, dtype, device, prev, next_, logits)


def join_ranks(
    config, mapping: Mapping, device: torch.device, store: dist.Store | None
) -> tuple[RankGroups, WorkerProcesses | None]:
    """Rank 0: start the workers (a store of its own for them to meet at); a worker (store
    given): say it is here. Then every rank makes its process groups."""
    timeout_s = config.collective_timeout_s
    workers = None
    if mapping.is_driver:
        visible = torch.cuda.device_count() if device.type == "cuda" else 0
        check_devices(mapping.world_size, device.type, device.index or 0, visible)
        store = dist.TCPStore(
            "127.0.0.1",
            0,
            mapping.world_size,
            is_master=True,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
        spec = {
            "config": config,
            "world_size": mapping.world_size,
            "port": store.port,
            "num_threads": torch.get_num_threads(),
        }
        workers = WorkerProcesses(spec, mapping.world_size, store, device.type == "cuda")
        try:
            workers.wait_joined(max(timeout_s, START_TIMEOUT_S))
        except BaseException:
            workers.kill()
            raise
    else:
        store.set(joined_key(mapping.rank), "1")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    m = config.model
    groups = init_rank_groups(
        mapping,
        device,
        store,
        timeout_s,
        m.hidden_size,
        m.vocab_size,
        config.dtype,
        config.all_reduce,
    )
    return groups, workers


def stop_ranks(ranks: RankGroups, workers: WorkerProcesses | None) -> None:
    """Rank 0 (with its workers): stop the worker ranks; every rank: leave the process groups
    (a worker after STOP, as rank 0 does, at the same time)."""
    peers_alive = workers is None or workers.failure is None
    if workers is not None and peers_alive:
        workers.expect_exit()  # they leave the groups and exit as rank 0 does
        try:
            ranks.channel.send(STOP, [], None)
        except Exception:  # noqa: BLE001 - a broken group: the workers are killed below
            logger.exception("engine: could not tell the worker ranks to stop")
            peers_alive = False
    ranks.close(peers_alive)
    if workers is not None:
        workers.stop()
