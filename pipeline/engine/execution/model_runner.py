"""Runs one scheduled launch on the device: packs the batch, runs the model, samples.

With several ranks (tensor / pipeline parallel) rank 0's runner is the driver: it starts the
worker ranks, packs each launch and sends it to them, samples and shares the sampled tokens; a
worker's runner follows (follow()). Every rank builds its model, KV cache and graphs in step."""

import logging
import weakref

import torch
import torch.distributed as dist

from pipeline.engine import kernels
from pipeline.engine.engine_config import EngineConfig
from pipeline.engine.execution.block_copies import BlockCopies
from pipeline.engine.execution.cuda_graph_runner import capture_graphs
from pipeline.engine.execution.grammar_bitmask import GrammarBitmask, HostTokens
from pipeline.engine.execution.host_buffers import PinnedRing
from pipeline.engine.execution.kv_cache_sizing import default_num_kv_blocks
from pipeline.engine.execution.kv_swap import HostKVTier, host_blocks, swap_costs
from pipeline.engine.execution.launch_channel import LORA, SCORE, STOP, SWAP
from pipeline.engine.execution.launch_schedule import (
    Stage,
    TakeTokens,
    run_launch,
)
from pipeline.engine.execution.launch_steps import launch_steps
from pipeline.engine.execution.layer_streamer import LayerStreamer
from pipeline.engine.execution.phase_range import phase
from pipeline.engine.execution.rank_groups import RankGroups, join_ranks, stop_ranks
from pipeline.engine.execution.request_logits import (
    LaunchBeamCandidates,
    PromptScoring,
    sampling_tensors,
)
from pipeline.engine.execution.runner_summary import runner_summary
from pipeline.engine.execution.scoring import stage_prompt_logits
from pipeline.engine.execution.step_inputs import LaunchPacker, verified_rows
from pipeline.engine.execution.step_types import StepHeader, StepInputs
from pipeline.engine.layers.batch_metadata import BatchMetadata
from pipeline.engine.layers.sampler import Sampler
from pipeline.engine.lora.manager import attach_lora
from pipeline.engine.models import MODELS
from pipeline.engine.parallel.mapping import Mapping, rank_device
from pipeline.engine.parallel.tensor_parallel import SINGLE
from pipeline.engine.parallel.workers import WorkerProcesses
from pipeline.engine.quant.kv_cache import kv_cache_dtype
from pipeline.engine.scheduling.sampled_tokens import SampledTokens
from pipeline.engine.scheduling.scheduler_output import LaunchPlan, SchedulerOutput

logger = logging.getLogger(__name__)

FAILURE_WAIT_S = 5.0  # after a collective's error, how long to wait for a worker's exit code


