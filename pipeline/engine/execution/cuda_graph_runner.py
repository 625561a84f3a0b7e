"""Steps replayed from CUDA graphs: decode graphs per padded batch size (1, 2, 4, ..., max) and,
where the varlen attention kernel runs, mixed graphs (prompt chunks + decodes) per padded token
count (64, 128, ..., max_num_tokens). An eager step of a small model is launch-bound: its host
time was many times its GPU time (docs/design.md, "CUDA graphs").

Graph inputs live in static buffers that replay refills. Rows past the real batch are padding:
they read one slot of a scratch block that no sequence owns, and write their K/V there. A mixed
graph always runs max_batch_size sequences; the padding ones have no query tokens, so attention
skips them, and padding tokens belong to no sequence (their rows are computed, never read).

A pipeline stage after the first takes hidden states [T, 2, hidden] instead of token ids, and a
stage before the last ends its decode graphs in hidden states instead of logits. Tensor-parallel
collectives are captured with the rest (every rank of the group replays the same graphs).
"""

import torch
from torch import nn

from pipeline.engine.engine_config import EngineConfig
from pipeline.engine.layers.batch_metadata import BatchMetadata

MIN_MIXED_TOKENS = 64


def capture_batch_sizes(max_batch_size: int) -> list[int]:
    sizes = [1]
    while sizes[-1] * 2 < max_batch_size:
        sizes.append(sizes[-1] * 2)
    return sorted(set(sizes) | {max_batch_size})


def capture_token_counts(max_num_tokens: int) -> list[int]:
    counts = [MIN_MIXED_TOKENS]
    while counts[-1] < max_num_tokens:
        counts.append(counts[-1] * 2)
    return [c for c in counts if c < max_num_tokens] + [max_num_tokens]


