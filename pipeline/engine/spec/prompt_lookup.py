"""Prompt lookup: drafts copied from the request's own tokens, no second model.

The request's last n tokens are looked up earlier in its tokens (prompt and output), longest n
first (max_ngram down to min_ngram); the tokens that followed the latest earlier match are the
drafts. It pays where the output copies its input: editing or quoting a document, code
refactors, retrieval answers, structured output that repeats keys (TensorRT-LLM's prompt lookup
and vLLM's n-gram proposer draft the same way).
"""

import numpy as np

from pipeline.engine.scheduling.sequence import Sequence


def lookup_drafts(tokens: np.ndarray, num_drafts: int, max_ngram: int, min_ngram: int) -> list[int]:
    """Up to num_drafts tokens that followed an earlier occurrence of the longest suffix of
    `tokens` of max_ngram..min_ngram tokens (the latest with num_drafts tokens after it, else
    the earliest); [] when none occurs."""
    length = len(tokens)
    longest = min(max_ngram, length - 1)
    if longest < min_ngram:
        return []
    # an earlier occurrence ends where the last token occurred before: one pass over the
    # tokens, then each such end extends backwards over at most longest - 1 tokens (comparing
    # every window of every length instead cost ~30x more when nothing matches)
    ends = np.flatnonzero(tokens[: length - 1] == tokens[length - 1])
    if not len(ends):
        return []
    matched = np.ones(len(ends), dtype=np.int64)  # each end's suffix match, up to longest
    alive = np.ones(len(ends), dtype=bool)
    for back in range(1, longest):
        alive &= ends >= back
        alive[alive] = tokens[ends[alive] - back] == tokens[length - 1 - back]
        matched += alive
    n = int(matched.max())
    if n < min_ngram:
        return []
    hits = ends[matched == n] - n + 1  # the windows' starts, ascending
    # the latest match followed by num_drafts tokens, else the earliest (the most tokens): in
    # a repeating tail the latest match is followed by one token only
    full = hits[hits + n + num_drafts <= length]
    start = int(full[-1] if len(full) else hits[0]) + n
    return tokens[start : start + num_drafts].tolist()


def as_array(token_ids: list[int]) -> np.ndarray:
    """np.fromiter: half of np.asarray's time on a list of Python ints."""
    return np.fromiter(token_ids, dtype=np.int64, count=len(token_ids))


class PromptLookupProposer:
    def __init__(self, max_ngram: int, min_ngram: int):
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def propose(self, seqs: list[Sequence], num_drafts: list[int]) -> list[list[int]]:
        """Each sequence's drafts, at most num_drafts[i] of them."""
        return [
            lookup_drafts(as_array(seq.token_ids), k, self.max_ngram, self.min_ngram)
            for seq, k in zip(seqs, num_drafts, strict=True)
        ]

    def drop(self, seq: Sequence) -> None:
        """A request ended: nothing is kept for it."""

    def close(self) -> None:
        """Nothing to release."""
