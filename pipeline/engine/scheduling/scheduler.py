"""In-flight batching: which sequences run this step, and how many tokens each feeds.

Every step spends at most max_num_tokens tokens: running sequences first (a decode token each,
or their next prompt chunk), then waiting ones in arrival order while the batch has room.
Policies (TensorRT-LLM's CapacitySchedulerPolicy):
- guaranteed_no_evict: admit a request only when blocks for its whole prompt + max_tokens are
  free, and reserve them, so a running request never waits for memory;
- max_utilization: admit when the next chunk fits; when blocks run out, preempt the newest
  running request (its blocks are freed and it is recomputed from its tokens later).
A sequence whose step samples also gets blocks for num_lookahead_tokens more: the engine may decode
it that many steps further before scheduling again (num_scheduler_steps).

After each launch the scheduler alone updates the sequences from what ran: update_from_launch
(their progress, the tokens they owe until read) and update_from_output (append the sampled
tokens up to a stop, finish, free blocks), as vLLM v1's Scheduler.update_from_output.

Suspects: when a launch of several sequences fails, one of them may have caused it. They are
preempted and each is then scheduled alone, one a step, until a launch that samples it succeeds;
one that fails alone is the cause, and only it is failed (LLMEngine). The others pause meanwhile.
"""

import dataclasses
import logging
import time
from collections import deque

import numpy as np

from pipeline.engine.scheduling.beam_search import BeamSearch, beam_rows, new_beam_request
from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.lora_admission import lora_admits
from pipeline.engine.scheduling.sampled_tokens import SampledTokens
from pipeline.engine.scheduling.scheduler_output import SchedulerOutput, scheduler_output
from pipeline.engine.scheduling.sequence import Sequence, SequenceStatus
from pipeline.engine.scheduling.spec_tokens import accepted_tokens, rows_of

logger = logging.getLogger(__name__)

POLICIES = ("guaranteed_no_evict", "max_utilization")


# what a launch's tokens did to one sequence: (the sequence, tokens appended (an end token is
# not), sampled tokens used up to its stop (an end token is), finish reason or None, error or None
# (its own stop rules failed on its tokens: finished "error")); a plain tuple, one a sequence
# and launch, since a named one costs several times more to build
SequenceUpdate = tuple[Sequence, int, int, str | None, str | None]


