"""Runs one scheduled step on the device: packs the batch, runs the model, samples."""

import logging
import math
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import torch

from pipeline.engine import kernels
from pipeline.engine.batch_metadata import BatchMetadata
from pipeline.engine.cuda_graph_runner import CudaGraphRunner
from pipeline.engine.engine_config import EngineConfig
from pipeline.engine.host_buffers import PinnedRing
from pipeline.engine.layers.linear import kernel_counts
from pipeline.engine.layers.sampler import Sampler, SamplingTensors
from pipeline.engine.models import MODELS
from pipeline.engine.phase_range import phase
from pipeline.engine.quant.kv_cache import kv_cache_dtype
from pipeline.engine.scheduler import ScheduledSequence
from pipeline.engine.sequence import Sequence
from pipeline.errors import ConfigError

logger = logging.getLogger(__name__)

# GPU time a launch should cover when num_scheduler_steps is unset: the host's part of a launch
# is ~1.2-1.5 ms at batch 64 on an H100 host, and slower beside a server's processes. Any more
# only holds back requests that arrive meanwhile. H100, SmolLM2 served at a ~1 ms step, one
# lease: 3 steps a launch 0.90-0.91 of direct, 4 steps 0.87-0.89 (2 steps: 0.70-0.85, stop 22)
AUTO_LAUNCH_GPU_MS = 2.8
MAX_AUTO_SCHEDULER_STEPS = 8
# what _prepare reads of each scheduled sequence, in one numpy row: tokens this step, computed,
# on the host, pending, pending row, block-table row, max_kv_tokens
_SEQ_STATE = np.dtype((np.int64, 7))

PreparedLaunch = tuple[
    torch.Tensor, BatchMetadata, torch.Tensor | None, list[Sequence], list[BatchMetadata]
]


