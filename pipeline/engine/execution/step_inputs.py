"""A step's inputs, packed on the host (the driver) into one int64 buffer with a small header,
and unpacked on the device (by every rank: the packed buffer is what travels to the others);
a launch's micro-batches packed, shipped and unpacked (LaunchPacker).

Parts, in order: input ids [T] (prompt tokens; pending ones come from the last step's sampled
tokens on the device), positions [T], slots [T], context lens [B] (a decode step's three are
adjacent: its [3, B] rows), logits rows [S] (absent when every token's row samples), query start
[B + 1], block tables [B * width], pending at / from [P] each (absent when the inputs are a slice
of the last sampled tokens), then for the num_ahead decode steps of the S sequences that sample:
their [num_ahead, 3, S] rows, query start [S + 1] and, unless S == B, their block tables; last,
with LoRA adapters, each token's adapter slot [T] (the steps ahead take their sampling rows').
Both the header and the parts are typed (step_types.py: StepHeader, StepParts): the fields'
order is the layout, and the parts' sizes follow from the header (part_sizes).
"""

from typing import TYPE_CHECKING

import numpy as np
import torch

from pipeline.engine.engine_config import EngineConfig
from pipeline.engine.execution.host_buffers import PinnedRing
from pipeline.engine.execution.launch_channel import LAUNCH, LORA
from pipeline.engine.execution.launch_schedule import micro_batches, split_micro_batches
from pipeline.engine.execution.step_types import (
    PackedStep,
    StepHeader,
    StepInputs,
    StepParts,
)
from pipeline.engine.layers.batch_metadata import BatchMetadata
from pipeline.engine.parallel.mapping import Mapping
from pipeline.engine.scheduling.scheduler_output import SchedulerOutput
from pipeline.engine.scheduling.sequence import Sequence

if TYPE_CHECKING:
    from pipeline.engine.execution.rank_groups import RankGroups
    from pipeline.engine.lora.manager import LoraManager


def part_sizes(header: StepHeader) -> StepParts:
    """The sizes of the parts a step of this header packs, in buffer order."""
    b, t, s, width = header.num_seqs, header.num_tokens, header.num_sampled, header.table_width
    pending = 0 if header.last_offset >= 0 else header.num_pending
    ahead = header.num_ahead
    return StepParts(
        t,
        t,
        t,
        b,
        0 if header.samples_all else s,
        b + 1,
        b * width,
        pending,
        pending,
        ahead * 3 * s,
        s + 1 if ahead else 0,
        s * width if header.ahead_tables else 0,
        t if header.has_lora else 0,
    )


def micro_batch(batch: SchedulerOutput, part: slice) -> SchedulerOutput:
    """The contiguous rows `part` (a pipeline-parallel micro-batch) as a batch of their own."""
    if part.start == 0 and part.stop == len(batch.seqs):
        return batch
    qs = batch.query_start[part.start : part.stop + 1]
    return SchedulerOutput(
        batch.seqs[part],
        batch.num_tokens[part],
        batch.num_computed_tokens[part],
        batch.num_known_tokens[part],
        batch.num_pending_tokens[part],
        batch.pending_rows[part],
        batch.max_kv_tokens[part],
        batch.block_tables[part],
        _read_only(qs - qs[0]),
        batch.input_ids[qs[0] : qs[-1]],
        batch.samples[part],
        draft_token_ids=None if batch.draft_token_ids is None else batch.draft_token_ids[part],
        lora_ids=None if batch.lora_ids is None else batch.lora_ids[part],
        grammar_rows=_rows_in(batch.grammar_rows, part),
    )


def _rows_in(rows: np.ndarray | None, part: slice) -> np.ndarray | None:
    """The rows of `part` among rows, numbered from the part's first; None when none are."""
    if rows is None:
        return None
    inside = rows[(rows >= part.start) & (rows < part.stop)] - part.start
    return _read_only(inside) if inside.size else None


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False  # as the scheduler's own columns
    return array


