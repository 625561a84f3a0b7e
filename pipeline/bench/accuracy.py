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
    from pipeline.engine import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    return [list(out.token_ids) for out in engine.generate(prompts, params)]


@torch.inference_mode()
def prompt_logits(engine, token_ids: list[int]) -> torch.Tensor:
    """[S] ids -> [S, V] logits from one prefill of the engine's own model and kernels.

    The engine has no scoring API, so this runs its model directly, the way the model runner
    does, on the first blocks of the engine's own KV cache: only valid while the engine is idle
    (no request owns a block), which regress guarantees (a fresh engine, before any request)."""
    from pipeline.engine.batch_metadata import BatchMetadata

    assert not engine.has_unfinished(), "prompt_logits needs an idle engine"
    runner = engine.model_runner
    device, num_tokens = runner.device, len(token_ids)
    num_blocks = -(-num_tokens // runner.block_size)
    assert num_blocks <= runner.num_kv_blocks, (num_blocks, runner.num_kv_blocks)
    meta = BatchMetadata(
        positions=torch.arange(num_tokens, device=device),
        slot_mapping=torch.arange(num_tokens, device=device),
        block_tables=torch.arange(num_blocks, dtype=torch.int32, device=device)[None],
        context_lens=torch.tensor([num_tokens], dtype=torch.int32, device=device),
        is_decode=False,
        query_lens=[num_tokens],
        context_lens_host=[num_tokens],
    )
    hidden = runner.model(torch.tensor(token_ids, device=device), meta, runner.kv_cache)
    return runner.model.compute_logits(hidden)


def perplexity(engine, token_ids: list[int]) -> float:
    logits = prompt_logits(engine, token_ids)  # [S, V]
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
    ppl = perplexity(engine, ppl_window(tokenizer, corpus, ppl_num_tokens))  # while idle
    return {
        "greedy_tokens": greedy_tokens(
            engine, greedy_prompts(tokenizer, corpus, num_prompts), max_tokens
        ),
        "ppl": ppl,
    }