class ModelRunner:
    """Owns the device state: weights, the KV cache, CUDA graphs, the sampling RNG.

    KV cache: [num_layers, 2, num_kv_blocks + 1, block_size, kv_heads, head_dim]; the extra last
    block belongs to no sequence (CUDA-graph padding rows write there)."""

    def __init__(self, config: EngineConfig, weights: dict[str, torch.Tensor]):
        self.device, self.dtype = config.device, config.dtype
        self.kv_dtype = kv_cache_dtype(config.model.quantization, config.dtype)
        self.block_size = config.block_size
        self.max_blocks_per_seq = -(-config.max_seq_len // config.block_size)
        m = config.model
        self.model = MODELS[m.architecture](
            m, weights, config.dtype, config.device, config.max_seq_len
        )
        self.kv_layout = (m.num_layers, config.block_size, m.num_kv_heads, m.head_dim)
        self.num_kv_blocks = config.num_kv_blocks or self._default_num_kv_blocks(config)
        self.scratch_slot = self.num_kv_blocks * config.block_size  # first of the extra block
        self.kv_cache = torch.zeros(
            self._kv_shape(self.num_kv_blocks + 1), dtype=self.kv_dtype, device=self.device
        )
        generator = torch.Generator(device=self.device)
        generator.seed()
        self.sampler = Sampler(generator)
        self._last_sampled: torch.Tensor | None = None  # [S] the last launched step's tokens
        self.graphs = None
        if config.compile and self.device.type == "cuda":
            _drop_triton_kernels(self.model)
        if config.use_cuda_graph and self.device.type == "cuda":
            self.graphs = self._capture_graphs(config)
        elif config.compile:
            logger.warning(
                "build.torch.compile applies to CUDA-graph decode only; ignored on %s", self.device
            )
        self.num_scheduler_steps = config.num_scheduler_steps or self._auto_scheduler_steps()
        # auto: the engine adds steps, up to twice as many, while its host paces the device
        self.max_scheduler_steps = (
            min(MAX_AUTO_SCHEDULER_STEPS, 2 * self.num_scheduler_steps)
            if config.num_scheduler_steps is None and self.graphs is not None
            else self.num_scheduler_steps
        )
        if self.device.type == "cuda":  # a launch's packed inputs in, its sampled tokens out
            bs, ahead = config.max_batch_size, self.max_scheduler_steps - 1
            # the first step's parts, then the steps ahead's (positions, slots, context lens x
            # ahead; query starts; block tables)
            self._inputs_ring = PinnedRing(
                4 * config.max_num_tokens
                + bs * (self.max_blocks_per_seq + 4)
                + bs * (3 * ahead + self.max_blocks_per_seq + 1)
                + 1
            )
            self._tokens_ring = PinnedRing(bs * self.max_scheduler_steps)
        logger.info(
            "model runner: %s %s, %d KV blocks x %d tokens (%s, %.2f GiB), linears %s, "
            "Triton kernels %s, CUDA graphs: decode %s, mixed %s, torch.compile %s, "
            "%d step(s) a launch (up to %d)",
            self.device,
            self.dtype,
            self.num_kv_blocks,
            self.block_size,
            self.kv_dtype,
            self.kv_cache.nbytes / 2**30,
            kernel_counts(self.model),
            "on" if kernels.is_available(self.device) and not config.compile else "off",
            self.graphs.batch_sizes if self.graphs else "off",
            self.graphs.token_counts if self.graphs and self.graphs.token_counts else "off",
            "on" if self.graphs and config.compile else "off",
            self.num_scheduler_steps,
            self.max_scheduler_steps,
        )

    def _auto_scheduler_steps(self) -> int:
        """Steps a launch runs unless num_scheduler_steps is set: the fewest decode steps that
        cover AUTO_LAUNCH_GPU_MS at the largest batch (1 without CUDA graphs). A small model's step
        (SmolLM2: ~1.2 ms) is shorter than the host's work for it, which then paced every step;
        a large one's (8B: 7+ ms) covers it alone, and more steps would only hold back new
        requests' first tokens."""
        if self.graphs is None:
            return 1
        step_ms = self.graphs.decode_ms()
        logger.info(
            "a decode step at batch %d: %.2f ms on the GPU", self.graphs.max_batch_size, step_ms
        )
        return steps_to_fill_launch(step_ms)

    def _kv_shape(self, num_blocks: int) -> tuple[int, ...]:
        layers, block_size, kv_heads, head_dim = self.kv_layout
        return (layers, 2, num_blocks, block_size, kv_heads, head_dim)

    def _block_bytes(self) -> int:
        return math.prod(self._kv_shape(1)) * self.kv_dtype.itemsize

    def _default_num_kv_blocks(self, config: EngineConfig) -> int:
        if self.device.type != "cuda":
            return config.max_batch_size * self.max_blocks_per_seq
        # GPU: a fraction of the memory left after the weights and a full-budget step
        peak_step_bytes = self._profile_step_bytes(
            config.max_num_tokens, config.max_seq_len, config.max_batch_size
        )
        free_bytes, _ = torch.cuda.mem_get_info(self.device)
        usable = (free_bytes - peak_step_bytes) * config.kv_cache_free_mem_fraction
        num_blocks = int(usable // self._block_bytes())
        if num_blocks < 1:
            raise ConfigError(
                f"engine: no GPU memory left for the KV cache "
                f"({free_bytes / 2**30:.1f} GiB free, a step needs "
                f"{peak_step_bytes / 2**30:.1f} GiB); lower max_num_tokens or set "
                f"num_kv_blocks"
            )
        return num_blocks

    @torch.inference_mode()
    def _profile_step_bytes(self, num_tokens: int, max_seq_len: int, num_sampled: int) -> int:
        """Peak activation memory of one step over (at least) num_tokens prompt tokens."""
        seq_len = min(num_tokens, max_seq_len)
        num_seqs = -(-num_tokens // seq_len)
        num_blocks = num_seqs * -(-seq_len // self.block_size)
        cache = torch.zeros(self._kv_shape(num_blocks), dtype=self.kv_dtype, device=self.device)
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        before = torch.cuda.memory_allocated(self.device)
        meta = BatchMetadata.for_prompts(num_seqs, seq_len, self.block_size, self.device)
        input_ids = torch.zeros(num_seqs * seq_len, dtype=torch.int64, device=self.device)
        hidden = self.model(input_ids, meta, cache)
        self.model.compute_logits(hidden[-num_sampled:])
        torch.cuda.synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device) - before
        del cache, hidden
        torch.cuda.empty_cache()
        return peak

    def _capture_graphs(self, config: EngineConfig) -> CudaGraphRunner:
        model = self.model
        if config.compile:
            model = torch.compile(self.model, dynamic=True)
        graphs = CudaGraphRunner(
            model,
            self.kv_cache,
            config.max_batch_size,
            self.max_blocks_per_seq,
            scratch_block=self.num_kv_blocks,
            # mixed steps need the varlen kernel, which compile drops for inductor's ops
            max_num_tokens=0 if config.compile else config.max_num_tokens,
        )
        with torch.inference_mode():
            graphs.capture()
        return graphs

    def _prepare(
        self, scheduled: list[ScheduledSequence], num_steps: int, block_tables: np.ndarray
    ) -> PreparedLaunch:
        """Pack the step: (input_ids [T], metadata, rows to turn into logits [S]: None when
        every token's row samples, the S sequences that sample, the metadata of the
        num_steps - 1 decode steps of those S that follow it). Built with numpy on the host into
        a pinned buffer, sent in one copy; input tokens still pending on the device come from the
        last step's sampled tokens. A sampling sequence's block table covers the steps ahead too,
        so theirs are rows of this step's. block_tables: the block manager's array."""
        bs = self.block_size
        num_seqs = len(scheduled)
        seqs = [entry.seq for entry in scheduled]
        # one pass over the sequences reads their state; the rest is numpy over the batch
        state = np.fromiter(
            (
                (
                    entry.num_tokens,
                    seq.num_computed_tokens,
                    len(seq.token_ids),
                    seq.num_pending_tokens,
                    seq.pending_row,
                    seq.block_row,
                    seq.max_kv_tokens,
                )
                for entry, seq in zip(scheduled, seqs, strict=True)
            ),
            _SEQ_STATE,
            num_seqs,
        )
        lens, starts, num_known, num_pending, pending_rows, block_rows, limits = state.T
        ends = starts + lens
        samples = ends == num_known + num_pending  # the step reaches its newest token: logits
        is_pending = ends > num_known  # its one input token is still on the device: a decode
        query_start = np.zeros(num_seqs + 1, np.int64)
        np.cumsum(lens, out=query_start[1:])
        num_tokens = int(query_start[-1])
        is_decode = num_tokens == num_seqs
        ids = np.zeros(num_tokens, np.int64)
        for row in np.flatnonzero(~is_pending).tolist():  # prompt chunks (their tokens known)
            seq = seqs[row]
            ids[query_start[row] : query_start[row + 1]] = seq.token_ids[
                seq.num_computed_tokens : seq.num_computed_tokens + scheduled[row].num_tokens
            ]
        sampled_at = np.flatnonzero(samples)
        num_sampled = len(sampled_at)
        num_ahead = num_steps - 1 if num_sampled else 0
        kv_ends = ends  # K/V in use after the launch: sampling rows also decode num_ahead more
        if num_ahead:
            ahead_ends = np.maximum(ends, np.minimum(ends + num_ahead, limits))
            kv_ends = np.where(samples, ahead_ends, ends)
        table_np = block_tables[block_rows, : -(-int(kv_ends.max()) // bs)]
        if is_decode:  # one token a sequence, at its start
            positions, context_lens = starts, ends
            slot_blocks = table_np[np.arange(num_seqs), positions // bs]
        else:
            context_lens = ends
            positions = np.arange(num_tokens) - np.repeat(query_start[:-1] - starts, lens)
            slot_blocks = table_np[np.repeat(np.arange(num_seqs), lens), positions // bs]
        slots = slot_blocks * bs + positions % bs
        samples_all = is_decode and num_sampled == num_seqs  # every token's logits row
        pending_at, pending_from = query_start[:-1][is_pending], pending_rows[is_pending]
        # steady decode: the inputs are the last step's tokens, row for row (no scatter)
        inputs_are_last = (
            is_decode
            and self._last_sampled is not None
            and self._last_sampled.shape[0] == num_seqs
            and len(pending_from) == num_seqs
            and bool((pending_from == np.arange(num_seqs)).all())
        )
        ahead = ()
        if num_ahead:
            ahead_tables = table_np[sampled_at]
            ahead = self._decode_ahead(
                ends[sampled_at], limits[sampled_at], ahead_tables, num_ahead
            )
            if num_sampled < num_seqs:  # else they read this step's block tables
                ahead += (ahead_tables.ravel(),)
        parts = (
            ids,
            positions,  # positions, slots and context_lens adjacent: a decode step's [3, S]
            slots,
            context_lens,
            () if samples_all else query_start[1:][sampled_at] - 1,
            query_start,
            table_np.ravel(),
            () if inputs_are_last else pending_at,
            () if inputs_are_last else pending_from,
            *ahead,
        )
        sizes = [len(p) for p in parts]
        # unsafe: an empty tuple is a float64 array to numpy; every value is an integer
        if self.device.type == "cuda":
            host = self._inputs_ring.take(sum(sizes))
            np.concatenate(parts, out=host.numpy(), casting="unsafe")
            packed = host.to(self.device, non_blocking=True)
            self._inputs_ring.copied()
        else:
            packed = torch.from_numpy(np.concatenate(parts, dtype=np.int64, casting="unsafe"))
        split = packed.split(sizes)
        input_ids, positions_t, slots_t, ctx_t, rows_t, qstart_t, tables_t, at_t, from_t = split[:9]
        if inputs_are_last:
            input_ids = self._last_sampled
        elif len(pending_at):
            input_ids[at_t] = self._last_sampled[from_t]
        tables_t = tables_t.view(num_seqs, -1)
        if is_decode:
            decode_rows = packed[num_tokens : num_tokens * 4].view(3, num_seqs)
            meta = BatchMetadata.for_decode(decode_rows, tables_t, qstart_t)
        else:
            meta = BatchMetadata(positions_t, slots_t, tables_t, ctx_t, qstart_t, is_decode=False)
        sampling = seqs if num_sampled == num_seqs else [seqs[i] for i in sampled_at.tolist()]
        ahead_metas = []
        if num_ahead:
            rows_a, qstart_a, *tables_a = split[9:]
            tables_a = tables_a[0].view(num_sampled, -1) if tables_a else tables_t
            ahead_metas = [
                BatchMetadata.for_decode(rows, tables_a, qstart_a)
                for rows in rows_a.view(num_ahead, 3, num_sampled)
            ]
        return input_ids, meta, None if samples_all else rows_t, sampling, ahead_metas

    def _decode_ahead(
        self, ends: np.ndarray, limits: np.ndarray, tables: np.ndarray, num_ahead: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Host metadata of num_ahead decode steps of S sequences after a step that left them
        ends[i] tokens of context, their block tables [S, width] covering those steps:
        (positions, slots, context_lens as [num_ahead, 3, S] row-major; query_start [S + 1]).
        A row past what its request can use (limits[i], its max_kv_tokens) is padding: it writes
        the scratch slot and reads its own blocks."""
        bs = self.block_size
        num_seqs = len(ends)
        positions = ends[None, :] + np.arange(num_ahead)[:, None]
        is_real = positions < limits
        positions = np.minimum(positions, limits - 1)
        blocks = tables[np.arange(num_seqs), positions // bs]
        slots = np.where(is_real, blocks * bs + positions % bs, self.scratch_slot)
        return np.stack((positions, slots, positions + 1), axis=1).ravel(), np.arange(num_seqs + 1)

    def _sampling_tensors(self, seqs: list[Sequence]) -> SamplingTensors:
        for seq in seqs:
            if seq.params.seed is not None and seq.generator is None:
                seq.generator = torch.Generator(device=self.device)
                seq.generator.manual_seed(seq.params.seed)
        params = [seq.params for seq in seqs]
        is_greedy = [p.is_greedy for p in params]
        tensors = SamplingTensors(
            is_greedy=is_greedy,
            generators=[seq.generator for seq in seqs],
            banned_token_ids=[seq.banned_token_ids() for seq in seqs],
        )
        if not all(is_greedy):  # greedy batches need no knobs on the device
            vocab = self.model.vocab_size
            tensors.temperatures = torch.tensor(
                [1.0 if p.is_greedy else p.temperature for p in params],
                dtype=torch.float32,
                device=self.device,
            )
            tensors.top_ks = torch.tensor([p.top_k or vocab for p in params], device=self.device)
            tensors.top_ps = torch.tensor(
                [p.top_p for p in params], dtype=torch.float32, device=self.device
            )
        return tensors

    def _forward(
        self, input_ids: torch.Tensor, meta: BatchMetadata, logits_rows: torch.Tensor | None
    ) -> torch.Tensor:
        # -> logits [S, vocab] float32 of the rows that sample
        if self.graphs is not None and self.graphs.can_run(meta):
            out = self.graphs.replay(input_ids, meta)
            if meta.is_decode:  # the decode graphs end in the logits
                return out if logits_rows is None else out[logits_rows]
            hidden = out
        else:
            hidden = self.model(input_ids, meta, self.kv_cache)
        return self.model.compute_logits(hidden if logits_rows is None else hidden[logits_rows])

    @torch.inference_mode()
    def launch(
        self,
        scheduled: list[ScheduledSequence],
        num_steps: int,
        block_tables: np.ndarray,
        num_reserve_steps: int,
    ) -> "SampledTokens":
        """Queue one forward step and its sampling on the device, then num_steps - 1 decode
        steps of the sequences that sampled (each reads the tokens the one before sampled);
        returns without waiting. The sequences whose step reaches the end of their tokens
        sample, in batch order (a prompt chunk that does not, samples nothing); the next launch
        may read the last step's tokens as inputs before the host has them. block_tables: the
        block manager's array, a row per sequence that holds blocks. num_reserve_steps: when
        fewer than the launch's steps (CUDA), its schedule_at event passes once only that many
        of its steps are left on the device."""
        with phase("engine.prepare"):
            input_ids, meta, logits_rows, seqs, ahead = self._prepare(
                scheduled, num_steps, block_tables
            )
        with phase("engine.forward"):
            logits = self._forward(input_ids, meta, logits_rows)
        if not seqs:
            return SampledTokens([], None, None, 1)
        is_cuda = self.device.type == "cuda"
        # the step after which only num_reserve_steps are left (-1: none; schedule at once)
        mark_after = len(ahead) - num_reserve_steps if is_cuda else -1
        schedule_at = None
        with phase("engine.sample"):
            sampling = self._sampling_tensors(seqs)
            steps = [self.sampler(logits, sampling)]
        for step_meta in ahead:
            if len(steps) - 1 == mark_after:
                schedule_at = _recorded_event()
            with phase("engine.forward"):
                logits = self._forward(steps[-1], step_meta, None)
            with phase("engine.sample"):
                steps.append(self.sampler(logits, sampling))
        self._last_sampled = steps[-1]
        tokens = torch.cat(steps) if ahead else steps[0]  # [steps * S], step-major
        if not is_cuda:
            return SampledTokens(seqs, tokens, None, len(steps))
        host = self._tokens_ring.take(tokens.numel())
        host.copy_(tokens, non_blocking=True)
        return SampledTokens(seqs, host, self._tokens_ring.copied(), len(steps), schedule_at)


@dataclass(slots=True)
class SampledTokens:
    """One launch's sampled tokens, on their way to the host."""

    seqs: list[Sequence]  # the sequences that sampled, row by row
    tokens: torch.Tensor | None  # [num_steps * S] int64 on the host, valid once `done` has passed
    done: torch.cuda.Event | None
    num_steps: int  # tokens each sequence sampled: token j of row r is tokens[j * S + r]
    # passes when the launch has only its reserve steps left: when to schedule the next one
    schedule_at: torch.cuda.Event | None = None

    def tolist(self) -> list[int]:
        if self.tokens is None:
            return []
        if self.done is not None:
            self.done.synchronize()
        return self.tokens.tolist()


def _recorded_event() -> torch.cuda.Event:
    event = torch.cuda.Event()
    event.record()
    return event


def _drop_triton_kernels(model: torch.nn.Module) -> None:
    """Layers fall back to their plain-PyTorch ops, which inductor fuses itself: our Triton
    kernels inside a compiled graph crashed inductor's autotuning (illegal address, H100)."""
    for module in model.modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, ModuleType):
                setattr(module, name, None)


def steps_to_fill_launch(step_ms: float) -> int:
    """The fewest decode steps of step_ms each that cover AUTO_LAUNCH_GPU_MS (at most
    MAX_AUTO_SCHEDULER_STEPS)."""
    return min(MAX_AUTO_SCHEDULER_STEPS, math.ceil(AUTO_LAUNCH_GPU_MS / step_ms))
