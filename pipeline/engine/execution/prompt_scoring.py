"""Logits of prompt positions inside the prefill, for the requests that ask (prompt_logprobs,
return_context_logits).

A step's model output holds every packed row's final hidden state (after the model's final
norm); the sampler turns only the rows that sample into logits. For the rows of prompt positions
whose request asked, the head runs over those rows only (`compute_logits`), in chunks of at most
CHUNK_ELEMENTS logits (a 128k vocabulary over 2,048 positions is 1 GiB in float32), each chunk's
log_softmax gathered at the next prompt token and its top-N taken on the device; one copy per
launch brings them to the host. A chunked prefill scores each chunk in its own launch. A decode
graph's output is the logits of every row already, which are used as they are.

One rank only: a tensor-parallel head is split over the ranks (and a pipeline's last stage is
not rank 0), so the engine refuses these requests with several ranks (LLMEngine).
"""

from collections.abc import Callable

import numpy as np
import torch

from pipeline.engine.layers.token_logprobs import to_host
from pipeline.engine.scheduling.scheduler_output import SchedulerOutput
from pipeline.request.outputs import TopLogprobs

CHUNK_ELEMENTS = 2**25  # logits a chunk makes at once: 128 MiB of float32


class PromptScoring:
    def __init__(self, rows: np.ndarray, targets: np.ndarray, keeps: np.ndarray, bounds, num_top):
        # rows [R] of the step's packed rows; targets [R] the next prompt token (-1: none);
        # keeps [R] bool: the row's logits go back whole; bounds: each entry's [start, end) in R
        self.rows, self.targets, self.keeps = rows, targets, keeps
        self.bounds, self.num_top = bounds, num_top
        self._host: tuple | None = None  # (values, its event, logits, its event) once computed
        self._values: np.ndarray | None = None

    @classmethod
    def plan(cls, batch: SchedulerOutput) -> "PromptScoring | None":
        """The rows of this batch's step to score, each request's given to it; None: none."""
        rows, targets, keeps, bounds, entries, num_top = [], [], [], [], [], 0
        for r, seq in enumerate(batch.seqs):
            builder = seq.prompt_scores
            if builder is None:
                continue
            start = int(batch.num_computed_tokens[r])
            lo, hi = builder.positions(start, int(batch.num_tokens[r]))
            if lo == hi:
                continue
            first_row = int(batch.query_start[r]) - start
            bounds.append((len(rows), len(rows) + hi - lo))
            rows += range(first_row + lo, first_row + hi)
            prompt = seq.token_ids
            targets += [
                prompt[p + 1] if p + 1 < builder.num_prompt_tokens else -1 for p in range(lo, hi)
            ]
            keeps += [builder.keeps_logits] * (hi - lo)
            num_top = max(num_top, builder.num_top or 0)
            entries.append(builder)
        if not rows:
            return None
        scoring = cls(np.array(rows), np.array(targets), np.array(keeps), bounds, num_top)
        for i, builder in enumerate(entries):
            builder.expect(scoring, i)
        return scoring

    @torch.no_grad()
    def compute(
        self,
        out: torch.Tensor,
        compute_logits: Callable[[torch.Tensor], torch.Tensor] | None,
        vocab_size: int,
    ) -> None:
        """out: the step's hidden states [T, hidden] (compute_logits turns rows into logits
        [n, V] float32), or its logits [T, V] (compute_logits None)."""
        device = out.device
        rows = torch.from_numpy(self.rows).to(device)
        targets = torch.from_numpy(self.targets).to(device).clamp(min=0)[:, None]
        keeps = torch.from_numpy(self.keeps).to(device)
        values, kept = [], []
        start = 0
        while start < rows.numel():
            end = min(rows.numel(), start + max(1, CHUNK_ELEMENTS // vocab_size))
            picked = out[rows[start:end]]
            logits = picked.float() if compute_logits is None else compute_logits(picked)
            logprobs = logits.log_softmax(dim=-1)
            parts = [logprobs.gather(1, targets[start:end])]
            if self.num_top:
                top, ids = logprobs.topk(self.num_top, dim=-1)
                parts += [top, ids.to(torch.float32)]
            values.append(torch.cat(parts, dim=1))
            if self.keeps[start:end].any():
                kept.append(logits[keeps[start:end]])
            start = end
        self._host = (*to_host(torch.cat(values)), *(to_host(torch.cat(kept)) if kept else ()))

    def entry(
        self, entry: int, num_top: int
    ) -> tuple[list[float], list[TopLogprobs], np.ndarray | None]:
        """One request's positions: each one's next prompt token's log probability, its num_top
        likeliest tokens, and its logits [n, V] when kept."""
        if self._values is None:
            for i in (1, 3):
                if len(self._host) > i and self._host[i] is not None:
                    self._host[i].synchronize()
            self._values = self._host[0].numpy()
        lo, hi = self.bounds[entry]
        values, n = self._values[lo:hi], self.num_top
        top = [
            tuple(
                (int(t), float(v))
                for v, t in zip(row[1 : 1 + num_top], row[1 + n : 1 + n + num_top], strict=True)
            )
            for row in values
        ]
        logits = None
        if self.keeps[lo]:
            kept_before = int(self.keeps[:lo].sum())
            logits = self._host[2][kept_before : kept_before + hi - lo].numpy()
        return values[:, 0].tolist(), top, logits
