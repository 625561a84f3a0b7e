"""What runs in one step: the scheduler's output, a typed record the model runner packs.

Scheduler.schedule() builds it once a step, in one pass over the scheduled sequences: their state
as numpy columns (so the runner packs with numpy over the batch, never sequence by sequence),
their block-table rows, and the input tokens the host already has. It is immutable (a frozen
record, its arrays read-only): after the launch the scheduler alone updates the sequences
(Scheduler.update_from_launch / update_from_output), never through it. It is data alone: the
runner cuts a pipeline micro-batch's rows from it (execution/step_inputs.py: micro_batch).
"""

from dataclasses import dataclass

import numpy as np

from pipeline.engine.scheduling.sequence import Sequence

# what is read of each scheduled sequence, in one numpy row: tokens this step, computed, on the
# host, pending, pending row, block-table row, blocks held, max_kv_tokens
_SEQ_STATE = np.dtype((np.int64, 8))


@dataclass(frozen=True, slots=True)
class SchedulerOutput:
    """B scheduled sequences feeding T tokens; each [B] array is a column, row r is seqs[r]."""

    # batch order; the runner reads them only for their sampling state (params, seeded
    # generator, penalty counts, log probabilities), which lives with the request
    seqs: tuple[Sequence, ...]
    num_tokens: np.ndarray  # [B] tokens each feeds the model: 1 to decode, a chunk to prefill
    num_computed_tokens: np.ndarray  # [B] K/V already in the cache: its positions start here
    num_known_tokens: np.ndarray  # [B] tokens on the host
    num_pending_tokens: np.ndarray  # [B] sampled on the device, not on the host yet
    pending_rows: np.ndarray  # [B] row of its newest pending token in the last launch's tokens
    max_kv_tokens: np.ndarray  # [B] K/V slots its request can ever use
    # [B, W] each row's cache blocks, W the most any row holds (past a row's own: stale); they
    # cover the decode steps ahead of the rows that sample (the scheduler's lookahead)
    block_tables: np.ndarray
    query_start: np.ndarray  # [B + 1] where each row's tokens start in the step
    input_ids: np.ndarray  # [T] the step's tokens the host has; 0 where one is on the device
    samples: np.ndarray  # [B] bool: the step reaches the row's newest token, so it samples
    # what later features add (None: not in use by this engine yet)
    blocks_to_copy: np.ndarray | None = None  # [N, 2] (source, destination): prefix caching
    finished_request_ids: frozenset[str] | None = None  # for per-request state in the runner
    draft_token_ids: tuple[tuple[int, ...], ...] | None = None  # [B]: speculative decoding
    lora_ids: np.ndarray | None = None  # [B] each row's adapter
    grammar_rows: np.ndarray | None = None  # [S] rows whose next token a grammar constrains
    beam_rows: np.ndarray | None = None  # rows that are beams (beam search scores their logits)

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def total_num_tokens(self) -> int:
        return int(self.query_start[-1])


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def scheduler_output(
    seqs: list[Sequence], num_tokens: list[int], block_tables: np.ndarray
) -> SchedulerOutput:
    """The record of these sequences running num_tokens each; block_tables: the block manager's
    array (each sequence's blocks at its block_row)."""
    num_seqs = len(seqs)
    # one pass over the sequences reads their state; the rest is numpy over the batch
    state = np.fromiter(
        (
            (
                num,
                seq.num_computed_tokens,
                len(seq.token_ids),
                seq.num_pending_tokens,
                seq.pending_row,
                seq.block_row,
                seq.num_blocks,
                seq.max_kv_tokens,
            )
            for seq, num in zip(seqs, num_tokens, strict=True)
        ),
        _SEQ_STATE,
        num_seqs,
    )
    state.flags.writeable = False  # and so are its columns
    lens, starts, num_known, num_pending, pending_rows, block_rows, num_blocks, limits = state.T
    query_start = np.zeros(num_seqs + 1, np.int64)
    np.cumsum(lens, out=query_start[1:])
    ends = starts + lens
    ids = np.zeros(int(query_start[-1]), np.int64)
    for row in np.flatnonzero(ends <= num_known).tolist():  # prompt chunks (their tokens known)
        start = int(starts[row])
        ids[query_start[row] : query_start[row + 1]] = seqs[row].token_ids[
            start : start + num_tokens[row]
        ]
    drafts = None
    if any(seq.draft_token_ids for seq in seqs):  # speculative decoding: drafts are host tokens
        drafts, num_known = _with_drafts(seqs, lens, ends, num_known, num_pending, query_start, ids)
    width = int(num_blocks.max()) if num_seqs else 0
    samples = _read_only(ends == num_known + num_pending)
    guided = [row for row, seq in enumerate(seqs) if seq.grammar is not None]
    return SchedulerOutput(
        tuple(seqs),
        lens,
        starts,
        num_known,
        num_pending,
        pending_rows,
        limits,
        _read_only(block_tables[block_rows, :width]),
        _read_only(query_start),
        _read_only(ids),
        samples,
        draft_token_ids=drafts,
        grammar_rows=_grammar_rows(guided, samples),
    )


def _with_drafts(
    seqs: list[Sequence],
    lens: np.ndarray,
    ends: np.ndarray,
    num_known: np.ndarray,
    num_pending: np.ndarray,
    query_start: np.ndarray,
    ids: np.ndarray,
) -> tuple[tuple[tuple[int, ...], ...], np.ndarray]:
    """The drafts each row feeds (the tokens it runs past its known and pending ones) and the
    host's tokens counted with them; writes a drafted row's inputs (its newest tokens, then its
    drafts) into ids."""
    num_drafts = np.maximum(ends - num_known - num_pending, 0)
    drafts = []
    for row, n in enumerate(num_drafts.tolist()):
        if not n:
            drafts.append(())
            continue
        seq, end = seqs[row], int(query_start[row + 1])
        row_drafts = tuple(seq.draft_token_ids[:n])
        drafts.append(row_drafts)
        ids[end - int(lens[row]) : end - n] = seq.token_ids[int(ends[row]) - int(lens[row]) :]
        ids[end - n : end] = row_drafts
    known = num_known + num_drafts
    known.flags.writeable = False
    # None when the budget left no row its drafts: a plain step
    return (tuple(drafts) if num_drafts.any() else None), known


def _grammar_rows(guided: list[int], samples: np.ndarray) -> np.ndarray | None:
    """The guided rows that sample this step; None when there are none."""
    if not guided:
        return None
    rows = np.asarray(guided, np.int64)
    rows = rows[samples[rows]]
    return _read_only(rows) if rows.size else None


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """How many steps the runner runs a SchedulerOutput for: the launch policy's answer."""

    num_steps: int  # the step, and num_steps - 1 decode steps of the sequences that sample
    # CUDA: the launch's schedule_at event passes once only this many of its steps are left
    num_reserve_steps: int
