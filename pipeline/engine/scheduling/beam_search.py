"""Beam search's sequences: a request of beam width W is a group of W sequences, as in vLLM v0's
SequenceGroup and transformers' beam search; BeamGroup (beam_group.py) scores them.

The request's own Sequence (its handle: the engine's, the stream's, the output's) computes the
prompt and samples once; then W beams fork from it. Every step after, each live beam feeds its
newest token and the runner returns its K likeliest tokens' log probabilities
(execution/request_logits.py); once every live beam of the group has them, the group picks the
next W beams and each re-points to its parent:
- the first beam taken from a parent continues the parent's own sequence (its blocks as they are);
- each further one forks: the parent's full KV blocks are shared (one more reference: the block
  manager's hold), its partial last block is copied into a new block (the copy rides in the next
  SchedulerOutput.blocks_to_copy, run before that step's forward);
- a beam no one continues is released (its blocks' references dropped).
A beam's next token must be on the host before it is fed (needs_host_tokens), so a launch with
beam rows runs one step (LaunchPolicy.plan) and beams never take tokens still on the device;
requests of width 1 in the same batch are unaffected. Once the group is done, its W best
hypotheses become the handle's output, best first.
"""

import copy
import dataclasses
import time
from collections import deque

import numpy as np

from pipeline.engine.scheduling.beam_group import BeamGroup, Hypothesis
from pipeline.engine.scheduling.block_manager import BlockManager
from pipeline.engine.scheduling.sequence import Sequence, SequenceStatus
from pipeline.request.outputs import BeamOutput

# what beam search does not combine with: (is it asked, what to leave out)
_EXCLUSIVE = (
    (lambda p: not p.is_greedy, "temperature > 0 (beams are chosen, not sampled)"),
    (lambda p: p.has_penalties or p.min_tokens, "penalties / min_tokens"),
    (lambda p: p.logit_bias or p.bad_sequences, "logit_bias / bad words"),
    (lambda p: p.stop_sequences or p.stop_token_ids, "stop words / stop token ids"),
    (lambda p: p.guide is not None, "guided decoding"),
    (lambda p: p.logprobs, "top log probabilities (logprobs > 0)"),
    (lambda p: p.scores_prompt or p.return_generation_logits, "context / generation logits"),
)


def check_beam_request(params, max_beam_width: int, world_size: int) -> None:
    """Raise ValueError for a beam-search request (beam_width > 1) this engine cannot serve."""
    if params.beam_width > max_beam_width:
        raise ValueError(
            f"request: beam_width={params.beam_width} exceeds the engine's max_beam_width="
            f"{max_beam_width}; send beam_width <= {max_beam_width} or rebuild with "
            f"build.max_beam_width={params.beam_width}"
        )
    if world_size > 1:
        raise ValueError(
            "request: beam search needs an engine of one rank (this one has tp_size x pp_size "
            "> 1); send beam_width=1"
        )
    asked = [what for is_asked, what in _EXCLUSIVE if is_asked(params)]
    if asked:
        raise ValueError(
            f"request: beam_width={params.beam_width} does not combine with "
            f"{', '.join(asked)}; leave them out or send beam_width=1"
        )


class BeamRequest:
    """One beam-search request: its handle, its live beam sequences and their scores."""

    def __init__(self, handle: Sequence):
        p = handle.params
        self.handle = handle
        self.group = BeamGroup(
            p.beam_width, p.length_penalty, p.early_stopping, p.max_tokens, handle.end_ids
        )
        self.beams: list[Sequence] = [handle]  # the live beams, in the group's order
        # each live beam's candidates: (LaunchBeamCandidates, its row), once a launch scores it
        # (a failed launch's are replaced by the next), and once that launch was read
        self.pending: dict[Sequence, tuple] = {}
        self.scored: dict[Sequence, tuple] = {}

    @property
    def has_forked(self) -> bool:
        return self.beams[0] is not self.handle

    def expect(self, seq: Sequence, launch, row: int) -> None:
        """A launch scores this beam in `row` of its candidates (the runner calls it)."""
        self.pending[seq] = (launch, row)


def new_beam_request(seq: Sequence) -> None:
    """Make seq (params.beam_width > 1) the handle of a beam-search request."""
    seq.params = dataclasses.replace(seq.params, speculate=False)  # a beam takes no drafts
    seq.beam = BeamRequest(seq)
    seq.needs_host_tokens = True  # each step's token is the group's choice, made on the host


