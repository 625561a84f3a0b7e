"""A step's inputs, packed on the host (the driver) into one int64 buffer with a small header,
and unpacked on the device (by every rank: the packed buffer is what travels to the others).

Parts, in order: input ids [T] (prompt tokens; pending ones come from the last step's sampled
tokens on the device), positions [T], slots [T], context lens [B] (a decode step's three are
adjacent: its [3, B] rows), logits rows [S] (absent when every token's row samples), query start
[B + 1], block tables [B * width], pending at / from [P] each (absent when the inputs are a slice
of the last sampled tokens), then for the num_ahead decode steps of the S sequences that sample:
their [num_ahead, 3, S] rows, query start [S + 1] and, unless S == B, their block tables.
"""

from dataclasses import dataclass

import numpy as np
import torch

from pipeline.engine.batch_metadata import BatchMetadata
from pipeline.engine.scheduler import ScheduledSequence
from pipeline.engine.sequence import Sequence

# header fields
NUM_SEQS, NUM_TOKENS, NUM_SAMPLED, NUM_AHEAD, IS_DECODE, SAMPLES_ALL = range(6)
LAST_OFFSET, NUM_PENDING, TABLE_WIDTH, AHEAD_TABLES = range(6, 10)
HEADER_LEN = 10
# what pack reads of each scheduled sequence, in one numpy row: tokens this step, computed,
# on the host, pending, pending row, block-table row, max_kv_tokens
_SEQ_STATE = np.dtype((np.int64, 7))


@dataclass(slots=True)
class PackedStep:
    header: np.ndarray  # [HEADER_LEN] int64
    parts: tuple  # numpy int arrays (or () for an absent part), in the order above
    seqs: list[Sequence]  # the sequences that sample, in batch order


@dataclass(slots=True)
class StepInputs:
    input_ids: torch.Tensor  # [T]
    meta: BatchMetadata
    logits_rows: torch.Tensor | None  # [S] rows to turn into logits; None: every row
    ahead: list[BatchMetadata]  # the decode steps that follow, of the S that sample
    num_tokens: int
    num_sampled: int


def part_sizes(h: np.ndarray) -> list[int]:
    b, t, s, ahead = int(h[NUM_SEQS]), int(h[NUM_TOKENS]), int(h[NUM_SAMPLED]), int(h[NUM_AHEAD])
    pending = 0 if h[LAST_OFFSET] >= 0 else int(h[NUM_PENDING])
    sizes = [t, t, t, b, 0 if h[SAMPLES_ALL] else s, b + 1, b * int(h[TABLE_WIDTH])]
    sizes += [pending, pending]
    if ahead:
        sizes += [ahead * 3 * s, s + 1] + ([s * int(h[TABLE_WIDTH])] if h[AHEAD_TABLES] else [])
    return sizes


def pack_step(
    scheduled: list[ScheduledSequence],
    num_steps: int,
    block_tables: np.ndarray,
    block_size: int,
    scratch_slot: int,
    num_last_sampled: int | None,
) -> PackedStep:
    """Pack the step of these sequences and the num_steps - 1 decode steps of those that sample
    after it. A sampling sequence's block table covers the steps ahead too, so theirs are rows of
    this step's. block_tables: the block manager's array; num_last_sampled: rows of the last
    launched step's sampled tokens (None: none yet)."""
    bs = block_size
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
    # steady decode: the inputs are a slice of the last step's tokens, row for row (no scatter)
    last_offset = -1
    if (
        is_decode
        and num_last_sampled is not None
        and len(pending_from) == num_seqs
        and pending_from[0] + num_seqs <= num_last_sampled
        and bool((pending_from == pending_from[0] + np.arange(num_seqs)).all())
    ):
        last_offset = int(pending_from[0])
    ahead = ()
    if num_ahead:
        ahead_tables = table_np[sampled_at]
        ahead = decode_ahead(
            ends[sampled_at], limits[sampled_at], ahead_tables, num_ahead, bs, scratch_slot
        )
        if num_sampled < num_seqs:  # else they read this step's block tables
            ahead += (ahead_tables.ravel(),)
    header = np.zeros(HEADER_LEN, np.int64)
    header[:] = (
        num_seqs,
        num_tokens,
        num_sampled,
        num_ahead,
        is_decode,
        samples_all,
        last_offset,
        len(pending_at),
        table_np.shape[1],
        num_ahead > 0 and num_sampled < num_seqs,
    )
    parts = (
        ids,
        positions,
        slots,
        context_lens,
        () if samples_all else query_start[1:][sampled_at] - 1,
        query_start,
        table_np.ravel(),
        () if last_offset >= 0 else pending_at,
        () if last_offset >= 0 else pending_from,
        *ahead,
    )
    sampling = seqs if num_sampled == num_seqs else [seqs[i] for i in sampled_at.tolist()]
    return PackedStep(header, parts, sampling)


