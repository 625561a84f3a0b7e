"""A packed step's header and parts, and an unpacked step's inputs: the types step_inputs.py
packs and unpacks (the header's fields, in order, are the buffer's header layout)."""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from pipeline.engine.layers.batch_metadata import BatchMetadata
from pipeline.engine.scheduling.sequence import Sequence


class StepHeader(NamedTuple):
    """A packed step's header: its fields, in this order, are the int64 header's layout
    (np.array(header) packs it, StepHeader._make(row.tolist()) reads it back)."""

    num_seqs: int = 0  # B
    num_tokens: int = 0  # T
    num_sampled: int = 0  # S
    num_ahead: int = 0  # decode steps after the first
    is_decode: bool = False  # T == B
    samples_all: bool = False  # every token's row samples: no logits rows part
    last_offset: int = 0  # >= 0: the inputs are last_sampled[offset : offset + B]
    num_pending: int = 0  # P
    table_width: int = 0
    ahead_tables: bool = False  # the steps ahead have block tables of their own (S < B)
    has_lora: bool = False  # a LoRA slot part: each token's adapter slot


HEADER_LEN = len(StepHeader._fields)


# a part: an int array (packing), a tensor (unpacking) or its size (step_inputs.part_sizes)
Part = np.ndarray | torch.Tensor | tuple | int


class StepParts(NamedTuple):
    """A packed step's parts, in buffer order (an absent part is empty)."""

    input_ids: Part
    positions: Part
    slots: Part
    context_lens: Part
    logits_rows: Part
    query_start: Part
    block_tables: Part
    pending_at: Part
    pending_from: Part
    ahead_rows: Part  # [num_ahead, 3, S]: positions, slots, context lens
    ahead_query_start: Part
    ahead_tables: Part
    lora_slots: Part  # [T]: each token's LoRA slot (0: no adapter)


@dataclass(slots=True)
class PackedStep:
    header: StepHeader
    parts: StepParts  # numpy int arrays (or () for an absent part)
    seqs: list[Sequence]  # the sequences that sample, in batch order


@dataclass(slots=True)
class StepInputs:
    input_ids: torch.Tensor  # [T]
    meta: BatchMetadata
    logits_rows: torch.Tensor | None  # [S] rows to turn into logits; None: every row
    ahead: list[BatchMetadata]  # the decode steps that follow, of the S that sample
    num_tokens: int
    num_sampled: int