class BeamSearch:
    """The live beam requests' sequences in the scheduler's queues (the same list objects)."""

    def __init__(
        self, block_manager: BlockManager, running: list, waiting: deque, max_batch_size: int
    ):
        self.block_manager = block_manager
        self.running, self.waiting = running, waiting
        self.max_batch_size = max_batch_size
        self.num_requests = 0  # live beam requests (0: the scheduler skips all of this)

    def admits(self, seq: Sequence, max_batch_size: int, is_no_evict: bool) -> bool:
        """Room for a request's beams before its handle is admitted: batch rows for all of them
        (beside those the running handles' beams will take) and, under guaranteed_no_evict,
        free blocks for every beam's whole length."""
        width = seq.beam.group.width
        if seq.beam.has_forked:  # a preempted beam's return: one row, as any sequence
            return True
        forks = sum(s.beam.group.width - 1 for s in self.running if s.beam and s is s.beam.handle)
        if len(self.running) + forks + width > max_batch_size:
            return False
        size = self.block_manager.block_size
        return not is_no_evict or self.block_manager.num_free_blocks >= width * -(
            -seq.max_kv_tokens // size
        )

    def update(self, seqs: list[Sequence]) -> list[Sequence]:
        """Beams whose launch was read: step each group all of whose beams are scored; returns
        the handles of the requests that finished."""
        finished = []
        for seq in seqs:
            if seq in seq.beam.pending:
                seq.beam.scored[seq] = seq.beam.pending.pop(seq)
        for request in {seq.beam: None for seq in seqs}:
            if request.handle.is_finished or len(request.scored) < len(request.beams):
                continue
            if self._step(request):
                finished.append(request.handle)
        return finished

    def _step(self, request: BeamRequest) -> bool:
        beams, group = request.beams, request.group
        k = group.num_candidates
        values = np.empty((len(beams), k), np.float32)
        ids = np.empty((len(beams), k), np.int64)
        for i, seq in enumerate(beams):
            launch, row = request.scored[seq]
            values[i], ids[i] = launch.row(row, k)
        request.scored.clear()
        handle = request.handle
        if handle.first_token_time_s is None:
            handle.first_token_time_s = time.perf_counter()
        tokens = [seq.completion_token_ids for seq in beams]
        next_beams = group.step(values, ids, tokens)
        if group.is_done:
            self._release(beams)
            self._finish(request)
            return True
        taken: set[int] = set()
        first_of = {}  # next beam index -> parent sequence it continues (no copy)
        for j, beam in enumerate(next_beams):
            parent = beams[beam.parent]
            if parent is not handle and id(parent) not in taken:
                taken.add(id(parent))
                first_of[j] = parent
        released = [seq for seq in beams if id(seq) not in taken]
        # batch rows the forks may take: a preempted beam's fork must not overfill the batch
        rows = self.max_batch_size - len(self.running)
        rows += sum(seq.status == SequenceStatus.RUNNING for seq in released)
        new_beams = []
        for j, beam in enumerate(next_beams):
            seq = first_of.get(j) or self._fork(beams[beam.parent], rows > 0)
            rows -= j not in first_of and seq.status == SequenceStatus.RUNNING
            new_beams.append(seq)
        for seq, beam in zip(new_beams, next_beams, strict=True):
            seq.token_ids.append(beam.token_id)
        self._release(released)
        request.beams = new_beams
        return False

    def _fork(self, parent: Sequence, has_row: bool) -> Sequence:
        """A new beam with the parent's tokens and K/V: shared full blocks and a copy of the
        partial one; without a batch row or blocks for it (or a preempted parent), it waits
        and recomputes from its tokens like a preempted sequence."""
        child = copy.copy(parent)
        child.token_ids = list(parent.token_ids)
        child.block_hashes = list(parent.block_hashes)
        child.block_row, child.num_blocks, child.kv_tail = -1, 0, None
        child._pending_logprobs = deque()
        child.beam = parent.beam
        child.needs_host_tokens = True
        if has_row and parent.block_row >= 0 and self.block_manager.fork(parent, child):
            child.status = SequenceStatus.RUNNING
            self.running.append(child)
        else:
            child.num_computed_tokens = child.num_cached_blocks = 0
            child.status = SequenceStatus.WAITING
            self.waiting.appendleft(child)
        return child

    def _release(self, seqs: list[Sequence]) -> None:
        """Drop these beams from the queues and their blocks' references; a launch still in
        flight finds them finished. The handle stays the request's (out of the queues)."""
        for seq in seqs:
            (self.running if seq.status == SequenceStatus.RUNNING else self.waiting).remove(seq)
            self.block_manager.free(seq)
            if seq is not seq.beam.handle:
                seq.status = SequenceStatus.FINISHED

    def _finish(self, request: BeamRequest) -> None:
        handle, hypotheses = request.handle, request.group.hypotheses
        best = hypotheses[0]
        handle.token_ids = handle.prompt_token_ids + best.token_ids
        if handle.logprobs is not None:
            handle.logprobs = list(best.logprobs)
        handle.beam_outputs = tuple(_output(h) for h in hypotheses)
        handle.mark_finished(best.finish_reason)
        self.num_requests -= 1

    def cancel(self, request: BeamRequest, reason: str) -> Sequence:
        """End the request now (cancelled, or failed): its live beams are released."""
        if request.handle.is_finished:
            return request.handle
        self._release(request.beams)
        request.pending.clear()
        request.scored.clear()
        request.handle.mark_finished(reason)
        self.num_requests -= 1
        return request.handle


def beam_rows(seqs: list[Sequence]) -> np.ndarray:
    """The rows of a batch that are beams (SchedulerOutput.beam_rows)."""
    rows = np.array([row for row, seq in enumerate(seqs) if seq.beam is not None], np.int64)
    rows.flags.writeable = False
    return rows


def _output(h: Hypothesis) -> BeamOutput:
    return BeamOutput(list(h.token_ids), h.cum_logprob, list(h.logprobs), h.finish_reason, h.score)
