"""Accuracy numbers regress compares exactly or absolutely, measured through the engine itself
(what is deployed): greedy continuations of fixed corpus prompts, and perplexity on a fixed
window of corpus text."""

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from pipeline.bench.workload import lee_corpus_path, read_corpus

PROMPT_TOKENS = 24
PPL_FIRST_DOC = 150  # perplexity text starts here, away from the prompts' documents


def greedy_prompts(tokenizer, corpus: list[str], num_prompts: int) -> list[list[int]]:
    return [
        tokenizer(doc, add_special_tokens=False)["input_ids"][:PROMPT_TOKENS]
        for doc in corpus[:num_prompts]
    ]


def ppl_window(tokenizer, corpus: list[str], num_tokens: int) -> list[int]:
    ids: list[int] = []
    for doc in corpus[PPL_FIRST_DOC:] + corpus[:PPL_FIRST_DOC]:
        ids += tokenizer(doc + " ", add_special_tokens=False)["input_ids"]
        if len(ids) >= num_tokens:
            break
    return ids[:num_tokens]


def greedy_tokens(engine, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    from pipeline.request import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    return [list(out.token_ids) for out in engine.generate(prompts, params)]


def perplexity(engine, token_ids: list[int]) -> float:
    logits = engine.prompt_logits([token_ids])[0]  # [S, V]
    targets = torch.tensor(token_ids[1:], device=logits.device)
    return math.exp(F.cross_entropy(logits[:-1].float(), targets).item())


def measure_accuracy(
    engine,
    tokenizer,
    num_prompts: int,
    max_tokens: int,
    ppl_num_tokens: int,
    corpus_path: Path | None = None,
) -> dict:
    corpus = read_corpus(corpus_path or lee_corpus_path())
    ppl = perplexity(engine, ppl_window(tokenizer, corpus, ppl_num_tokens))
    return {
        "greedy_tokens": greedy_tokens(
            engine, greedy_prompts(tokenizer, corpus, num_prompts), max_tokens
        ),
        "ppl": ppl,
    }