class Scheduler:
    """Owns the waiting and running queues and the block manager."""

    def __init__(
        self,
        block_manager: BlockManager,
        max_batch_size: int,
        max_num_tokens: int,
        policy: str,
        enable_chunked_prefill: bool,
        num_lookahead_tokens: int = 0,
        max_loras: int = 0,
    ):
        assert policy in POLICIES, policy
        self.block_manager = block_manager
        self.max_batch_size = max_batch_size
        self.max_num_tokens = max_num_tokens
        self.is_no_evict = policy == "guaranteed_no_evict"
        self.enable_chunked_prefill = enable_chunked_prefill
        self.num_lookahead_tokens = num_lookahead_tokens
        self.caches_prefixes = block_manager.caches_prefixes  # prefix_cache.py
        self.max_loras = max_loras  # distinct adapters the running batch may hold (0: none)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.suspects: set[Sequence] = set()  # in a failed launch, not yet sampled alone
        self.beams = BeamSearch(block_manager, self.running, self.waiting, max_batch_size)

    def add(self, seq: Sequence) -> None:
        if seq.params.beam_width > 1:
            new_beam_request(seq)
            self.beams.num_requests += 1
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        """What runs this step (empty: nothing can)."""
        seqs: list[Sequence] = []
        num_tokens: list[int] = []
        if self.suspects:
            self._schedule_suspect(seqs, num_tokens)
        if not seqs:
            self._schedule_batch(seqs, num_tokens)
        batch = scheduler_output(seqs, num_tokens, self.block_manager.tables)
        # the host tier's and forked beams' copies run before this step
        if (self.caches_prefixes or self.block_manager.has_copies) and seqs:
            copies = self.block_manager.take_copies()
            if copies is not None:
                batch = dataclasses.replace(batch, blocks_to_copy=copies)
        if self.beams.num_requests:
            batch = dataclasses.replace(batch, beam_rows=beam_rows(seqs))
        if self.max_loras:
            lora_ids = np.fromiter((s.lora_id for s in seqs), np.int64, len(seqs))
            batch = dataclasses.replace(batch, lora_ids=lora_ids)
        return batch

    def _schedule_batch(self, scheduled: list[Sequence], scheduled_tokens: list[int]) -> None:
        budget, suspects = self.max_num_tokens, self.suspects
        num_preemptions_before = self.num_preemptions
        # running: decodes and unfinished prompt chunks, oldest first
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            is_suspect = suspects and seq in suspects
            num_tokens = 0 if is_suspect else self._num_tokens_to_run(seq, budget)
            if num_tokens == 0:
                i += 1
            elif self._make_room(seq, num_tokens):
                scheduled.append(seq)
                scheduled_tokens.append(num_tokens)
                budget -= num_tokens
                i += 1
                if num_tokens > 1 and self.caches_prefixes:  # a prompt chunk: blocks to share
                    self.block_manager.computes(seq, num_tokens)
        # after a preemption, admitting new work would only take the freed blocks back
        has_preempted = self.num_preemptions > num_preemptions_before
        # waiting: admit in arrival order; stop at the first that does not fit (no overtaking)
        while (
            self.waiting
            and budget > 0
            and len(self.running) < self.max_batch_size
            and not has_preempted
        ):
            seq = self.waiting[0]
            num_tokens = 0 if suspects and seq in suspects else self._admit(seq, budget)
            if num_tokens == 0:
                break
            if num_tokens < 0:  # admitted; it runs once its blocks are swapped in
                continue
            scheduled.append(seq)
            scheduled_tokens.append(num_tokens)
            budget -= num_tokens
            if num_tokens > 1 and self.caches_prefixes:
                self.block_manager.computes(seq, num_tokens)

    def _admit(self, seq: Sequence, budget: int) -> int:
        """Move the first waiting sequence to the running batch if its next chunk fits:
        the tokens it runs this step, 0 (it stays waiting), or -1: admitted, but its cached
        prefix is copied in from the host tier with this step's launch, so it runs from the
        next step (the copy overlaps this step instead of holding it up)."""
        if self.max_loras and not lora_admits(self.running, seq, self.max_loras):
            return 0
        beams = self.beams
        if seq.beam is not None and not beams.admits(seq, self.max_batch_size, self.is_no_evict):
            return 0
        hit = None
        # its cached prefix is computed already; a request that scores its prompt computes it all
        if self.caches_prefixes and not seq.params.scores_prompt:
            hit = self.block_manager.find_prefix(seq)
            if self.block_manager.is_being_computed(seq, hit):  # shared once named: wait
                return 0
            seq.num_computed_tokens = len(hit) * self.block_manager.block_size
        swaps_in = hit is not None and self.block_manager.swaps_in(hit)
        num_tokens = self._num_tokens_to_run(seq, budget)
        needed = seq.kv_tokens_after(num_tokens, self.num_lookahead_tokens)
        if self.is_no_evict:
            needed = max(needed, seq.max_kv_tokens)
        if num_tokens == 0 or not (
            self.block_manager.grow(seq, needed)
            if hit is None
            else self.block_manager.grow_from_prefix(seq, needed, hit)
        ):
            seq.num_computed_tokens = 0
            return 0
        self.waiting.popleft()
        if seq.admitted_time_s is None:  # not a preempted one's return
            seq.admitted_time_s = time.perf_counter()
            seq.num_cached_tokens = seq.num_computed_tokens
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)
        return -1 if swaps_in else num_tokens

    def _schedule_suspect(self, scheduled: list[Sequence], scheduled_tokens: list[int]) -> None:
        """The oldest suspect's next chunk, alone; nothing when it cannot run this step."""
        num_tokens = 0
        for seq in self.running:  # part-way through its prompt
            if seq in self.suspects:
                num_tokens = self._num_tokens_to_run(seq, self.max_num_tokens)
                if num_tokens and not self._make_room(seq, num_tokens):
                    num_tokens = 0
                break
        else:
            seq = next((s for s in self.waiting if s in self.suspects), None)
            if seq is not None and seq is self.waiting[0]:  # preempted ones went first
                num_tokens = self._admit(seq, self.max_num_tokens)
        if num_tokens > 0:
            scheduled.append(seq)
            scheduled_tokens.append(num_tokens)

    def isolate(self, seqs: list[Sequence]) -> None:
        """A launch of these failed: preempt them all, to be run alone one by one."""
        for seq in reversed(seqs):  # the waiting queue keeps their order at its front
            if seq.status == SequenceStatus.RUNNING:
                self._preempt(seq)
            self.suspects.add(seq)

    def update_from_launch(self, batch: SchedulerOutput, sampled: SampledTokens) -> None:
        """The batch's launch is queued: every sequence advances by the tokens it fed, each one
        that sampled also by the steps ahead, and owes its sampled tokens (pending, at its row)
        until update_from_output. It succeeded: the suspects it sampled are cleared."""
        for seq, num_tokens in zip(batch.seqs, batch.num_tokens.tolist(), strict=True):
            seq.num_computed_tokens += num_tokens
        num_steps = sampled.num_steps
        for row, seq in enumerate(sampled.seqs):
            seq.num_computed_tokens += num_steps - 1  # the tokens the decode steps fed back
            seq.num_pending_tokens += num_steps
            seq.pending_row = row
        if self.caches_prefixes:
            self.block_manager.cache_launched(batch)
        if self.suspects:
            self.suspects.difference_update(sampled.seqs)

    def update_from_output(self, sampled: SampledTokens, tokens: list[int]) -> list[SequenceUpdate]:
        """A launch's tokens are on the host ([num_steps * S], step-major): append each
        sequence's up to a stop, and finish it there (its blocks freed). A sequence that ended
        (or was cancelled) since the launch was queued drops them; one whose stop rules fail on
        them fails alone."""
        if sampled.drafts is not None:
            return self._update_from_verify(sampled, tokens)
        num_seqs, num_steps = len(sampled.seqs), sampled.num_steps
        updates, beams = [], [] if self.beams.num_requests else None
        for row, seq in enumerate(sampled.seqs):
            seq.num_pending_tokens -= num_steps
            if seq.is_finished:
                continue
            if beams is not None and seq.beam is not None:  # the group chooses its tokens
                beams.append(seq)
                continue
            updates.append(self._append(seq, tokens[row::num_seqs]))
        if beams:
            for handle in self.beams.update(beams):
                self.suspects.discard(handle)
                num = handle.num_completion_tokens
                updates.append((handle, num, num, handle.finish_reason, None))
        return updates

    def _update_from_verify(
        self, sampled: SampledTokens, tokens: list[int]
    ) -> list[SequenceUpdate]:
        """A speculative step's tokens: each row appends its accepted drafts and the target's
        next token, and the K/V written at its rejected drafts' positions is given up (those
        slots are written again by the steps that follow)."""
        updates = []
        for seq, drafts, targets in zip(
            sampled.seqs, sampled.drafts, rows_of(sampled.drafts, tokens), strict=True
        ):
            seq.num_pending_tokens -= 1
            if seq.is_finished:
                continue
            emitted, num_accepted = accepted_tokens(drafts, targets)
            if seq.status == SequenceStatus.RUNNING:  # (a preempted one recomputes anyway)
                seq.num_computed_tokens -= len(drafts) - num_accepted
            updates.append(self._append(seq, emitted))
        return updates

    def _append(self, seq: Sequence, tokens: list[int]) -> SequenceUpdate:
        """The sequence's new tokens, finishing it when they end it; a failure of its own stop
        rules fails it alone."""
        num_before = seq.num_tokens
        try:
            num_taken, reason = seq.append_tokens(tokens)
        except Exception as exc:  # noqa: BLE001 - its own stop rules: fail it alone
            logger.warning("request %s failed on its tokens: %r", seq.request_id, exc)
            self.finish(seq, "error")
            return seq, 0, 0, "error", f"{type(exc).__name__}: {exc}"
        if reason is not None:
            self.finish(seq, reason)
        return seq, seq.num_tokens - num_before, num_taken, reason, None

    def _num_tokens_to_run(self, seq: Sequence, budget: int) -> int:
        # wait for the host to see its pending tokens (overlap scheduling): a step can read only
        # the newest from the device, and a preempted sequence would recompute them all
        remaining = seq.num_uncomputed_tokens
        if seq.num_pending_tokens and (remaining > 1 or seq.needs_host_tokens or seq.is_ending):
            return 0
        if remaining <= budget:
            if remaining == 1 and seq.draft_token_ids:  # its newest token and the drafts
                return min(budget, 1 + len(seq.draft_token_ids))
            return remaining
        # a recomputed sequence may exceed max_num_tokens: it is chunked even when chunking is off
        if self.enable_chunked_prefill or remaining > self.max_num_tokens:
            return budget
        return 0

    def _make_room(self, seq: Sequence, num_tokens: int) -> bool:
        """Give seq blocks for num_tokens more tokens, preempting the newest running sequences
        while blocks are short. False when seq itself had to be preempted."""
        needed = seq.kv_tokens_after(num_tokens, self.num_lookahead_tokens)
        while not self.block_manager.grow(seq, needed):
            # (a beam's blocks are not reserved: it grows, or preempts, as max_utilization)
            assert not self.is_no_evict or seq.beam, "guaranteed_no_evict reserved too few blocks"
            victim = self.running[-1]
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        """Preempt by recompute: free the blocks, keep the tokens, requeue at the front."""
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def finish(self, seq: Sequence, reason: str) -> None:
        if seq.beam is not None:  # a beam fails its whole request
            self.suspects.difference_update(seq.beam.beams)
            self.beams.cancel(seq.beam, reason)
            return
        # waiting: preempted while its last step was still in flight (overlap scheduling)
        (self.running if seq.status == SequenceStatus.RUNNING else self.waiting).remove(seq)
        self.block_manager.free(seq)
        self.suspects.discard(seq)
        seq.mark_finished(reason)

    def abort(self, request_id: str) -> Sequence | None:
        """Drop a request wherever it is; returns it (finished, "cancelled"), or None if unknown."""
        for queue in (self.waiting, self.running):
            for seq in queue:
                if seq.request_id == request_id:
                    if seq.beam is not None:
                        self.suspects.difference_update(seq.beam.beams)
                        return self.beams.cancel(seq.beam, "cancelled")
                    queue.remove(seq)
                    self.block_manager.free(seq)
                    self.suspects.discard(seq)
                    seq.mark_finished("cancelled")
                    return seq
        return None
