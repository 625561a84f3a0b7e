"""Beam search's share of a launch: each beam row's K likeliest next tokens and their log
probabilities (log-softmax of the model's float32 logits, as transformers' beam search takes
them), computed on the device in the launch and copied to the host without waiting; the beam
groups read them with the launch's tokens (scheduling/beam_search.py)."""

import numpy as np
import torch

from pipeline.engine.layers.token_logprobs import to_host


class LaunchBeamCandidates:
    def __init__(self, rows: list[int], num_top: int, device: torch.device):
        """rows: the sampling rows that are beams; num_top: the most candidates a group takes."""
        self.num_top = num_top
        self._index = torch.tensor(rows, dtype=torch.int64, device=device)
        self._host: tuple[torch.Tensor, torch.cuda.Event | None] | None = None
        self._values: np.ndarray | None = None

    @classmethod
    def plan(cls, batch, device: torch.device) -> "LaunchBeamCandidates | None":
        """The batch's beam rows that sample this launch, each told where its candidates are
        (None when no beam samples)."""
        if batch.beam_rows is None or not batch.beam_rows.size:
            return None
        sampling_row = np.cumsum(batch.samples) - 1  # a sampling row's place among them
        rows = [int(r) for r in batch.beam_rows if batch.samples[r]]
        if not rows:
            return None
        seqs = [batch.seqs[r] for r in rows]
        candidates = cls(
            [int(sampling_row[r]) for r in rows],
            max(seq.beam.group.num_candidates for seq in seqs),
            device,
        )
        for i, seq in enumerate(seqs):
            seq.beam.expect(seq, candidates, i)
        return candidates

    def add(self, logits: torch.Tensor) -> None:
        # logits [S, V] float32 of the launch's sampling rows (its first step)
        logprobs = logits.index_select(0, self._index).float().log_softmax(dim=-1)
        values, ids = logprobs.topk(self.num_top, dim=-1)
        # ids are exact in float64 (and in float32 below 2**24)
        self._host = to_host(torch.cat([values.double(), ids.double()], dim=1))

    def row(self, i: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Beam i's k likeliest tokens: (log probabilities float32, token ids int64), best
        first."""
        if self._values is None:
            host, event = self._host
            if event is not None:
                event.synchronize()
            self._values = host.numpy()
        values = self._values[i]
        n = self.num_top
        return values[:k].astype(np.float32), values[n : n + k].astype(np.int64)
