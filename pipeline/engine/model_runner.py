"""Runs one scheduled step on the device: packs the batch, runs the model, samples."""

import logging
import math
from types import ModuleType

import torch

from pipeline.engine import kernels
from pipeline.engine.batch_metadata import BatchMetadata
from pipeline.engine.cuda_graph_runner import CudaGraphRunner
from pipeline.engine.engine_config import EngineConfig
from pipeline.engine.layers.linear import kernel_counts
from pipeline.engine.layers.sampler import Sampler, SamplingTensors
from pipeline.engine.models import MODELS
from pipeline.engine.scheduler import ScheduledSequence
from pipeline.engine.sequence import Sequence
from pipeline.errors import ConfigError

logger = logging.getLogger(__name__)


class ModelRunner:
    """Owns the device state: weights, the KV cache, CUDA graphs, the sampling RNG.

    KV cache: [num_layers, 2, num_kv_blocks + 1, block_size, kv_heads, head_dim]; the extra last
    block belongs to no sequence (CUDA-graph padding rows write there)."""

    def __init__(self, config: EngineConfig, weights: dict[str, torch.Tensor]):
        self.device, self.dtype = config.device, config.dtype
        self.block_size = config.block_size
        self.max_blocks_per_seq = -(-config.max_seq_len // config.block_size)
        m = config.model
        self.model = MODELS[m.architecture](
            m, weights, config.dtype, config.device, config.max_seq_len
        )
        self.kv_layout = (m.num_layers, config.block_size, m.num_kv_heads, m.head_dim)
        self.num_kv_blocks = config.num_kv_blocks or self._default_num_kv_blocks(config)
        self.kv_cache = torch.zeros(
            self._kv_shape(self.num_kv_blocks + 1), dtype=self.dtype, device=self.device
        )
        generator = torch.Generator(device=self.device)
        generator.seed()
        self.sampler = Sampler(generator)
        self.graphs = None
        if config.compile and self.device.type == "cuda":
            _drop_triton_kernels(self.model)
        if config.use_cuda_graph and self.device.type == "cuda":
            self.graphs = self._capture_graphs(config)
        elif config.compile:
            logger.warning(
                "build.torch.compile applies to CUDA-graph decode only; ignored on %s", self.device
            )
        logger.info(
            "model runner: %s %s, %d KV blocks x %d tokens (%.2f GiB), linears %s, "
            "Triton kernels %s, CUDA graphs %s, torch.compile %s",
            self.device,
            self.dtype,
            self.num_kv_blocks,
            self.block_size,
            self.kv_cache.nbytes / 2**30,
            kernel_counts(self.model),
            "on" if kernels.is_available(self.device) and not config.compile else "off",
            self.graphs.batch_sizes if self.graphs else "off",
            "on" if self.graphs and config.compile else "off",
        )

    def _kv_shape(self, num_blocks: int) -> tuple[int, ...]:
        layers, block_size, kv_heads, head_dim = self.kv_layout
        return (layers, 2, num_blocks, block_size, kv_heads, head_dim)

    def _block_bytes(self) -> int:
        return math.prod(self._kv_shape(1)) * self.dtype.itemsize

    def _default_num_kv_blocks(self, config: EngineConfig) -> int:
        if self.device.type != "cuda":
            return config.max_batch_size * self.max_blocks_per_seq
        # GPU: a fraction of the memory left after the weights and a full-budget step
        peak_step_bytes = self._profile_step_bytes(
            min(config.max_num_tokens, config.max_seq_len), config.max_batch_size
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
    def _profile_step_bytes(self, num_tokens: int, num_sampled: int) -> int:
        """Peak activation memory of one prompt step over num_tokens tokens."""
        num_blocks = -(-num_tokens // self.block_size)
        cache = torch.zeros(self._kv_shape(num_blocks), dtype=self.dtype, device=self.device)
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        before = torch.cuda.memory_allocated(self.device)
        meta = BatchMetadata(
            positions=torch.arange(num_tokens, device=self.device),
            slot_mapping=torch.arange(num_tokens, device=self.device),
            block_tables=torch.arange(num_blocks, dtype=torch.int32, device=self.device)[None],
            context_lens=torch.tensor([num_tokens], dtype=torch.int32, device=self.device),
            is_decode=False,
            query_lens=[num_tokens],
            context_lens_host=[num_tokens],
        )
        input_ids = torch.zeros(num_tokens, dtype=torch.int64, device=self.device)
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
        )
        with torch.inference_mode():
            graphs.capture()
        return graphs

    def _prepare(
        self, scheduled: list[ScheduledSequence]
    ) -> tuple[torch.Tensor, BatchMetadata, torch.Tensor]:
        """Pack the step: (input_ids [T], metadata, rows to turn into logits [S])."""
        bs = self.block_size
        input_ids, positions, slots, logits_rows = [], [], [], []
        query_lens, context_lens, tables = [], [], []
        for entry in scheduled:
            seq, start = entry.seq, entry.seq.num_computed_tokens
            end = start + entry.num_tokens
            input_ids += seq.token_ids[start:end]
            positions += range(start, end)
            table = seq.block_table
            slots += [table[p // bs] * bs + p % bs for p in range(start, end)]
            query_lens.append(entry.num_tokens)
            context_lens.append(end)
            tables.append(table[: -(-end // bs)])
            if end == seq.num_tokens:
                logits_rows.append(len(input_ids) - 1)
        width = max(len(t) for t in tables)
        tables = [t + [0] * (width - len(t)) for t in tables]  # never read: past context_lens
        as_tensor = lambda x, dtype: torch.tensor(x, dtype=dtype, device=self.device)  # noqa: E731
        meta = BatchMetadata(
            positions=as_tensor(positions, torch.int64),
            slot_mapping=as_tensor(slots, torch.int64),
            block_tables=as_tensor(tables, torch.int32),
            context_lens=as_tensor(context_lens, torch.int32),
            is_decode=all(n == 1 for n in query_lens),
            query_lens=query_lens,
            context_lens_host=context_lens,
        )
        return as_tensor(input_ids, torch.int64), meta, as_tensor(logits_rows, torch.int64)

    def _sampling_tensors(self, seqs: list[Sequence]) -> SamplingTensors:
        vocab = self.model.vocab_size
        for seq in seqs:
            if seq.params.seed is not None and seq.generator is None:
                seq.generator = torch.Generator(device=self.device)
                seq.generator.manual_seed(seq.params.seed)
        params = [seq.params for seq in seqs]
        return SamplingTensors(
            temperatures=torch.tensor(
                [1.0 if p.is_greedy else p.temperature for p in params],
                dtype=torch.float32,
                device=self.device,
            ),
            top_ks=torch.tensor([p.top_k or vocab for p in params], device=self.device),
            top_ps=torch.tensor([p.top_p for p in params], dtype=torch.float32, device=self.device),
            is_greedy=[p.is_greedy for p in params],
            generators=[seq.generator for seq in seqs],
            banned_token_ids=[seq.banned_token_ids() for seq in seqs],
        )

    @torch.inference_mode()
    def run(self, scheduled: list[ScheduledSequence]) -> list[int]:
        """One forward step. Returns the next token of every sequence whose step reaches the end
        of its tokens, in batch order (a prompt chunk that does not samples nothing)."""
        input_ids, meta, logits_rows = self._prepare(scheduled)
        if self.graphs is not None and meta.is_decode:
            logits = self.graphs.replay(input_ids, meta)[logits_rows]
        else:
            hidden = self.model(input_ids, meta, self.kv_cache)
            logits = self.model.compute_logits(hidden[logits_rows])
        seqs = [e.seq for e in scheduled if e.seq.reaches_end(e.num_tokens)]
        if not seqs:
            return []
        return self.sampler(logits, self._sampling_tensors(seqs)).tolist()


def _drop_triton_kernels(model: torch.nn.Module) -> None:
    """Layers fall back to their plain-PyTorch ops, which inductor fuses itself: our Triton
    kernels inside a compiled graph crashed inductor's autotuning (illegal address, H100)."""
    for module in model.modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, ModuleType):
                setattr(module, name, None)
