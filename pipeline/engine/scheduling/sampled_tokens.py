"""A launch's sampled tokens on their way to the host (the model runner's launch returns it)."""

from dataclasses import dataclass

import torch

from pipeline.engine.scheduling.sequence import Sequence


@dataclass(slots=True)
class SampledTokens:
    """One launch's sampled tokens, on their way to the host."""

    seqs: list[Sequence]  # the sequences that sampled, row by row
    tokens: torch.Tensor | None  # [num_steps * S] int64 on the host, valid once `done` has passed
    done: torch.cuda.Event | None
    num_steps: int  # tokens each sequence sampled: token j of row r is tokens[j * S + r]
    # passes when the launch has only its reserve steps left: when to schedule the next one
    schedule_at: torch.cuda.Event | None = None
    # speculative decoding (one step): each row's verified drafts; tokens then holds, row after
    # row, the target's token at each of its 1 + len(drafts) positions (spec_tokens.py)
    drafts: list[tuple[int, ...]] | None = None

    def tolist(self) -> list[int]:
        if self.tokens is None:
            return []
        if self.done is not None:
            self.done.synchronize()
        return self.tokens.tolist()