class CudaGraphRunner:
    """Owned by the model runner; holds the graphs, their memory pool and static buffers."""

    def __init__(
        self,
        model: nn.Module,
        kv_cache: torch.Tensor,
        max_batch_size: int,
        max_blocks_per_seq: int,
        scratch_block: int,
        max_num_tokens: int = 0,
    ):
        self.model = model  # possibly torch.compile'd by the model runner
        self.is_last_stage = getattr(model, "is_last_stage", True)
        self.kv_cache = kv_cache
        self.max_batch_size = max_batch_size
        self.batch_sizes = capture_batch_sizes(max_batch_size)
        # 0: decode graphs only (mixed steps need the varlen kernel: the CPU loop syncs)
        self.token_counts = capture_token_counts(max_num_tokens) if max_num_tokens else []
        device = kv_cache.device
        block_size = kv_cache.shape[3]
        self.scratch_slot = scratch_block * block_size
        num_rows = max(max_batch_size, max_num_tokens)
        self.inputs = model.stage_inputs(num_rows, device)  # token ids or hidden states
        # positions, slot_mapping, context_lens: a decode replay fills its [3, B] in one copy
        self.rows = torch.ones(3, num_rows, dtype=torch.int64, device=device)
        self.positions, self.slot_mapping, self.context_lens = self.rows
        self.slot_mapping.fill_(self.scratch_slot)
        # zeros until a mixed replay fills it: while capturing no sequence owns a token (one
        # each would overrun token counts below max_batch_size)
        self.query_start = torch.zeros(max_batch_size + 1, dtype=torch.int64, device=device)
        self.block_tables = torch.full(
            (max_batch_size, max_blocks_per_seq), scratch_block, dtype=torch.int64, device=device
        )
        # the block tables last copied in: a launch's decode steps share theirs, copied once
        self._tables_from: torch.Tensor | None = None
        self._num_real_slots = 0  # slot_mapping rows past it hold the scratch slot
        self.graphs: dict[tuple[str, int], torch.cuda.CUDAGraph] = {}
        self.outputs: dict[tuple[str, int], torch.Tensor] = {}

    def _step(self, kind: str, size: int) -> torch.Tensor:
        # the captured work: static buffers -> decode logits [size, vocab], or mixed hidden
        # states [size tokens, hidden] (the caller picks the rows to sample)
        is_decode = kind == "decode"
        num_seqs = size if is_decode else self.max_batch_size
        meta = BatchMetadata(
            positions=self.positions[:size],
            slot_mapping=self.slot_mapping[:size],
            block_tables=self.block_tables[:num_seqs],
            context_lens=self.context_lens[:num_seqs],
            query_start=self.query_start[: num_seqs + 1],
            is_decode=is_decode,
        )
        hidden = self.model(self.inputs[:size], meta, self.kv_cache)
        return self.model.compute_logits(hidden) if is_decode and self.is_last_stage else hidden

    def capture(self) -> None:
        pool = None
        # largest first, so the smaller ones fit in its pool
        keys = [("mixed", n) for n in reversed(self.token_counts)]
        keys += [("decode", b) for b in reversed(self.batch_sizes)]
        for key in keys:
            self._step(*key)  # warm-up (and compilation) outside the graph
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.outputs[key] = self._step(*key)
            pool = graph.pool()
            self.graphs[key] = graph
        torch.cuda.synchronize()

    def decode_ms(self, num_replays: int = 10) -> float:
        """GPU time of one replay of the largest decode graph, on its capture-time inputs (every
        row padding, a context of one token)."""
        return _replay_ms(self.graphs[("decode", self.max_batch_size)], num_replays)

    def prefill_tokens_per_s(self, num_replays: int = 3) -> float:
        """Tokens a second of the largest mixed graph, on its capture-time inputs (the host
        tier's copy-or-recompute rule, kv_swap.swap_costs)."""
        num_tokens = self.token_counts[-1]
        return num_tokens / (_replay_ms(self.graphs[("mixed", num_tokens)], num_replays) / 1e3)

    def can_run(self, meta: BatchMetadata) -> bool:
        return meta.is_decode or bool(self.token_counts)

    def replay(self, inputs: torch.Tensor, meta: BatchMetadata) -> torch.Tensor:
        # inputs [T] ids (or [T, 2, hidden]) of B sequences -> decode: logits [B, vocab]; mixed:
        # hidden [T, hidden] (before the last stage: [T, 2, hidden] either way)
        n = inputs.shape[0]
        num_seqs, width = meta.block_tables.shape
        if meta.is_decode:
            key = ("decode", next(b for b in self.batch_sizes if b >= n))
        else:
            key = ("mixed", next(t for t in self.token_counts if t >= n))
            self.query_start[: num_seqs + 1].copy_(meta.query_start)
            self.query_start[num_seqs + 1 :].fill_(n)  # padding sequences: no tokens
        self.inputs[:n].copy_(inputs)
        if meta.decode_rows is not None:
            self.rows[:, :n].copy_(meta.decode_rows)
        else:
            self.positions[:n].copy_(meta.positions)
            self.slot_mapping[:n].copy_(meta.slot_mapping)
            self.context_lens[:num_seqs].copy_(meta.context_lens)
        if self._num_real_slots > n:  # stale rows would overwrite live blocks
            self.slot_mapping[n : self._num_real_slots].fill_(self.scratch_slot)
        self._num_real_slots = n
        if meta.block_tables is not self._tables_from:
            self.block_tables[:num_seqs, :width].copy_(meta.block_tables)
            self._tables_from = meta.block_tables
        self.graphs[key].replay()
        return self.outputs[key][:n]


def _replay_ms(graph: torch.cuda.CUDAGraph, num_replays: int) -> float:
    """GPU time of one replay, the mean of num_replays after a warm one."""
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(num_replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / num_replays


def capture_graphs(
    model: nn.Module, kv_cache: torch.Tensor, config: EngineConfig, scratch_block: int
) -> "CudaGraphRunner":
    """The engine's graphs, captured (through torch.compile with build.torch.compile)."""
    if config.compile:
        model = torch.compile(model, dynamic=True)
    graphs = CudaGraphRunner(
        model,
        kv_cache,
        config.max_batch_size,
        config.max_blocks_per_seq,
        scratch_block=scratch_block,
        # mixed steps need the varlen kernel, which compile drops for inductor's ops
        max_num_tokens=0 if config.compile else config.max_num_tokens,
    )
    with torch.inference_mode():
        graphs.capture()
    return graphs
