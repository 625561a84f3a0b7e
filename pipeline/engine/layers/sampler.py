"""Next-token choice per row: logit biases, banned tokens, penalties, then greedy or temperature /
top-k / top-p / min-p sampling; the log probabilities of the model's distribution (the sampled
token's and the likeliest ones') handed to a recorder for the rows that ask. Its inputs are
built from the requests by the runner (execution/request_logits.py): the sampler never reads a
request.

A row with a seed draws from its own torch.Generator, so its tokens do not depend on what else
is in the batch; rows without one share the sampler's generator. Penalties and log probabilities
cost nothing while no row in the batch uses them (None in SamplingTensors); so do logit biases
(one sparse add per step, its indices built once per launch) and min-p (a no-op mask at 0).
"""

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from pipeline.engine.layers.penalties import Penalties


class LogprobsRecorder(Protocol):
    """Keeps what a launch's steps return of their logits (execution/request_logits.py)."""

    def add(self, logits: torch.Tensor, tokens: torch.Tensor) -> None: ...


@dataclass(slots=True)
class SamplingTensors:
    is_greedy: list[bool]
    generators: list[torch.Generator | None]  # per-row seeded generators
    banned_token_ids: list[list[int]]  # per row: tokens that must not come next
    # the knobs, on the device; None when every row is greedy
    temperatures: torch.Tensor | None = None  # [S] float32; 1.0 on greedy rows (draw unused)
    top_ks: torch.Tensor | None = None  # [S] int64; vocab size where top-k is off
    top_ps: torch.Tensor | None = None  # [S] float32
    min_ps: torch.Tensor | None = None  # [S] float32; None when no sampled row sets min_p
    # logit biases of every row as one sparse add: (rows [B] int64, token ids [B] int64,
    # biases [B] float32); None when no row has any
    logit_bias: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    penalties: Penalties | None = None  # rows with penalties or min_tokens
    # log probabilities of the sampled tokens and the likeliest ones (all rows, when any asks):
    # the log-softmax of the model's logits, before biases, bans, penalties and temperature
    logprobs: LogprobsRecorder | None = None
    # guided decoding: (bitmask [S, ceil(V / 32)] int32 of allowed tokens, the rows it masks
    # [R] int32), on the device; None when no row has a grammar
    token_bitmask: tuple[torch.Tensor, torch.Tensor] | None = None


def filtered_probs(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    top_ks: torch.Tensor,
    top_ps: torch.Tensor,
    min_ps: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    # logits [S, V] float32 -> (probs [S, V] in descending-logit order, that order [S, V])
    scaled = logits / temperatures[:, None]
    sorted_logits, order = scaled.sort(dim=-1, descending=True)
    ranks = torch.arange(logits.shape[-1], device=logits.device)
    sorted_logits = sorted_logits.masked_fill(ranks[None, :] >= top_ks[:, None], float("-inf"))
    probs = sorted_logits.softmax(dim=-1)
    # top-p: keep the smallest prefix whose mass reaches top_p (the first token always stays)
    mass_before = probs.cumsum(dim=-1) - probs
    drop = (mass_before >= top_ps[:, None]) & (top_ps[:, None] < 1.0)
    if min_ps is not None:  # min-p (vLLM's): below min_p x the likeliest (column 0); 0 drops none
        drop |= probs < min_ps[:, None] * probs[:, :1]
    return probs.masked_fill(drop, 0.0), order


class Sampler(nn.Module):
    def __init__(self, generator: torch.Generator):
        super().__init__()
        self.generator = generator  # rows without a seed

    def forward(self, logits: torch.Tensor, params: SamplingTensors) -> torch.Tensor:
        # logits [S, V] float32 -> token ids [S] int64
        raw = logits
        if params.token_bitmask is not None:  # first: what a grammar forbids never comes back
            from xgrammar import apply_token_bitmask_inplace  # only guided requests need it

            bitmask, rows = params.token_bitmask
            apply_token_bitmask_inplace(logits, bitmask, indices=rows)
        if params.logit_bias is not None:
            logits = logits.index_put(params.logit_bias[:2], params.logit_bias[2], accumulate=True)
        rows = [i for i, banned in enumerate(params.banned_token_ids) for _ in banned]
        if rows:
            cols = [t for banned in params.banned_token_ids for t in banned]
            logits = logits.index_put(
                (
                    torch.tensor(rows, device=logits.device),
                    torch.tensor(cols, device=logits.device),
                ),
                torch.tensor(float("-inf"), device=logits.device),
            )
        if params.penalties is not None:
            logits = params.penalties.apply(logits)
        tokens = self._choose(logits, params)
        if params.penalties is not None:
            params.penalties.record(tokens)
        if params.logprobs is not None:
            params.logprobs.add(raw, tokens)
        return tokens

    def _choose(self, logits: torch.Tensor, params: SamplingTensors) -> torch.Tensor:
        # logits [S, V] float32 -> token ids [S] int64
        greedy = logits.argmax(dim=-1)
        if all(params.is_greedy):
            return greedy
        probs, order = filtered_probs(
            logits, params.temperatures, params.top_ks, params.top_ps, params.min_ps
        )
        picks = torch.zeros_like(greedy)  # rank in `order`; greedy rows keep 0 and are replaced
        sampled_rows = [i for i, is_greedy in enumerate(params.is_greedy) if not is_greedy]
        for i in sampled_rows:
            if params.generators[i] is not None:
                picks[i] = torch.multinomial(probs[i], 1, generator=params.generators[i])[0]
        shared = [i for i in sampled_rows if params.generators[i] is None]
        if shared:
            index = torch.tensor(shared, device=logits.device)
            picks[index] = torch.multinomial(probs[index], 1, generator=self.generator)[:, 0]
        sampled = order.gather(1, picks[:, None])[:, 0]
        is_greedy = torch.tensor(params.is_greedy, device=logits.device)
        return torch.where(is_greedy, greedy, sampled)
