"""Repetition, presence and frequency penalties and min_tokens for the rows of one launch that use
them, as TensorRT-LLM applies them (docs/trtllm_reference.md, section 9.2): temperature first,
then the penalties on the tokens the sequence holds, then end ids banned until min_tokens.

Token counts live on the device, one [2, V] tensor per sequence (Sequence.penalty_counts): row 0
counts what presence and frequency see (the prompt after prompt_ignore_length, then each
generated token), row 1 marks the prompt tokens before it (repetition sees those too). The
sampler adds every token it samples there, so tokens the host has not read yet (overlap
scheduling, a launch's later steps) count at once. A launch stacks its rows' counts once, and
each sequence keeps a view of its row, which the launch's steps update in place (the runner
builds them: execution/request_logits.py).
"""

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class Penalties:
    rows: torch.Tensor | None  # [P] int64: the batch rows with penalties
    counts: torch.Tensor | None  # [P, 2, V] float32, views of which the sequences hold
    temperatures: torch.Tensor | None  # [P] float32: 1 on greedy rows
    repetition: torch.Tensor | None  # [P] float32
    presence: torch.Tensor | None  # [P] float32
    frequency: torch.Tensor | None  # [P] float32
    min_rows: list[int]  # batch rows whose end ids are banned for their first steps
    steps_left: list[int]  # per min row: how many of this launch's steps still ban them
    end_ids: list[list[int]]  # per min row: the ids banned (its end ids and stop token ids)
    step: int = 0  # this launch's steps sampled so far

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        # logits [S, V] float32 -> [S, V]: penalized rows scaled by their temperature
        if self.rows is not None:
            x = logits[self.rows] / self.temperatures[:, None]
            counts, head = self.counts[:, 0], self.counts[:, 1]
            repetition = self.repetition[:, None]
            x = torch.where(
                (counts + head) > 0, torch.where(x < 0, x * repetition, x / repetition), x
            )
            x = x - self.presence[:, None] * (counts > 0) - self.frequency[:, None] * counts
            logits = logits.index_copy(0, self.rows, x)
        banned = [
            (row, token)
            for row, left, ids in zip(self.min_rows, self.steps_left, self.end_ids, strict=True)
            if self.step < left
            for token in ids
        ]
        if banned:
            rows, cols = zip(*banned, strict=True)
            logits = logits.index_put(
                (
                    torch.tensor(rows, device=logits.device),
                    torch.tensor(cols, device=logits.device),
                ),
                torch.tensor(float("-inf"), device=logits.device),
            )
        return logits

    def record(self, tokens: torch.Tensor) -> None:
        """Count the tokens this step sampled ([S] int64) for the next step and launch."""
        self.step += 1
        if self.rows is None:
            return
        num_rows = self.rows.numel()
        self.counts.index_put_(
            (
                torch.arange(num_rows, device=tokens.device),
                torch.zeros(num_rows, dtype=torch.int64, device=tokens.device),
                tokens[self.rows],
            ),
            torch.tensor(1.0, device=tokens.device),
            accumulate=True,
        )