class ModelRunner:
    """Owns the device state: weights, the KV cache, CUDA graphs, the sampling RNG.

    KV cache: [num_layers, 2, num_kv_blocks + 1, block_size, kv_heads, head_dim] of this rank's
    layers and KV heads; the extra last block belongs to no sequence (CUDA-graph padding rows
    write there). Every rank has the same number of blocks (the fewest any rank can hold)."""

    def __init__(
        self,
        config: EngineConfig,
        weights: dict[str, torch.Tensor],
        rank: int = 0,
        store: dist.Store | None = None,
    ):
        m = config.model
        self.mapping = Mapping(m.tp_size, m.pp_size, rank)
        self.device, self.dtype = rank_device(config.device, rank), config.dtype
        self.kv_dtype = kv_cache_dtype(config.model.quantization, config.dtype)
        self.block_size = config.block_size
        self.max_blocks_per_seq = config.max_blocks_per_seq
        self.collective_timeout_s = config.collective_timeout_s
        self.workers: WorkerProcesses | None = None  # rank 0 of several
        self._is_closed = False
        self.ranks: RankGroups | None = None
        if self.mapping.world_size > 1:
            self.ranks, self.workers = join_ranks(config, self.mapping, self.device, store)
            if self.workers is not None:  # dropped unclosed: no orphan ranks
                weakref.finalize(self, self.workers.kill)
        self.tp = self.ranks.tp if self.ranks else SINGLE
        # weight offload: the layers past gpu_weight_budget_gb stream from host memory
        self.streamer = LayerStreamer.for_config(config, self.mapping, self.device)
        with kernels.plain_pytorch(not config.triton_kernels):
            self.model = MODELS[m.architecture](
                m,
                weights,
                config.dtype,
                self.device,
                config.max_seq_len,
                self.mapping,
                self.tp,
                place_layer=self.streamer.place if self.streamer else None,
            )
        if self.streamer is not None:
            self.streamer.attach(self.model)
        # LoRA adapters over the base model (before the graphs capture it); None: none
        self.lora = attach_lora(config, self.model, self.mapping, self.device)
        if self.ranks:  # every rank has its weights (a CPU barrier before any NCCL work)
            self.ranks.agree_min(0)
        _, kv_heads = self.mapping.local_heads(m.num_heads, m.num_kv_heads)
        num_layers = len(self.mapping.layers(m.num_layers))
        self.kv_layout = (num_layers, config.block_size, kv_heads, m.head_dim)
        self.num_kv_blocks = config.num_kv_blocks or default_num_kv_blocks(
            self.model, self._kv_shape, self.kv_dtype, self.device, config
        )
        if self.ranks:
            self.num_kv_blocks = self.ranks.agree_min(self.num_kv_blocks)
        self.scratch_slot = self.num_kv_blocks * config.block_size  # first of the extra block
        self.kv_cache = torch.zeros(
            self._kv_shape(self.num_kv_blocks + 1), dtype=self.kv_dtype, device=self.device
        )
        self.host_tier, self.num_host_blocks = None, 0  # prefix caching's host tier
        if config.host_kv_cache_gb > 0:
            num_host = host_blocks(int(config.host_kv_cache_gb * 2**30), self.kv_cache)
            self.num_host_blocks = self.ranks.agree_min(num_host) if self.ranks else num_host
            if self.num_host_blocks:
                self.host_tier = HostKVTier(self.kv_cache, self.num_host_blocks)
        self.block_copies = BlockCopies(self.kv_cache, self.host_tier)  # a step's, in order
        generator = torch.Generator(device=self.device)
        generator.seed()
        self.sampler = Sampler(generator)
        self.grammar_bitmask = GrammarBitmask(m.vocab_size, config.max_batch_size, self.device)
        self._last_sampled: torch.Tensor | None = None  # [S] the last launched step's tokens
        self._scoring: PromptScoring | None = None  # the prompt rows the next forward scores
        # the last launch's tokens on the host and their copy's event (guided rows' bitmasks)
        self._last_tokens: tuple[torch.Tensor, torch.cuda.Event | None] | None = None
        self.graphs = None
        if config.compile and self.device.type == "cuda":
            kernels.drop_triton_kernels(self.model)
        if config.use_cuda_graph and self.device.type == "cuda":
            self.graphs = capture_graphs(
                self.model, self.kv_cache, config, scratch_block=self.num_kv_blocks
            )
        elif config.compile:
            logger.warning(
                "build.torch.compile applies to CUDA-graph decode only; ignored on %s", self.device
            )
        self.num_scheduler_steps, self.max_scheduler_steps = launch_steps(
            config.num_scheduler_steps, self.mapping.pp_size, self._decode_ms
        )
        # copy a host-tier hit back or compute it again (timed here: a graph replay of one rank)
        self.swap_costs = swap_costs(
            self.host_tier, None if self.ranks else self.graphs, config.block_size
        )
        mapping, is_pp = self.mapping, self.mapping.pp_size > 1
        self.stage = Stage(
            self._forward,
            mapping.is_first_stage,
            mapping.is_last_stage,
            self.ranks.link if self.ranks else None,
            sends_logits=is_pp and mapping.is_last_stage and mapping.tp_rank == 0,
            receives_logits=is_pp and mapping.is_driver,
        )
        steps, slot = self.max_scheduler_steps, self.scratch_slot
        self.packer = LaunchPacker(config, mapping, self.device, self.ranks, self.lora, slot, steps)
        if self.device.type == "cuda":  # a launch's sampled tokens out
            bs, spec = config.max_batch_size, config.speculation
            # a speculative step returns a token for each of a row's 1 + k positions
            rows = 1 + spec.num_draft_tokens if spec.enabled else 1
            self._tokens_ring = PinnedRing(bs * max(self.max_scheduler_steps, rows))
            # a step's tokens inside a launch, for guided rows' next bitmask (grammar_bitmask.py)
            self._step_tokens_ring = PinnedRing(bs)
        logger.info("%s", runner_summary(self, config))

    def _decode_ms(self) -> float | None:
        """A decode step's GPU time at the largest batch (None without CUDA graphs), which sets
        the steps a launch runs (launch_steps.py)."""
        if self.graphs is None:
            return None
        step_ms = self.graphs.decode_ms()
        logger.info(
            "a decode step at batch %d: %.2f ms on the GPU", self.graphs.max_batch_size, step_ms
        )
        return step_ms

    def _kv_shape(self, num_blocks: int) -> tuple[int, ...]:
        layers, block_size, kv_heads, head_dim = self.kv_layout
        return (layers, 2, num_blocks, block_size, kv_heads, head_dim)

    def _forward(
        self, inputs: torch.Tensor, meta: BatchMetadata, logits_rows: torch.Tensor | None
    ) -> torch.Tensor:
        # -> last stage: logits [S, vocab] float32 of the rows that sample; else [T, 2, hidden]
        is_last = self.model.is_last_stage
        if self.lora is not None:
            self.lora.batch.set_step(meta.lora_slots)
        with phase("engine.forward"):
            if self.graphs is not None and self.graphs.can_run(meta):
                out = self.graphs.replay(inputs, meta)
                if meta.is_decode and is_last:  # the decode graphs end in the logits
                    self._score_prompts(out, is_logits=True)
                    return out if logits_rows is None else out[logits_rows]
            else:
                out = self.model(inputs, meta, self.kv_cache)
            if is_last:
                self._score_prompts(out, is_logits=False)
            if not is_last or (logits_rows is not None and not logits_rows.numel()):
                return out
            return self.model.compute_logits(out if logits_rows is None else out[logits_rows])

    def _score_prompts(self, out: torch.Tensor, is_logits: bool) -> None:
        # the launch's first step scores the prompt rows that asked (request_logits.py)
        scoring, self._scoring = self._scoring, None
        if scoring is not None:
            compute_logits = None if is_logits else self.model.compute_logits
            scoring.compute(out, compute_logits, self.model.vocab_size)

    @torch.inference_mode()
    def launch(self, batch: SchedulerOutput, plan: LaunchPlan) -> SampledTokens:
        """Queue the batch's forward step and its sampling on the device, then plan.num_steps -
        1 decode steps of the sequences that sampled (each reads the tokens the one before
        sampled); returns without waiting. The sequences whose step reaches the end of their
        tokens sample, in batch order (a prompt chunk that does not, samples nothing); the next
        launch may read the last step's tokens as inputs before the host has them. On CUDA,
        when plan.num_reserve_steps is fewer than the launch's steps, its schedule_at event
        passes once only that many of its steps are left on the device."""
        if self.workers is not None:
            self.workers.raise_failure()
        try:
            return self._launch(batch, plan)
        except Exception as exc:
            self.grammar_bitmask.discard_launch()
            if self.workers is not None and self.workers.wait_failure(FAILURE_WAIT_S):
                raise RuntimeError(self.workers.failure) from exc
            if self.ranks is not None and "timed out" in str(exc).lower():
                raise RuntimeError(
                    f"engine: a collective between ranks waited past collective_timeout_s="
                    f"{self.collective_timeout_s:g} ({exc}); a rank stalled: check the other "
                    f"ranks' log lines, or raise collective_timeout_s"
                ) from exc
            raise
        finally:  # host-tier loads that ran beside this launch: what follows waits for them
            if self.host_tier is not None:
                self.host_tier.settle()

    def _launch(self, batch: SchedulerOutput, plan: LaunchPlan) -> SampledTokens:
        if batch.blocks_to_copy is not None:  # every rank's, before all else
            channel = self.ranks.channel if self.ranks else None
            self.block_copies.copy(batch.blocks_to_copy, channel, batch.block_tables)
        if self.stage.link is not None:
            self.stage.link.settle()
        with phase("engine.prepare"):
            packed, batches = self.packer.pack(batch, plan.num_steps, self._last_sampled)
            self._scoring = PromptScoring.plan(batch) if self.ranks is None else None
        sampling_batches = [m for m, step in enumerate(packed) if step.seqs]
        seqs = [seq for m in sampling_batches for seq in packed[m].seqs]
        is_cuda = self.device.type == "cuda"
        launch_steps = 1 + len(batches[sampling_batches[0]].ahead) if seqs else 1
        # the step after which only num_reserve_steps are left (-1: none; schedule at once)
        mark_after = launch_steps - 1 - plan.num_reserve_steps if is_cuda else -1
        last_batch = sampling_batches[-1] if seqs else -1
        schedule_at = None
        sampling = {}
        guided = batch.grammar_rows is not None
        step_tokens = {}  # guided: micro-batch -> its last step's tokens on the host
        if guided:
            self.grammar_bitmask.start_launch()
        # beam rows (one rank, one step a launch): their candidates from the step's logits
        beams = None if batch.beam_rows is None else LaunchBeamCandidates.plan(batch, self.device)

        def take_tokens(m: int, step: int, logits: torch.Tensor | None) -> torch.Tensor:
            nonlocal schedule_at
            with phase("engine.sample"):
                if beams is not None and step == 0:
                    beams.add(logits)
                if m not in sampling:
                    sampling[m] = sampling_tensors(
                        packed[m].seqs, self.device, self.model.vocab_size
                    )
                if guided:  # on the host while the forward runs
                    sampling[m].token_bitmask = self.grammar_bitmask.fill(
                        packed[m].seqs, self._last_tokens, step_tokens.get(m)
                    )
                tokens = self.tp.broadcast(self.sampler(logits, sampling[m]))
                if guided and step < launch_steps - 1:  # queued before the next forward
                    step_tokens[m] = self._step_tokens_to_host(tokens)
            if m == last_batch and step == mark_after and step < launch_steps - 1:
                schedule_at = _recorded_event()
            return tokens

        tokens = run_launch(batches, self.stage, take_tokens)
        if not seqs:
            return SampledTokens([], None, None, 1)
        steps = [_cat([tokens[m][j] for m in sampling_batches]) for j in range(launch_steps)]
        self._last_sampled = steps[-1]
        tokens = _cat(steps)  # [steps * S], step-major
        drafts = None
        if batch.draft_token_ids is not None:  # a verify step: [R] tokens, row after row
            seqs, drafts = verified_rows(batch)
        last = slice((launch_steps - 1) * len(seqs), None)  # where pending tokens are
        if not is_cuda:
            self._last_tokens = tokens[last], None
            return SampledTokens(seqs, tokens, None, launch_steps, drafts=drafts)
        host = self._tokens_ring.take(tokens.numel())
        host.copy_(tokens, non_blocking=True)
        done = self._tokens_ring.copied()
        self._last_tokens = host[last], done
        return SampledTokens(seqs, host, done, launch_steps, schedule_at, drafts)

    def _step_tokens_to_host(self, tokens: torch.Tensor) -> HostTokens:
        if self.device.type != "cuda":
            return tokens, None
        host = self._step_tokens_ring.take(tokens.numel())
        host.copy_(tokens, non_blocking=True)
        return host, self._step_tokens_ring.copied()

    @torch.inference_mode()
    def follow(self) -> None:
        """A worker rank: run rank 0's launches until it says stop (then it closes: it
        leaves the process groups, see RankGroups.close)."""
        channel = self.ranks.channel
        while True:
            command, headers, body = channel.recv()
            if command == STOP:
                break
            if command == SCORE:
                self._prompt_logits(body.view(headers[0].num_seqs, -1))
                channel.copied()
                continue
            if command == SWAP:
                self.host_tier.receive(body)
                channel.copied()
                continue
            if command == LORA:
                self.lora.load_slots(body.view(-1, 2).numpy())
                channel.copied()
                continue
            if self.stage.link is not None:
                self.stage.link.settle()
            packed = body.to(self.device, non_blocking=True)
            channel.copied()
            batches = self.packer.unpack(headers, packed, self._last_sampled)
            tokens = run_launch(batches, self.stage, self._receive_tokens(batches))
            if self.host_tier is not None:
                self.host_tier.settle()
            last = [t[-1] for t, b in zip(tokens, batches, strict=True) if b.num_sampled and t]
            if last:
                self._last_sampled = _cat(last)

    def _receive_tokens(self, batches: list[StepInputs]) -> TakeTokens:
        """A worker's take_tokens: the driver's sampled tokens, broadcast to the first stage."""

        def receive(m: int, step: int, logits: torch.Tensor | None) -> torch.Tensor:
            buf = torch.empty(batches[m].num_sampled, dtype=torch.int64, device=self.device)
            return self.tp.broadcast(buf)

        return receive

    @torch.inference_mode()
    def prompt_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [B, S, V] of B equal-length prompts (ids [B, S] int64, host), one prefill on
        a scratch KV cache; the other ranks run it too (rank 0 sends the ids), each stage its
        layers, in order with the launches."""
        if self.ranks is not None:  # header: the number of prompts
            header = StepHeader(num_seqs=ids.shape[0])
            self.ranks.channel.send(SCORE, [header], ids.reshape(-1).contiguous())
        return self._prompt_logits(ids)

    def _prompt_logits(self, ids: torch.Tensor) -> torch.Tensor | None:
        if self.lora is not None:  # the base model's logits
            self.lora.batch.set_step(None)
        layers, _, kv_heads, head_dim = self.kv_layout
        return stage_prompt_logits(
            self.model, self.stage, ids, self.device, layers, kv_heads, head_dim, self.kv_dtype
        )

    def close(self) -> None:
        """Rank 0: stop the worker ranks; every rank: leave the process groups (a worker after
        STOP, as rank 0 does, at the same time)."""
        if self.ranks is None or self._is_closed:
            return
        self._is_closed = True
        # NCCL's teardown waits for the CUDA graphs that captured its collectives (a TP engine's
        # close hung there on 2x H100/H200); the engine does not run after close
        self.graphs = None
        stop_ranks(self.ranks, self.workers)


def _cat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def _recorded_event() -> torch.cuda.Event:
    event = torch.cuda.Event()
    event.record()
    return event
