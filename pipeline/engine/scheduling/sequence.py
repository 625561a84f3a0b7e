"""Per-request state: tokens, progress through the KV cache, block table, stop rules, timings.

Tokens sampled on the device but not yet on the host are "pending": with overlap scheduling the
engine launches step N+1 before it reads step N's tokens, so a sequence's next input token may
exist only in the previous step's output tensor (row pending_row)."""

import time
from collections import deque
from enum import Enum

import numpy as np
import torch

from pipeline.engine.scheduling.prompt_scores import PromptScoresBuilder
from pipeline.request.outputs import BeamOutput, RequestOutput
from pipeline.request.sampling_params import SamplingParams


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    """One request. The scheduler moves it between queues, the block manager gives it blocks
    (a row of its block-table array), the model runner reads it (and creates its seeded
    generator), the engine appends sampled tokens."""

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        eos_token_ids: tuple[int, ...],
        arrival_time_s: float | None = None,
    ):
        self.request_id = request_id
        self.params = params
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(self.token_ids)
        self.status = SequenceStatus.WAITING
        self.block_row = -1  # its row in the block manager's tables; -1 while it holds none
        self.num_blocks = 0
        # K/V slots this request can ever need (the last sampled token is never fed back)
        self.max_kv_tokens = self.num_prompt_tokens + params.max_tokens - 1
        self.num_computed_tokens = 0  # tokens whose K/V is in the cache (or is being written)
        self.num_pending_tokens = 0  # sampled by launched steps, not appended yet
        self.pending_row = 0  # row of the newest pending token in its step's sampled tokens
        # a bad sequence of 2+ tokens bans its last token only after the others: the sampler
        # needs this sequence's latest token on the host
        self.needs_host_tokens = any(len(bad) > 1 for bad in params.bad_sequences)
        # speculative decoding: tokens proposed to follow token_ids, which the next step feeds
        # after the newest token when the scheduler gives it room (set before each schedule)
        self.draft_token_ids: list[int] = []
        # guided decoding: the grammar's matcher (set by the engine); a pending token is read
        # from its launch's host copy before the next bitmask is filled (grammar_bitmask.py)
        self.grammar = None
        self.num_preemptions = 0
        # prefix caching (prefix_cache.py): what besides its tokens changes its K/V (a LoRA
        # adapter's id), its full blocks' hash chain so far, how many of the blocks it holds are
        # in the cache, those of them not named yet (a Tail), and how many prompt tokens its
        # first admission found cached
        self.kv_extra_key: object = None
        self.block_hashes: list[bytes] = []
        self.num_cached_blocks = 0
        self.kv_tail = None
        self.num_cached_tokens = 0
        # the engine's id of params.lora_name's adapter (0: none); a prefix cache keys on it too
        self.lora_id = 0
        self.finish_reason: str | None = None
        self.generator: torch.Generator | None = None
        # [2, V] on the device, made by the runner and updated by the sampler (layers/penalties.py)
        self.penalty_counts: torch.Tensor | None = None
        # each generated token's log probability (params.logprobs set); the launches sampled
        # but not read yet: (their LaunchLogprobs, this sequence's row), oldest first
        self.logprobs: list[float] | None = None if params.logprobs is None else []
        self.top_logprobs: list | None = [] if params.logprobs else None  # [(id, logprob)...]
        self.generation_logits: list | None = [] if params.return_generation_logits else None
        self._pending_logprobs: deque = deque()
        self.prompt_scores: PromptScoresBuilder | None = None
        if params.scores_prompt:
            self.prompt_scores = PromptScoresBuilder(
                self.num_prompt_tokens, params.prompt_logprobs, params.return_context_logits
            )
        if params.ignore_eos:
            self.end_ids = frozenset()
        else:
            self.end_ids = frozenset(
                [params.end_id] if params.end_id is not None else eos_token_ids
            )
        # tokens that end it on sight; with no stop sequences, tokens that avoid them all (and
        # max_tokens) are appended in one go
        self._stop_ids = self.end_ids | frozenset(params.stop_token_ids)
        self.arrival_time_s = time.perf_counter() if arrival_time_s is None else arrival_time_s
        self.admitted_time_s: float | None = None  # first moved to the running batch
        self.first_token_time_s: float | None = None
        self.finish_time_s: float | None = None
        self.reported_prompt_scores = None  # its PromptScores, once its first delta took them
        # beam search (beam_search.py): its request's BeamRequest (every beam's and the handle's),
        # and on the handle once done, the beams best first
        self.beam = None
        self.beam_outputs: tuple[BeamOutput, ...] | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) + self.num_pending_tokens - self.num_computed_tokens

    @property
    def is_ending(self) -> bool:
        """Its pending token ends it whatever the token is (max_tokens reached): a further
        step would be wasted, and would need a KV slot past max_kv_tokens."""
        return (
            self.num_pending_tokens > 0
            and self.num_completion_tokens + self.num_pending_tokens >= self.params.max_tokens
        )

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    def reaches_end(self, num_scheduled_tokens: int) -> bool:
        """True when a step over this many tokens yields logits for the next token."""
        return self.num_computed_tokens + num_scheduled_tokens == (
            len(self.token_ids) + self.num_pending_tokens
        )

    def kv_tokens_after(self, num_scheduled_tokens: int, num_ahead: int) -> int:
        """K/V slots in use after a step over this many tokens and, when it samples, num_ahead
        decode steps after it (num_scheduler_steps); never past max_kv_tokens, since rows
        beyond what the request can use write a scratch slot."""
        end = self.num_computed_tokens + num_scheduled_tokens
        if num_ahead and self.reaches_end(num_scheduled_tokens):
            return max(end, min(end + num_ahead, self.max_kv_tokens))
        return end

    def banned_token_ids(self) -> list[int]:
        """Last tokens of bad_sequences whose other tokens end the sequence right now."""
        banned = []
        for bad in self.params.bad_sequences:
            head = list(bad[:-1])
            if not head or self.token_ids[-len(head) :] == head:
                banned.append(bad[-1])
        return banned

    def expect_logprobs(self, launch, row: int) -> None:
        """A launch samples this sequence in `row`; its log probabilities come with its tokens.
        With no tokens pending, any launch still listed failed before it was read."""
        if not self.num_pending_tokens:
            self._pending_logprobs.clear()
        self._pending_logprobs.append((launch, row))

    def append_tokens(self, token_ids: list[int]) -> tuple[int, str | None]:
        """Record a launch's sampled tokens in order until a stop rule fires: (how many it
        took, the finish reason or None)."""
        num_before = len(self.token_ids)
        if (
            len(token_ids) < self.params.max_tokens - self.num_completion_tokens
            and not self.params.stop_sequences
            and self._stop_ids.isdisjoint(token_ids)
            # last: a grammar keeps the tokens it says yes to (each taken ahead, none ending it)
            and (self.grammar is None or self.grammar.accept_all(token_ids))
        ):  # no rule can fire: what append_token would do for each
            if self.first_token_time_s is None:
                self.first_token_time_s = time.perf_counter()
            self.token_ids += token_ids
            num_taken, reason = len(token_ids), None
        else:
            num_taken, reason = len(token_ids), None
            for i, token_id in enumerate(token_ids, 1):
                reason = self.append_token(token_id)
                if reason is not None:
                    num_taken = i
                    break
        if self._pending_logprobs:
            launch, row = self._pending_logprobs.popleft()
            # the tokens kept (an end token is not), each with its log probability
            num_kept = len(self.token_ids) - num_before
            if self.logprobs is not None:
                self.logprobs += launch.row(row)[:num_kept]
            if self.top_logprobs is not None:
                self.top_logprobs += launch.top_row(row, self.params.logprobs)[:num_kept]
            if self.generation_logits is not None:
                self.generation_logits += list(launch.logits_row(row)[:num_kept])
        return num_taken, reason

    def append_token(self, token_id: int) -> str | None:
        """Record a sampled token; return the finish reason when a stop rule fires.

        The end (eos) token is not kept in the output, as in TensorRT-LLM; stop tokens and stop
        sequences are kept."""
        if self.first_token_time_s is None:
            self.first_token_time_s = time.perf_counter()
        if self.grammar is not None and not self.grammar.accept(token_id):
            raise ValueError(f"guided decoding: token {token_id} is outside the request's grammar")
        if token_id in self.end_ids:
            return "stop"
        self.token_ids.append(token_id)
        if token_id in self.params.stop_token_ids or self._ends_with_stop_sequence():
            return "stop"
        if self.grammar is not None and self.grammar.is_terminated:  # its grammar is complete
            return "stop"
        if self.num_completion_tokens >= self.params.max_tokens:
            return "length"
        return None

    def mark_finished(self, reason: str) -> None:
        self.status = SequenceStatus.FINISHED
        self.finish_reason = reason
        self.finish_time_s = time.perf_counter()

    def _ends_with_stop_sequence(self) -> bool:
        # per token: compares each stop's tail only, never copying the whole completion
        stops = self.params.stop_sequences
        if not stops:
            return False
        num_completion = self.num_completion_tokens
        return any(
            len(stop) <= num_completion and tuple(self.token_ids[-len(stop) :]) == stop
            for stop in stops
        )

    def output(self, text: str) -> RequestOutput:
        """The whole request's output (text: its completion tokens, decoded)."""
        return RequestOutput(
            request_id=self.request_id,
            prompt_token_ids=self.prompt_token_ids,
            token_ids=self.completion_token_ids,
            text=text,
            finish_reason=self.finish_reason,
            arrival_time_s=self.arrival_time_s,
            first_token_time_s=self.first_token_time_s,
            finish_time_s=self.finish_time_s,
            logprobs=None if self.logprobs is None else list(self.logprobs),
            num_cached_tokens=self.num_cached_tokens,
            top_logprobs=None if self.top_logprobs is None else list(self.top_logprobs),
            prompt=self.reported_prompt_scores,
            generation_logits=_stacked(self.generation_logits),
            beams=self.beam_outputs,
        )


def _stacked(rows: list | None):
    return None if rows is None else np.stack(rows) if rows else np.zeros((0, 0), np.float32)
