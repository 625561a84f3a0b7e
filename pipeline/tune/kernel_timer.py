"""GPU time of one kernel launch (its wrapper's whole call), from CUDA events around a replayed
CUDA graph of many launches: the host's launch cost stays out, and so does the one-off compile
and first-touch of a warm-up call. With flush_l2, each launch follows a write of twice the L2
size (as in an engine step, weights come from HBM); a graph of the flushes alone is timed the
same way and taken off."""

from collections.abc import Callable

import torch


def _graph(fn: Callable[[], object], count: int, stream: torch.cuda.Stream) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(count):
            fn()
    return graph


def _replay_ms(graph: torch.cuda.CUDAGraph, count: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / count


class KernelTimer:
    def __init__(self, device: torch.device, launches: int, flush_l2: bool) -> None:
        self.device = device
        self.launches = launches
        self.stream = torch.cuda.Stream(device)
        self.flush = None
        if flush_l2:
            l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
            self.flush = torch.empty(2 * l2_bytes // 4, dtype=torch.int32, device=device)

    def _step(self, fn: Callable[[], object]) -> Callable[[], None]:
        def step() -> None:
            if self.flush is not None:
                self.flush.zero_()
            fn()

        return step

    def time_ms(self, fn: Callable[[], object], repeats: int) -> list[float]:
        """`repeats` samples of ms per launch of `fn` (compiled by a first call here)."""
        with torch.cuda.stream(self.stream):
            fn()  # compile, load, allocate: outside the graph
        torch.cuda.synchronize(self.device)
        graph = _graph(self._step(fn), self.launches, self.stream)
        flush_graph = None
        if self.flush is not None:
            flush_graph = _graph(self.flush.zero_, self.launches, self.stream)
        graph.replay()  # warm-up replay
        samples = []
        for _ in range(repeats):
            ms = _replay_ms(graph, self.launches)
            if flush_graph is not None:
                ms -= _replay_ms(flush_graph, self.launches)
            samples.append(max(ms, 1e-6))  # a flush-dominated sample can dip below zero
        return samples