def decode_ahead(
    ends: np.ndarray,
    limits: np.ndarray,
    tables: np.ndarray,
    num_ahead: int,
    block_size: int,
    scratch_slot: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Host metadata of num_ahead decode steps of S sequences after a step that left them
    ends[i] tokens of context, their block tables [S, width] covering those steps:
    (positions, slots, context_lens as [num_ahead, 3, S] row-major; query_start [S + 1]).
    A row past what its request can use (limits[i], its max_kv_tokens) is padding: it writes
    the scratch slot and reads its own blocks."""
    bs = block_size
    num_seqs = len(ends)
    positions = ends[None, :] + np.arange(num_ahead)[:, None]
    is_real = positions < limits
    positions = np.minimum(positions, limits - 1)
    blocks = tables[np.arange(num_seqs), positions // bs]
    slots = np.where(is_real, blocks * bs + positions % bs, scratch_slot)
    return np.stack((positions, slots, positions + 1), axis=1).ravel(), np.arange(num_seqs + 1)


def unpack_step(
    packed: torch.Tensor, header: np.ndarray, last_sampled: torch.Tensor | None, embeds: bool
) -> StepInputs:
    """packed: this step's parts on the device, as part_sizes(header) splits them; embeds: this
    rank reads token ids (the first pipeline stage), else they are left as packed."""
    num_seqs, num_tokens = int(header[NUM_SEQS]), int(header[NUM_TOKENS])
    num_sampled, num_ahead = int(header[NUM_SAMPLED]), int(header[NUM_AHEAD])
    split = packed.split(part_sizes(header))
    input_ids, positions_t, slots_t, ctx_t, rows_t, qstart_t, tables_t, at_t, from_t = split[:9]
    offset = int(header[LAST_OFFSET])
    if not embeds:
        pass
    elif offset >= 0:
        input_ids = last_sampled[offset : offset + num_seqs]
    elif len(at_t):
        input_ids[at_t] = last_sampled[from_t]
    tables_t = tables_t.view(num_seqs, -1)
    if header[IS_DECODE]:
        decode_rows = packed[num_tokens : num_tokens * 4].view(3, num_seqs)
        meta = BatchMetadata.for_decode(decode_rows, tables_t, qstart_t)
    else:
        meta = BatchMetadata(positions_t, slots_t, tables_t, ctx_t, qstart_t, is_decode=False)
    ahead = []
    if num_ahead:
        rows_a, qstart_a, *tables_a = split[9:]
        tables_a = tables_a[0].view(num_sampled, -1) if tables_a else tables_t
        ahead = [
            BatchMetadata.for_decode(rows, tables_a, qstart_a)
            for rows in rows_a.view(num_ahead, 3, num_sampled)
        ]
    logits_rows = None if header[SAMPLES_ALL] else rows_t
    return StepInputs(input_ids, meta, logits_rows, ahead, num_tokens, num_sampled)
