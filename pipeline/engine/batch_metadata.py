"""What one forward step knows about its packed batch. Built by the model runner and passed to
the model as an argument (no hidden global context). T = tokens this step, B = sequences."""

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class BatchMetadata:
    positions: torch.Tensor  # [T] int64: absolute position of each token
    slot_mapping: torch.Tensor  # [T] int64: cache slot (block * block_size + offset) of its K/V
    block_tables: torch.Tensor  # [B, max_blocks] int32: each sequence's cache blocks
    context_lens: torch.Tensor  # [B] int32: K/V length of each sequence after this step
    is_decode: bool  # one query token per sequence: batched paged attention, CUDA-graph safe
    query_lens: list[int]  # host copies for the per-sequence prefill loop (no device sync)
    context_lens_host: list[int]
