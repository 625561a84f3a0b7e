"""The synchronous engine: requests in, tokens out, one scheduled step at a time."""

import json
import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import AutoTokenizer

from pipeline.engine.core.delta_scores import delta_scores
from pipeline.engine.core.engine_stats import engine_stats
from pipeline.engine.core.launch_policy import LaunchPolicy
from pipeline.engine.engine_config import EngineConfig, load_engine_config
from pipeline.engine.execution.model_runner import ModelRunner
from pipeline.engine.execution.phase_range import phase
from pipeline.engine.execution.weights import load_rank_weights
from pipeline.engine.kernels.tuned_configs import install_engine_configs
from pipeline.engine.lora.manager import UnknownAdapter
from pipeline.engine.scheduling.beam_search import check_beam_request
from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.prefix_cache import PrefixCachingBlockManager
from pipeline.engine.scheduling.sampled_tokens import SampledTokens
from pipeline.engine.scheduling.scheduler import Scheduler
from pipeline.engine.scheduling.scheduler_output import SchedulerOutput
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.engine.spec.speculator import make_speculator
from pipeline.request.limits import RequestLimits
from pipeline.request.outputs import RequestOutput, StreamDelta
from pipeline.request.sampling_params import SamplingParams

logger = logging.getLogger(__name__)
# failed launches in a row (a request alone, or a batch being isolated) after which the engine,
# not a request, is taken to be failing
MAX_FAILED_LAUNCHES = 8


class EngineFailure(RuntimeError):
    """The engine cannot go on (its device or model failed, not one request): every request in
    flight is lost, and whoever owns the engine must replace it."""


def model_eos_token_ids(tokenizer_dir: Path, tokenizer) -> tuple[int, ...]:
    """generation_config.json's eos_token_id (int or list), else the tokenizer's eos token."""
    path = tokenizer_dir / "generation_config.json"
    eos = json.loads(path.read_text()).get("eos_token_id") if path.is_file() else None
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, list) else (eos,)


