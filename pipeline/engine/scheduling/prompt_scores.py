"""A request's prompt scores (prompt log probabilities, context logits) as its prefill makes them.

Each launch that runs prompt positions of a request that asked scores them (the model runner's
PromptScoring) and is listed here; once the whole prompt is scored, the request's first delta
carries them all, in position order. A prefill that starts over (preempted, or rerun after a
failed launch) scores the prompt again from its first position, unless the scores were already
reported.
"""

import numpy as np

from pipeline.request.outputs import PromptScores, TopLogprobs


class PromptScoresBuilder:
    def __init__(self, num_prompt_tokens: int, num_top: int | None, keeps_logits: bool):
        """num_top: the prompt_logprobs asked (None: no log probabilities, logits only)."""
        self.num_prompt_tokens = num_prompt_tokens
        self.num_top, self.keeps_logits = num_top, keeps_logits
        self.num_scored = 0  # positions given to launches
        self.is_reported = False
        self._launches: list = []  # (PromptScoring, its entry), position order

    def positions(self, start: int, num_tokens: int) -> tuple[int, int]:
        """The positions [lo, hi) a step over prompt positions [start, start + num_tokens)
        scores (lo == hi: none); they are given to that step."""
        if self.is_reported:
            return 0, 0
        if start == 0:  # a prefill from the first position: anything listed before is void
            self.num_scored, self._launches = 0, []
        lo = max(start, self.num_scored)
        hi = min(start + num_tokens, self.num_prompt_tokens)
        if lo < hi:
            self.num_scored = hi
        return lo, max(lo, hi)

    def expect(self, launch, entry: int) -> None:
        self._launches.append((launch, entry))

    @property
    def is_complete(self) -> bool:
        return not self.is_reported and self.num_scored == self.num_prompt_tokens

    def take(self) -> PromptScores:
        """The whole prompt's scores (is_complete); they are reported once."""
        self.is_reported = True
        logprobs: list[float | None] = [None]
        top: list[TopLogprobs] = [()]
        logits = []
        for launch, entry in self._launches:
            values, entry_top, entry_logits = launch.entry(entry, self.num_top or 0)
            logprobs += values
            top += entry_top
            if entry_logits is not None:
                logits.append(entry_logits)
        self._launches = []
        num = self.num_prompt_tokens
        # the last position predicts the first generated token: no prompt token's score
        return PromptScores(
            logprobs=logprobs[:num] if self.num_top is not None else None,
            top_logprobs=top[:num] if self.num_top else None,
            context_logits=np.concatenate(logits) if self.keeps_logits else None,
        )
