"""One beam-search request's scores: its live beams, its finished hypotheses, when it is done.

The rules are transformers' `GenerationMixin._beam_search` (transformers 5,
generation/utils.py), which TensorRT-LLM's beam search follows too (cpp/tensorrt_llm/kernels/
beamSearchKernels.cu, release 1.2):
- each step, every live beam's log-softmax is added to its cumulative log probability and the
  group keeps the K = max(2, 1 + number of end ids) * W best (beam, token) candidates over all
  beams (the first step has one beam: the prompt);
- a candidate that ends (an end id, or max_tokens generated) and ranks among the first W becomes a
  hypothesis scored cum_logprob / generated_length ** length_penalty (the end token counted);
  the W best hypotheses are kept;
- the W best candidates that do not end are the next step's beams (each re-points to its parent);
- early_stopping (TensorRT-LLM's integer): 1 (transformers' True) stops once W hypotheses are
  kept; 0 (False) stops once the best live beam, scored at its current length, cannot beat the
  worst kept hypothesis; > 1 ("never") scores it at max_tokens when length_penalty > 0.
Sums run in float32, as transformers' tensors do, so equal inputs pick equal beams.
"""

from dataclasses import dataclass

import numpy as np

_NEG = np.float32(-1.0e9)  # transformers' "never chosen" score


@dataclass(slots=True)
class Hypothesis:
    """A finished beam: its generated tokens (an end token is not kept), their log probabilities,
    the cumulative log probability (the end token's included) and the length-penalized score."""

    token_ids: list[int]
    logprobs: list[float]
    cum_logprob: float
    score: float
    finish_reason: str


@dataclass(slots=True)
class NextBeam:
    """A live beam after a step: the parent beam (index into the step's beams) and its token."""

    parent: int
    token_id: int
    cum_logprob: np.float32
    logprob: float


class BeamGroup:
    """The scores of one request's W beams; the sequences that carry them are BeamSearch's."""

    def __init__(
        self,
        width: int,
        length_penalty: float,
        early_stopping: int,
        max_tokens: int,
        end_ids: frozenset[int],
    ):
        self.width = width
        self.length_penalty = length_penalty
        self.early_stopping = early_stopping
        self.max_tokens = max_tokens
        self.end_ids = end_ids
        self.num_candidates = max(2, 1 + len(end_ids)) * width
        self.scores = np.zeros(1, np.float32)  # each live beam's cumulative log probability
        self.logprobs: list[list[float]] = [[]]  # each live beam's tokens' log probabilities
        self.hypotheses: list[Hypothesis] = []  # best first, at most W
        self.num_generated = 0  # tokens each live beam has generated
        self._can_improve = True
        self.is_done = False

    def step(self, values: np.ndarray, ids: np.ndarray, tokens: list[list[int]]) -> list[NextBeam]:
        """One step over the live beams' candidates (values / ids [beams, K]: each beam's K
        likeliest tokens' log probabilities, best first; tokens: each beam's generated tokens):
        keep the hypotheses that end, return the next beams (none once done)."""
        k, width = self.num_candidates, self.width
        totals = (self.scores[:, None] + values.astype(np.float32)).reshape(-1)
        order = np.argsort(-totals, kind="stable")[:k]
        length = self.num_generated + 1
        hits = [int(ids.reshape(-1)[c]) in self.end_ids or length >= self.max_tokens for c in order]
        self._keep_finished(order, totals, ids, values, hits, tokens, length)
        running = totals[order] + np.float32(_NEG) * np.asarray(hits, np.float32)
        keep = np.argsort(-running, kind="stable")[:width]
        next_beams = []
        for i in keep.tolist():
            c = int(order[i])
            parent, rank = divmod(c, values.shape[1])
            next_beams.append(
                NextBeam(parent, int(ids[parent, rank]), running[i], float(values[parent, rank]))
            )
        self.num_generated = length
        self.scores = np.array([b.cum_logprob for b in next_beams], np.float32)
        self.logprobs = [self.logprobs[b.parent] + [b.logprob] for b in next_beams]
        self._update_can_improve()
        full = len(self.hypotheses) == width
        self.is_done = not self._can_improve or (full and self.early_stopping == 1) or all(hits)
        return [] if self.is_done else next_beams

    def _keep_finished(self, order, totals, ids, values, hits, tokens, length) -> None:
        """The first W candidates that end become hypotheses while the group may take more."""
        full = len(self.hypotheses) == self.width
        if not self._can_improve or (full and self.early_stopping == 1):
            return
        penalty = float(length) ** self.length_penalty
        kept = list(self.hypotheses)
        for i in range(self.width):
            if not hits[i]:
                continue
            c = int(order[i])
            parent, rank = divmod(c, values.shape[1])
            token = int(ids[parent, rank])
            ends = token in self.end_ids
            kept.append(
                Hypothesis(
                    tokens[parent] + ([] if ends else [token]),
                    self.logprobs[parent] + ([] if ends else [float(values[parent, rank])]),
                    float(totals[c]),
                    float(np.float32(totals[c]) / np.float32(penalty)),
                    "stop" if ends else "length",
                )
            )
        # best first; on equal scores the earlier kept stays ahead (a stable sort)
        self.hypotheses = sorted(kept, key=lambda h: -h.score)[: self.width]

    def _update_can_improve(self) -> None:
        """transformers' _check_early_stop_heuristic: can the best live beam still beat the
        worst kept hypothesis (only asked once W are kept)?"""
        if len(self.hypotheses) < self.width:
            return
        length = self.num_generated
        if self.early_stopping > 1 and self.length_penalty > 0.0:
            length = self.max_tokens
        best = np.float32(self.scores.max()) / np.float32(float(length) ** self.length_penalty)
        worst = min(h.score for h in self.hypotheses)
        self._can_improve = self._can_improve and bool(best > worst)