class LLMEngine:
    """Owns the tokenizer, the scheduler (queues + block manager) and the model runner (device
    state). Not thread-safe: AsyncLLMEngine drives it from one thread."""

    def __init__(self, config: EngineConfig):
        tokenizer_dir = config.engine_dir / "tokenizer"
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        self.eos_token_ids = model_eos_token_ids(tokenizer_dir, self.tokenizer)
        weights = load_rank_weights(
            config.engine_dir, 0, config.device, config.weights_loader
        )  # rank 0's; with several ranks the model runner starts the others
        if config.device.type == "cuda":  # before the runner warms up and captures its kernels
            install_engine_configs(config.engine_dir, config.device.index or 0)
        self.model_runner = ModelRunner(config, weights)
        del weights  # the model holds what it needs (possibly repacked or on the GPU)
        self.speculator = make_speculator(config)
        runner = self.model_runner
        self.launch_policy = LaunchPolicy(runner.num_scheduler_steps, runner.max_scheduler_steps)
        block_manager = (
            PrefixCachingBlockManager(
                runner.num_kv_blocks,
                config.block_size,
                config.max_batch_size,
                runner.max_blocks_per_seq,
                str(runner.kv_dtype),
                runner.num_host_blocks,
                runner.swap_costs,
            )
            if config.enable_prefix_caching
            else BlockManager(
                runner.num_kv_blocks,
                config.block_size,
                config.max_batch_size,
                runner.max_blocks_per_seq,
            )
        )
        self.scheduler = Scheduler(
            block_manager,
            config.max_batch_size,
            config.max_num_tokens,
            config.scheduler_policy,
            config.enable_chunked_prefill,
            num_lookahead_tokens=runner.max_scheduler_steps - 1,
            max_loras=config.lora.max_loras if config.lora else 0,
        )
        self.limits = RequestLimits(
            max_input_len=config.max_input_len,
            max_seq_len=config.max_seq_len,
            max_num_tokens=config.max_num_tokens,
            vocab_size=config.model.vocab_size,
            block_size=config.block_size,
            num_kv_blocks=block_manager.num_total_blocks,
            enable_chunked_prefill=config.enable_chunked_prefill,
        )
        self.max_batch_size, self.max_num_tokens = config.max_batch_size, config.max_num_tokens
        self.scheduler_policy = config.scheduler_policy
        self.max_beam_width = config.max_beam_width
        self._requests: dict[str, Sequence] = {}  # unfinished, by request id
        self._cancelled: list[StreamDelta] = []  # reported by the next step()
        self.overlap_scheduling = config.overlap_scheduling
        self._in_flight: SampledTokens | None = None  # launched, not postprocessed (overlap)
        self._num_failed_launches = 0  # in a row
        self._num_steps = self._num_scheduled_tokens = self._num_generated_tokens = 0
        self._num_prompt_steps = 0  # steps that carried prompt tokens (prefill or mixed)
        self._num_scheduled_seqs = 0  # summed over steps: / num_steps is the mean batch
        # finished requests' times from arrival, summed: queued (until first admitted to the
        # running batch), first token and final token on the host
        self._num_finished = 0
        self._queue_s = self._first_token_s = self._final_s = 0.0
        self._grammars = None  # guided decoding's GrammarCompiler, made for the first guide

    @property
    def num_scheduler_steps(self) -> int:
        """Steps the next launch runs (the launch policy's count)."""
        return self.launch_policy.num_steps

    @classmethod
    def from_engine_dir(cls, path: str | Path, device: str = "auto", **runtime) -> "LLMEngine":
        return cls(load_engine_config(Path(path), device, runtime))

    def validate_request(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        """Raise ValueError for a request this engine can never serve (any thread may call it)."""
        self.limits.check(prompt_token_ids, params)
        if params.scores_prompt and self.model_runner.mapping.world_size > 1:
            raise ValueError(
                "request: prompt_logprobs / return_context_logits need an engine of one rank "
                "(this one has tp_size x pp_size > 1); leave them out"
            )
        if params.beam_width > 1:
            check_beam_request(params, self.max_beam_width, self.model_runner.mapping.world_size)
        if params.guide is not None:  # compiled here, off the engine thread when served
            self.grammar_compiler().compile(params.guide)

    def grammar_compiler(self):
        """Guided decoding's compiler for this engine's tokenizer and logits width (xgrammar
        is loaded with the first guided request)."""
        if self._grammars is None:
            from pipeline.engine.guided.grammar_compiler import GrammarCompiler, tokenizer_info

            info = tokenizer_info(
                self.tokenizer, self.model_runner.model.vocab_size, self.eos_token_ids
            )
            self._grammars = GrammarCompiler(info)
        return self._grammars

    def add_request(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        request_id: str | None = None,
        arrival_time_s: float | None = None,
    ) -> str:
        """arrival_time_s: perf_counter() when the request reached the engine's front (default
        now), where its queue time starts."""
        return self._add(list(prompt_token_ids), params, request_id, arrival_time_s).request_id

    def _add(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        request_id: str | None,
        arrival_time_s: float | None = None,
    ) -> Sequence:
        request_id = uuid.uuid4().hex if request_id is None else request_id
        if request_id in self._requests:
            raise ValueError(f"request: id {request_id!r} is already in flight")
        self.validate_request(prompt_token_ids, params)
        seq = Sequence(request_id, prompt_token_ids, params, self.eos_token_ids, arrival_time_s)
        seq.lora_id = self.lora_id(params.lora_name)
        seq.kv_extra_key = seq.lora_id or None  # an adapter's K/V differ from the base model's
        if params.guide is not None:
            from pipeline.engine.guided.grammar_state import GrammarState

            seq.grammar = GrammarState(self.grammar_compiler().compile(params.guide), seq.end_ids)
        self._requests[request_id] = seq
        self.scheduler.add(seq)
        return seq

    def lora_id(self, name: str | None) -> int:
        """The engine's id of adapter `name` (0 for None); UnknownAdapter (a ValueError) naming
        the known ones when neither the engine nor its adapter dir has it."""
        lora = self.model_runner.lora
        if name is not None and lora is None:
            raise UnknownAdapter(
                f"lora adapter {name!r}: this engine serves no adapters (start it with lora_dir)"
            )
        return 0 if lora is None else lora.resolve(name)

    def lora_names(self) -> list[str]:
        lora = self.model_runner.lora
        return [] if lora is None else lora.names()

    def has_unfinished(self) -> bool:
        return (
            self.scheduler.has_unfinished() or bool(self._cancelled) or self._in_flight is not None
        )

    def abort(self, request_id: str) -> bool:
        """Cancel a request; its final delta (finish_reason "cancelled") comes with the next
        step(). False when it is unknown or already finished."""
        seq = self.scheduler.abort(request_id)
        if seq is None:
            return False
        del self._requests[request_id]
        self._cancelled.append(StreamDelta(request_id, [], True, "cancelled"))
        return True

    def step(self, admit: Callable[[], None] | None = None) -> list[StreamDelta]:
        """Schedule and launch a step; return the deltas of the step the host has finished.

        With overlap scheduling, step N+1 is launched before step N's tokens are read, so the
        host's scheduling, packing and bookkeeping run while the device computes: each call
        reports the previous step, and a sequence that step N ends has a wasted row in N+1.
        Without it, each call launches a step and reports it.

        admit: adds the requests that arrived (add_request, abort) just before scheduling, which
        then waits until the launch in flight has only its reserve steps left (LaunchPolicy): a
        request that arrives meanwhile joins step N+1 instead of waiting a whole launch more.
        Without it (generate(): nothing can arrive) the next step is scheduled at once."""
        policy = self.launch_policy
        policy.start_step(self._in_flight, admit is not None)
        if admit is not None:
            admit()
        deltas, self._cancelled = self._cancelled, []
        if self.speculator is not None:
            self._speculate(deltas)
        with phase("engine.schedule"):
            batch = self.scheduler.schedule()
        launched = self._launch_or_isolate(batch, deltas) if batch else None
        policy.queued()
        # a verify step's tokens are read at once: the next step's drafts follow them
        overlap = self.overlap_scheduling and (launched is None or launched.drafts is None)
        finished, self._in_flight = (self._in_flight, launched) if overlap else (launched, None)
        if finished is not None:
            with phase("engine.postprocess"):
                self._update(finished, deltas)
        # a verify step's tokens are read at once by design: not a launch that paces the rest
        paced = finished is not None and finished.drafts is None
        policy.end_step(launched is not None, paced, self._in_flight is not None)
        return deltas

    def _speculate(self, deltas: list[StreamDelta]) -> None:
        """Drafts for the requests that speculate next (spec/speculator.py); the launch in
        flight, if any, is read first, since a request's drafts follow its newest token. A step
        without drafts leaves overlap scheduling and several steps a launch as they were."""
        planned = self.speculator.plan(self.scheduler.running, len(self.scheduler.waiting))
        if not planned:
            return
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            with phase("engine.postprocess"):
                self._update(in_flight, deltas)
        with phase("engine.propose"):
            self.speculator.propose(planned)

    def _launch_or_isolate(
        self, batch: SchedulerOutput, deltas: list[StreamDelta]
    ) -> SampledTokens | None:
        """Launch; when that fails, fail the one sequence launched, or isolate a batch's
        sequences to find the one that fails alone. EngineFailure when the model itself no
        longer runs, or too many launches failed in a row."""
        try:
            launched = self.model_runner.launch(batch, self.launch_policy.plan(batch))
        except Exception as exc:  # noqa: BLE001 - any request-caused failure stays its own
            self._num_failed_launches += 1
            if self._num_failed_launches >= MAX_FAILED_LAUNCHES or not self._is_model_healthy():
                raise EngineFailure(f"engine: launches keep failing: {exc!r}") from exc
            seqs = batch.seqs
            if len(seqs) == 1:
                logger.warning("request %s failed its launch: %r", seqs[0].request_id, exc)
                self.scheduler.finish(seqs[0], "error")
                self._failed(seqs[0], f"{type(exc).__name__}: {exc}", deltas)
            else:
                logger.warning("a launch of %d failed (%r): each runs alone", len(seqs), exc)
                self.scheduler.isolate(list(seqs))
            return None
        self._num_failed_launches = 0
        self.scheduler.update_from_launch(batch, launched)
        num_tokens, num_ahead = batch.total_num_tokens, launched.num_steps - 1
        num_sampled = len(launched.seqs)
        self._num_steps += launched.num_steps
        self._num_scheduled_tokens += num_tokens + num_ahead * num_sampled
        self._num_prompt_steps += num_tokens > len(batch)
        self._num_scheduled_seqs += len(batch) + num_ahead * num_sampled
        return launched

    def _is_model_healthy(self) -> bool:
        """One token through the model on a scratch KV cache gives finite logits. Never, after
        a failed launch, for a multi-rank engine: the other ranks may have run that launch's
        collectives past the point where rank 0 failed, so they are out of step (restart)."""
        if self.model_runner.mapping.world_size > 1:
            logger.error("engine: a launch failed on a multi-rank engine: its ranks restart")
            return False
        try:
            return bool(torch.isfinite(self.prompt_logits([[0]])).all())
        except Exception:  # noqa: BLE001 - any failure here means it is not
            logger.exception("engine: the model fails a one-token check")
            return False

    def _failed(self, seq: Sequence, error: str, deltas: list[StreamDelta]) -> None:
        del self._requests[seq.request_id]
        deltas.append(StreamDelta(seq.request_id, [], True, "error", error))

    def _update(self, sampled: SampledTokens, deltas: list[StreamDelta]) -> None:
        """Read a launch's tokens; the scheduler updates its sequences, and each one still
        running when it was read gets its delta."""
        try:
            tokens = self.launch_policy.read_tokens(sampled)
        except Exception as exc:  # the device failed: no launch's tokens can be trusted now
            raise EngineFailure(f"engine: reading sampled tokens failed: {exc!r}") from exc
        if self.speculator is not None and sampled.drafts is not None:
            self.speculator.observe(sampled, tokens)
        for seq, num_new, num_taken, reason, error in self.scheduler.update_from_output(
            sampled, tokens
        ):
            if error is not None:
                self._failed(seq, error, deltas)
                continue
            self._num_generated_tokens += num_taken
            if reason is not None:
                del self._requests[seq.request_id]
                self._num_finished += 1
                self._queue_s += seq.admitted_time_s - seq.arrival_time_s
                self._first_token_s += seq.first_token_time_s - seq.arrival_time_s
                self._final_s += seq.finish_time_s - seq.arrival_time_s
            new = seq.token_ids[len(seq.token_ids) - num_new :]
            logprobs = seq.logprobs
            if logprobs is not None:  # one per token kept
                logprobs = logprobs[len(logprobs) - num_new :]
            deltas.append(
                StreamDelta(
                    seq.request_id,
                    new,
                    reason is not None,
                    reason,
                    logprobs=logprobs,
                    num_cached_tokens=seq.num_cached_tokens if reason is not None else 0,
                    **delta_scores(seq, num_new, self.scheduler.block_manager.block_size),
                )
            )

    def generate(
        self,
        prompts: list[str] | list[list[int]],
        params: SamplingParams | list[SamplingParams],
        use_tqdm: bool = False,
    ) -> list[RequestOutput]:
        """Run these prompts to completion (requests already in flight progress too)."""
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError(f"generate: {len(prompts)} prompts but {len(params_list)} params")
        token_lists = [self.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompts]
        for token_ids, p in zip(token_lists, params_list, strict=True):
            self.validate_request(token_ids, p)
        seqs = [self._add(t, p, None) for t, p in zip(token_lists, params_list, strict=True)]
        ids = {seq.request_id for seq in seqs}
        with tqdm(total=len(seqs), desc="generate", disable=not use_tqdm) as bar:
            while not all(seq.is_finished for seq in seqs):
                bar.update(sum(d.finished and d.request_id in ids for d in self.step()))
        if not self.scheduler.has_unfinished():  # retire the launch left with their spare rows
            while self.has_unfinished():
                self.step()
        return [seq.output(self.decode(seq.completion_token_ids)) for seq in seqs]

    def prompt_logits(self, token_ids: list[list[int]]) -> torch.Tensor:
        """Logits [B, S, V] for B equal-length prompts, as one prefill of this engine's model
        (on a scratch KV cache: safe while requests are running)."""
        return self.model_runner.prompt_logits(torch.tensor(token_ids, dtype=torch.int64))

    def close(self) -> None:
        """Stop the worker ranks of a tensor / pipeline parallel engine (nothing for one rank)."""
        if self.speculator is not None:
            self.speculator.close()
        self.model_runner.close()

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def stats(self) -> dict:
        return engine_stats(self)
