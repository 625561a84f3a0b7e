"""Perplexity of a causal LM over token windows, for any forward that returns logits."""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from pipeline.quant.calibration import batches

LogitsFn = Callable[[torch.Tensor], torch.Tensor]  # [B, S] token ids -> [B, S, V] logits


def hf_logits_fn(model: torch.nn.Module) -> LogitsFn:
    device = next(model.parameters()).device

    def logits(ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids=ids.to(device), use_cache=False).logits

    return logits


@torch.no_grad()
def perplexity(logits_fn: LogitsFn, windows: torch.Tensor, batch_size: int, desc: str) -> float:
    """[N, S] windows -> exp(mean next-token NLL) over all N * (S - 1) predictions."""
    total, count = 0.0, 0
    for batch in batches(windows, batch_size, desc):
        logits = logits_fn(batch)  # [B, S, V]
        targets = batch[:, 1:].to(logits.device)  # [B, S-1]
        # one row at a time: a float32 copy of [B, S, V] logits is ~400 MB for SmolLM2
        for row in range(batch.shape[0]):
            total += F.cross_entropy(logits[row, :-1].float(), targets[row], reduction="sum").item()
        count += targets.numel()
    return math.exp(total / count)
