"""A loaded engine's accuracy at one batch size: the probes (probes.py) run batch_size rows at a
time through the engine, and the flag that says a cell's accuracy moved from its batch-1 cell's
beyond noise. Greedy prompts are cycled to fill the whole batch (cheap rows that check every
requested token comes back); cloze items and perplexity windows run min(batch, items) at once.

Cloze: every token but the item's choices is banned (bad_sequences), so greedy decoding returns
the choice with the highest log-likelihood, and its log probability (logprobs=0) renormalised over
the choices. It runs through the serving path: any mapping, any kernel mode. Perplexity scores
whole windows in one prefill (LLMEngine.prompt_logits), on every rank: tensor-parallel ranks
together, pipeline stages one after the other."""

import math

import torch

from pipeline.quant.perplexity import perplexity as windows_perplexity
from pipeline.request import SamplingParams
from pipeline.study.faults import RequestFault, no_fault
from pipeline.study.probes import Probes


def _rows(items: list, batch_size: int, fill: bool) -> list[list[int]]:
    """Indices of `items` in batches of batch_size; fill: cycled to at least one full batch."""
    num_rows = max(len(items), batch_size) if fill else len(items)
    indices = [i % len(items) for i in range(num_rows)]
    return [indices[s : s + batch_size] for s in range(0, num_rows, batch_size)]


def _banned(vocab_size: int, keep: list[int]) -> tuple[tuple[int, ...], ...]:
    kept = set(keep)
    return tuple((t,) for t in range(vocab_size) if t not in kept)


def cloze(engine, probes: Probes, batch_size: int, fault: RequestFault) -> dict:
    vocab_size = engine.model_runner.model.vocab_size
    picked: dict[int, int] = {}
    logprobs: dict[int, float] = {}
    # each row bans the whole vocabulary but its choices: not cycled, its cost grows with both
    for batch in _rows(probes.cloze, batch_size, fill=False):
        prompts, params = [], []
        for i in batch:
            item = probes.cloze[i]
            p = SamplingParams(
                max_tokens=1,
                ignore_eos=True,
                logprobs=0,
                bad_sequences=_banned(vocab_size, item.choices),
            )
            prompt, p = fault(batch_size, list(item.context), p)
            prompts.append(prompt)
            params.append(p)
        for i, out in zip(batch, engine.generate(prompts, params), strict=True):
            token = out.token_ids[0] if out.token_ids else None
            choices = probes.cloze[i].choices
            picked.setdefault(i, choices.index(token) if token in choices else -1)
            if out.logprobs:
                logprobs.setdefault(i, out.logprobs[0])
    answers = [picked[i] for i in range(len(probes.cloze))]
    correct = [a == item.answer for a, item in zip(answers, probes.cloze, strict=True)]
    return {
        "accuracy": sum(correct) / len(correct),
        "num_items": len(correct),
        "correct": correct,
        "mean_choice_logprob": sum(logprobs.values()) / max(len(logprobs), 1),
    }


def perplexity(
    engine, probes: Probes, batch_size: int, num_scored: int, fault: RequestFault
) -> float:
    """exp(mean next-token NLL) over the windows (as the quantize gate scores), num_scored of
    them in one prefill."""
    windows = torch.tensor(
        [fault(batch_size, list(w), SamplingParams())[0] for w in probes.ppl_windows]
    )
    return windows_perplexity(
        lambda ids: engine.prompt_logits(ids.tolist()), windows, num_scored, "study perplexity"
    )


def greedy(engine, probes: Probes, batch_size: int, max_tokens: int, fault) -> dict:
    tokens: dict[int, list[int]] = {}
    num_requested = num_generated = 0
    for batch in _rows(probes.greedy_prompts, batch_size, fill=True):
        prompts, params = [], []
        for i in batch:
            p = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
            prompt, p = fault(batch_size, list(probes.greedy_prompts[i]), p)
            prompts.append(prompt)
            params.append(p)
        for i, out in zip(batch, engine.generate(prompts, params), strict=True):
            tokens.setdefault(i, list(out.token_ids))
            num_requested += max_tokens
            num_generated += len(out.token_ids)
    return {
        "tokens": [tokens[i] for i in range(len(probes.greedy_prompts))],
        "num_requested": num_requested,
        "num_generated": num_generated,
    }


def measure_accuracy(
    engine, probes: Probes, batch_size: int, accuracy, fault: RequestFault | None = None
) -> dict:
    fault = fault or no_fault
    ppl_batch = min(batch_size, len(probes.ppl_windows))
    return {
        "cloze": cloze(engine, probes, batch_size, fault),
        "ppl": perplexity(engine, probes, batch_size, ppl_batch, fault),
        "ppl_batch_size": ppl_batch,
        "greedy": greedy(engine, probes, batch_size, accuracy.greedy_max_tokens, fault),
    }


def mcnemar_p(base: list[bool], cell: list[bool]) -> float:
    """Two-sided exact McNemar p-value of paired right/wrong answers (1.0: no discordant pair)."""
    worse = sum(b and not c for b, c in zip(base, cell, strict=True))
    better = sum(c and not b for b, c in zip(base, cell, strict=True))
    n = worse + better
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(worse, better) + 1)) / 2**n
    return min(1.0, 2 * tail)


def token_agreement(base: list[list[int]], cell: list[list[int]]) -> float:
    """Share of the base's greedy tokens the cell generated alike, up to the first difference
    (greedy decoding diverges for good once one token differs)."""
    same = total = 0
    for a, b in zip(base, cell, strict=True):
        total += len(a)
        same += next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
    return same / total if total else 1.0


def accuracy_flags(base: dict, cell: dict, accuracy) -> list[str]:
    """Why a cell's accuracy differs from its batch-1 cell's beyond noise ([] = it does not)."""
    reasons = []
    greedy = cell["greedy"]
    if greedy["num_generated"] < greedy["num_requested"]:
        reasons.append(
            f"greedy requests returned {greedy['num_generated']} of "
            f"{greedy['num_requested']} requested tokens"
        )
    p = mcnemar_p(base["cloze"]["correct"], cell["cloze"]["correct"])
    if p < accuracy.cloze_alpha:
        reasons.append(
            f"cloze accuracy {cell['cloze']['accuracy']:.1%} vs {base['cloze']['accuracy']:.1%} "
            f"at batch 1 (McNemar p={p:.2g} < {accuracy.cloze_alpha:g})"
        )
    if base["ppl"] is not None and cell["ppl"] is not None:
        change = abs(cell["ppl"] - base["ppl"]) / base["ppl"]
        if change > accuracy.ppl_rel_tolerance:
            reasons.append(
                f"perplexity {cell['ppl']:.3f} vs {base['ppl']:.3f} at batch 1 "
                f"({change:.1%} > {accuracy.ppl_rel_tolerance:.1%})"
            )
    return reasons