def pack_step(
    batch: SchedulerOutput,
    num_steps: int,
    block_size: int,
    scratch_slot: int,
    num_last_sampled: int | None,
    lora_slots: np.ndarray | None = None,
) -> PackedStep:
    """Pack the step of this batch and the num_steps - 1 decode steps of its rows that sample
    after it. A sampling row's block table covers the steps ahead too, so theirs are rows of
    this step's. num_last_sampled: rows of the last launched step's sampled tokens (None: none
    yet). lora_slots: [B] each row's LoRA slot (None: no LoRA part)."""
    bs = block_size
    num_seqs = len(batch)
    lens, starts, limits = batch.num_tokens, batch.num_computed_tokens, batch.max_kv_tokens
    ends = starts + lens
    samples = batch.samples
    is_pending = ends > batch.num_known_tokens  # its one input token is on the device: a decode
    query_start = batch.query_start
    num_tokens = int(query_start[-1])
    is_decode = num_tokens == num_seqs
    sampled_at = np.flatnonzero(samples)
    num_sampled = len(sampled_at)
    num_ahead = num_steps - 1 if num_sampled else 0
    kv_ends = ends  # K/V in use after the launch: sampling rows also decode num_ahead more
    if num_ahead:
        ahead_ends = np.maximum(ends, np.minimum(ends + num_ahead, limits))
        kv_ends = np.where(samples, ahead_ends, ends)
    table_np = batch.block_tables[:, : -(-int(kv_ends.max()) // bs)]
    if is_decode:  # one token a sequence, at its start
        positions, context_lens = starts, ends
        slot_blocks = table_np[np.arange(num_seqs), positions // bs]
    else:
        context_lens = ends
        positions = np.arange(num_tokens) - np.repeat(query_start[:-1] - starts, lens)
        slot_blocks = table_np[np.repeat(np.arange(num_seqs), lens), positions // bs]
    slots = slot_blocks * bs + positions % bs
    samples_all = is_decode and num_sampled == num_seqs  # every token's logits row
    pending_at, pending_from = query_start[:-1][is_pending], batch.pending_rows[is_pending]
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
    ahead = ((), (), ())
    if num_ahead:
        ahead_tables = table_np[sampled_at]
        rows, qstart = decode_ahead(
            ends[sampled_at], limits[sampled_at], ahead_tables, num_ahead, bs, scratch_slot
        )
        # all sample: they read this step's block tables
        ahead = (rows, qstart, () if num_sampled == num_seqs else ahead_tables.ravel())
    header = StepHeader(
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
        lora_slots is not None,
    )
    parts = StepParts(
        batch.input_ids,
        positions,
        slots,
        context_lens,
        () if samples_all else query_start[1:][sampled_at] - 1,
        query_start,
        table_np.ravel(),
        () if last_offset >= 0 else pending_at,
        () if last_offset >= 0 else pending_from,
        *ahead,
        () if lora_slots is None else np.repeat(lora_slots, lens),
    )
    seqs = batch.seqs
    sampling = list(seqs) if num_sampled == num_seqs else [seqs[i] for i in sampled_at.tolist()]
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
    packed: torch.Tensor, header: StepHeader, last_sampled: torch.Tensor | None, embeds: bool
) -> StepInputs:
    """packed: this step's parts on the device, as part_sizes(header) splits them; embeds:
    this rank reads token ids (the first pipeline stage), else they are left as packed."""
    num_seqs, num_tokens = header.num_seqs, header.num_tokens
    num_sampled, num_ahead = header.num_sampled, header.num_ahead
    parts = StepParts._make(packed.split(part_sizes(header)))
    input_ids, tables_t = parts.input_ids, parts.block_tables.view(num_seqs, -1)
    offset = header.last_offset
    if not embeds:
        pass
    elif offset >= 0:
        input_ids = last_sampled[offset : offset + num_seqs]
    elif len(parts.pending_at):
        input_ids[parts.pending_at] = last_sampled[parts.pending_from]
    if header.is_decode:  # positions, slots and context lens are adjacent: one [3, B] tensor
        decode_rows = packed[num_tokens : num_tokens * 4].view(3, num_seqs)
        meta = BatchMetadata.for_decode(decode_rows, tables_t, parts.query_start)
    else:
        meta = BatchMetadata(
            parts.positions,
            parts.slots,
            tables_t,
            parts.context_lens,
            parts.query_start,
            is_decode=False,
        )
    ahead = []
    if num_ahead:
        tables_a = tables_t
        if header.ahead_tables:
            tables_a = parts.ahead_tables.view(num_sampled, -1)
        ahead = [
            BatchMetadata.for_decode(rows, tables_a, parts.ahead_query_start)
            for rows in parts.ahead_rows.view(num_ahead, 3, num_sampled)
        ]
    logits_rows = None if header.samples_all else parts.logits_rows
    if header.has_lora:  # the steps ahead decode the rows that sample
        meta.lora_slots = parts.lora_slots
        ahead_slots = parts.lora_slots if logits_rows is None else parts.lora_slots[logits_rows]
        for step in ahead:
            step.lora_slots = ahead_slots
    return StepInputs(input_ids, meta, logits_rows, ahead, num_tokens, num_sampled)


# A speculative decoding step: the target verifies each row's drafts in one forward. A drafted
# row feeds its newest token and its k drafts as k + 1 query tokens of the varlen step (the path
# prompt chunks take), and every one of its positions gets a logits row, where a plain row gets
# only its last; the sampler draws the target's token at each as for a decode step, and the host
# keeps the drafts the target agrees with (scheduling/spec_tokens.py). The step runs alone in its
# launch: the next step's drafts need its tokens on the host.


def with_verify_rows(step: PackedStep, batch: SchedulerOutput) -> PackedStep:
    """The packed step of `batch` with a logits row at every position of its drafted rows; its
    seqs: the sequence of each logits row (a drafted row's k + 1 times), which the sampler
    reads per row."""
    header, parts = step.header, step.parts
    assert header.num_ahead == 0, "a verify step runs alone in its launch"
    sampled_at = np.flatnonzero(batch.samples)
    num_drafts = np.fromiter(
        (len(batch.draft_token_ids[i]) for i in sampled_at.tolist()), np.int64, len(sampled_at)
    )
    counts = 1 + num_drafts
    num_rows = int(counts.sum())
    firsts = batch.query_start[1:][sampled_at] - counts  # each row's first verified position
    offsets = np.arange(num_rows) - np.repeat(np.cumsum(counts) - counts, counts)
    logits_rows = np.repeat(firsts, counts) + offsets
    samples_all = num_rows == header.num_tokens
    header = header._replace(num_sampled=num_rows, samples_all=samples_all)
    parts = parts._replace(logits_rows=() if samples_all else logits_rows)
    seqs = [seq for seq, n in zip(step.seqs, counts.tolist(), strict=True) for _ in range(n)]
    return PackedStep(header, parts, seqs)


def verified_rows(batch: SchedulerOutput) -> tuple[list[Sequence], list[tuple[int, ...]]]:
    """The sequences that sample, in batch order, and the drafts each verifies."""
    rows = np.flatnonzero(batch.samples).tolist()
    return [batch.seqs[i] for i in rows], [batch.draft_token_ids[i] for i in rows]


class LaunchPacker:
    """The driver packs a launch's micro-batches (one unless pipeline-parallel) with numpy into
    one pinned buffer, copies it to the device in one copy and sends it to the other ranks;
    every rank unpacks the same buffer into the micro-batches' StepInputs."""

    def __init__(
        self,
        config: EngineConfig,
        mapping: Mapping,
        device: torch.device,
        ranks: "RankGroups | None",
        lora: "LoraManager | None",
        scratch_slot: int,
        max_scheduler_steps: int,
    ):
        self.mapping, self.device, self.ranks, self.lora = mapping, device, ranks, lora
        self.block_size, self.scratch_slot = config.block_size, scratch_slot
        self._ring = None
        if device.type == "cuda":
            bs, ahead = config.max_batch_size, max_scheduler_steps - 1
            max_blocks = config.max_blocks_per_seq
            # the first step's parts, then the steps ahead's (positions, slots, context lens x
            # ahead; query starts; block tables)
            self._ring = PinnedRing(
                4 * config.max_num_tokens
                + bs * (max_blocks + 4)
                + bs * (3 * ahead + max_blocks + 1)
                + 1
            )

    def pack(
        self, batch: SchedulerOutput, num_steps: int, last_sampled: torch.Tensor | None
    ) -> tuple[list[PackedStep], list[StepInputs]]:
        """The launch's micro-batches packed, sent to the device (and to the other ranks) in one
        copy, and unpacked there. last_sampled: the last launched step's tokens, which this
        launch's first step may read as inputs."""
        num_last = None if last_sampled is None else last_sampled.shape[0]
        slices = [slice(0, len(batch))]
        if self.mapping.pp_size > 1:
            tokens = batch.num_tokens.tolist()
            slices = split_micro_batches(tokens, micro_batches(sum(tokens), self.mapping.pp_size))
        lora = None if batch.lora_ids is None else self.lora.slots_for(batch.lora_ids)
        loads = None if lora is None or self.ranks is None else self.lora.take_loads()
        if loads is not None:  # the other ranks fill the same slots before the launch
            self.ranks.channel.send(LORA, [], torch.from_numpy(loads.reshape(-1)))
        packed = [
            pack_step(
                micro_batch(batch, part),
                num_steps,
                self.block_size,
                self.scratch_slot,
                num_last,
                None if lora is None else lora[part],
            )
            for part in slices
        ]
        if batch.draft_token_ids is not None:  # speculative decoding: logits at every draft
            packed = [
                with_verify_rows(step, micro_batch(batch, part))
                for step, part in zip(packed, slices, strict=True)
            ]
        parts = [p for step in packed for p in step.parts]
        num = sum(len(p) for p in parts)
        # unsafe: an empty tuple is a float64 array to numpy; every value is an integer
        if self._ring is not None:
            host = self._ring.take(num)
            np.concatenate(parts, out=host.numpy(), casting="unsafe")
            body = host.to(self.device, non_blocking=True)
            self._ring.copied()
        else:
            host = body = torch.from_numpy(np.concatenate(parts, dtype=np.int64, casting="unsafe"))
        headers = [step.header for step in packed]
        if self.ranks is not None:
            self.ranks.channel.send(LAUNCH, headers, host)
        return packed, self.unpack(headers, body, last_sampled)

    def unpack(
        self, headers: list[StepHeader], body: torch.Tensor, last_sampled: torch.Tensor | None
    ) -> list[StepInputs]:
        sizes = [sum(part_sizes(h)) for h in headers]
        embeds = self.mapping.is_first_stage
        return [
            unpack_step(part, h, last_sampled, embeds)
            for part, h in zip(body.split(sizes), headers, strict=True)
        ]
