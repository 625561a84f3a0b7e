"""What one forward step knows about its packed batch. Built by the model runner and passed to
the model as an argument (no hidden global context). T = tokens this step, B = sequences."""

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class BatchMetadata:
    positions: torch.Tensor  # [T] int64: absolute position of each token
    slot_mapping: torch.Tensor  # [T] int64: cache slot (block * block_size + offset) of its K/V
    block_tables: torch.Tensor  # [B, max_blocks] int: each sequence's cache blocks
    context_lens: torch.Tensor  # [B] int: K/V length of each sequence after this step
    query_start: torch.Tensor  # [B + 1] int: where each sequence's tokens start in the batch
    is_decode: bool  # one query token per sequence: split-K paged decode attention
    # a decode step's positions, slot_mapping and context_lens as the rows of one [3, B] tensor,
    # which a CUDA-graph replay copies in one go (None: three tensors of their own)
    decode_rows: torch.Tensor | None = None
    lora_slots: torch.Tensor | None = None  # [T] int64: each token's LoRA slot (None: none)

    @classmethod
    def for_decode(
        cls, rows: torch.Tensor, block_tables: torch.Tensor, query_start: torch.Tensor
    ) -> "BatchMetadata":
        """rows [3, B] int64: positions, slot_mapping, context_lens."""
        positions, slot_mapping, context_lens = rows
        return cls(positions, slot_mapping, block_tables, context_lens, query_start, True, rows)

    @classmethod
    def for_prompts(
        cls, num_seqs: int, seq_len: int, block_size: int, device: torch.device
    ) -> "BatchMetadata":
        """Whole prompts of seq_len tokens from position 0; sequence i owns the consecutive
        cache blocks [i * n, (i + 1) * n), n = ceil(seq_len / block_size)."""
        n = -(-seq_len // block_size)
        positions = torch.arange(seq_len, device=device).repeat(num_seqs)
        first_slots = torch.arange(num_seqs, device=device) * n * block_size
        return cls(
            positions=positions,
            slot_mapping=first_slots.repeat_interleave(seq_len) + positions,
            block_tables=torch.arange(num_seqs * n, dtype=torch.int32, device=device).view(-1, n),
            context_lens=torch.full((num_seqs,), seq_len, dtype=torch.int32, device=device),
            query_start=torch.arange(
                0, (num_seqs + 1) * seq_len, seq_len, dtype=torch.int32, device=device
            ),
            is_decode=False,
        )
