"""Perplexity from logits: uniform logits give the vocabulary size, perfect ones give 1."""

import pytest
import torch

from pipeline.quant.perplexity import perplexity

VOCAB = 50


def test_uniform_logits_give_vocab_size():
    windows = torch.randint(0, VOCAB, (5, 9))
    ppl = perplexity(lambda ids: torch.zeros(*ids.shape, VOCAB), windows, 2, "test")
    assert ppl == pytest.approx(VOCAB, rel=1e-5)


def test_logits_predicting_the_next_token_give_one():
    windows = torch.randint(0, VOCAB, (3, 7))

    def oracle(ids: torch.Tensor) -> torch.Tensor:
        # [B, S] -> [B, S, V]: position t puts all mass on token t+1 of its window
        logits = torch.full((*ids.shape, VOCAB), -1e4, dtype=torch.float16)
        for b, s in ((b, s) for b in range(ids.shape[0]) for s in range(ids.shape[1] - 1)):
            logits[b, s, ids[b, s + 1]] = 1e4
        return logits

    assert perplexity(oracle, windows, 2, "test") == pytest.approx(1.0)
