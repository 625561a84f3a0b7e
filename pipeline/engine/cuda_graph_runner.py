"""Decode steps replayed from CUDA graphs, one graph per padded batch size (1, 2, 4, ..., max).

Graph inputs live in static buffers that replay() refills. Rows past the real batch are
padding: they read one slot of a scratch block that no sequence owns, and write their K/V there.
"""

import torch
from torch import nn

from pipeline.engine.batch_metadata import BatchMetadata


def capture_batch_sizes(max_batch_size: int) -> list[int]:
    sizes = [1]
    while sizes[-1] * 2 < max_batch_size:
        sizes.append(sizes[-1] * 2)
    return sorted(set(sizes) | {max_batch_size})


class CudaGraphRunner:
    """Owned by the model runner; holds the graphs, their memory pool and static buffers."""

    def __init__(
        self,
        model: nn.Module,
        kv_cache: torch.Tensor,
        max_batch_size: int,
        max_blocks_per_seq: int,
        scratch_block: int,
    ):
        self.model = model  # possibly torch.compile'd by the model runner
        self.kv_cache = kv_cache
        self.batch_sizes = capture_batch_sizes(max_batch_size)
        device = kv_cache.device
        block_size = kv_cache.shape[3]
        self.scratch_slot = scratch_block * block_size
        self.input_ids = torch.zeros(max_batch_size, dtype=torch.int64, device=device)
        self.positions = torch.zeros(max_batch_size, dtype=torch.int64, device=device)
        self.slot_mapping = torch.full(
            (max_batch_size,), self.scratch_slot, dtype=torch.int64, device=device
        )
        self.context_lens = torch.ones(max_batch_size, dtype=torch.int32, device=device)
        self.block_tables = torch.full(
            (max_batch_size, max_blocks_per_seq), scratch_block, dtype=torch.int32, device=device
        )
        # unread by decode attention; the metadata carries it for the model's other paths
        self.query_start = torch.arange(max_batch_size + 1, dtype=torch.int32, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}  # [bs, vocab] graph outputs

    def _step(self, batch_size: int) -> torch.Tensor:
        # the captured work: static buffers [:bs] -> logits [bs, vocab]
        meta = BatchMetadata(
            positions=self.positions[:batch_size],
            slot_mapping=self.slot_mapping[:batch_size],
            block_tables=self.block_tables[:batch_size],
            context_lens=self.context_lens[:batch_size],
            query_start=self.query_start[: batch_size + 1],
            is_decode=True,
            query_lens=[],
            context_lens_host=[],
        )
        hidden = self.model(self.input_ids[:batch_size], meta, self.kv_cache)
        return self.model.compute_logits(hidden)

    def capture(self) -> None:
        pool = None
        for batch_size in reversed(self.batch_sizes):  # largest first: smaller ones reuse its pool
            self._step(batch_size)  # warm-up (and compilation) outside the graph
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.logits[batch_size] = self._step(batch_size)
            pool = graph.pool()
            self.graphs[batch_size] = graph
        torch.cuda.synchronize()

    def replay(self, input_ids: torch.Tensor, meta: BatchMetadata) -> torch.Tensor:
        # input_ids [n] of a decode batch -> logits [n, vocab]
        n = input_ids.shape[0]
        batch_size = next(b for b in self.batch_sizes if b >= n)
        width = meta.block_tables.shape[1]
        self.input_ids[:n].copy_(input_ids)
        self.positions[:n].copy_(meta.positions)
        self.slot_mapping[:n].copy_(meta.slot_mapping)
        self.slot_mapping[n:].fill_(self.scratch_slot)  # stale rows would overwrite live blocks
        self.context_lens[:n].copy_(meta.context_lens)
        self.block_tables[:n, :width].copy_(meta.block_tables)
        self.graphs[batch_size].replay()
        return self.logits[batch_size][:n]
