"""Vocabulary-parallel embedding and LM head: each tensor-parallel rank holds a contiguous slice
of the (padded) vocabulary. The embedding looks up the ids in its slice, zeroes the others and
sums over the ranks; the head's logits slices are gathered. Sums of one value and zeros are
exact, so both equal the unsplit layers bit for bit."""

import torch
from torch import nn

from pipeline.checkpoint.sharding import pad_rows
from pipeline.engine.parallel.tensor_parallel import TensorParallel
from pipeline.errors import ArtifactError


def vocab_slice(weight: torch.Tensor, vocab_size: int, tp: TensorParallel) -> torch.Tensor:
    """This rank's rows of an embedding table that convert wrote whole (use_parallel_embedding
    false: [vocab, hidden] on every rank) or already split ([padded vocab / tp, hidden])."""
    padded = -(-vocab_size // tp.size) * tp.size
    if weight.shape[0] == vocab_size and tp.size == 1:
        return weight
    if weight.shape[0] == vocab_size:  # a copy: a view would keep the whole table alive
        return pad_rows(weight, tp.size).chunk(tp.size)[tp.rank].clone()
    if weight.shape[0] * tp.size == padded:
        return weight
    raise ArtifactError(
        f"engine weights: transformer.vocab_embedding.weight has {weight.shape[0]} rows, neither "
        f"the vocabulary ({vocab_size}) nor its 1/{tp.size} share; convert again (force=true)"
    )


class VocabParallelEmbedding(nn.Module):
    def __init__(self, weight: torch.Tensor, tp: TensorParallel):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)  # [vocab / tp, hidden]
        self.tp = tp
        self.start = tp.rank * weight.shape[0]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # [T] -> [T, hidden]
        if self.tp.size == 1:
            return nn.functional.embedding(input_ids, self.weight)
        local = input_ids - self.start
        mine = (local >= 0) & (local < self.weight.shape[0])
        rows = nn.functional.embedding(torch.where(mine, local, 0), self.weight)
        return self.tp.all_reduce(rows * mine[:, None].to(rows.dtype))


def gather_logits(local: torch.Tensor, vocab_size: int, tp: TensorParallel) -> torch.Tensor:
    # [S, padded vocab / tp] -> [S, vocab] float32
    return tp.all_gather(local)[:, :vocab_size].float()
