"""One launch on this rank's pipeline stage: a step of each micro-batch, then the decode steps of
the sequences that sampled, each reading the tokens the step before sampled.

With one stage there is one micro-batch and this is the plain loop: forward, sample, forward...
With P stages rank 0 splits the batch into P micro-batches and each stage runs them in turn, so
while stage 1 runs micro-batch m, stage 0 runs m + 1, and by the time stage 0 comes back to m
its logits (sent back by the last stage) are ready to sample. Every rank runs this same order;
the links between stages and the tensor-parallel collectives pair up because of it.

    stage 0:  F(0,0) F(1,0) | sample(0,0) F(0,1) | sample(1,0) F(1,1) | ...
    stage 1:         F(0,0) F(1,0)  ->logits     | F(0,1)      F(1,1)  | ...
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from pipeline.engine.execution.step_types import StepInputs
from pipeline.engine.layers.batch_metadata import BatchMetadata
from pipeline.engine.parallel.stage_link import StageLink

# (inputs, metadata, logits rows or None) -> logits [S, vocab] (last stage) or [T, 2, hidden]
Forward = Callable[[torch.Tensor, BatchMetadata, torch.Tensor | None], torch.Tensor]
# (micro-batch, step, its logits or None where this rank has none) -> its sampled tokens [S]
TakeTokens = Callable[[int, int, torch.Tensor | None], torch.Tensor]


@dataclass(slots=True)
class Stage:
    forward: Forward
    is_first: bool
    is_last: bool
    link: StageLink | None = None  # None: one stage
    sends_logits: bool = False  # the last stage's first rank (to rank 0)
    receives_logits: bool = False  # rank 0, when it is not the last stage


def run_launch(
    batches: list[StepInputs], stage: Stage, take_tokens: TakeTokens
) -> list[list[torch.Tensor]]:
    """Returns each micro-batch's sampled tokens, step by step (first stage; [] elsewhere)."""
    tokens: list[list[torch.Tensor]] = [[] for _ in batches]
    own_logits: dict[int, torch.Tensor] = {}  # one stage: the logits of the step just run
    num_steps = [1 + len(b.ahead) for b in batches]

    def sample(m: int, step: int) -> None:
        logits = own_logits.pop(m, None)
        if stage.receives_logits:
            logits = stage.link.recv_logits(batches[m].num_sampled)
        tokens[m].append(take_tokens(m, step, logits))

    for step in range(max(num_steps)):
        for m, batch in enumerate(batches):
            if step >= num_steps[m]:
                continue
            if step == 0:
                meta, rows, num_rows = batch.meta, batch.logits_rows, batch.num_tokens
            else:
                meta, rows, num_rows = batch.ahead[step - 1], None, batch.num_sampled
            if stage.is_first:
                if step:
                    sample(m, step - 1)
                inputs = batch.input_ids if step == 0 else tokens[m][-1]
            else:
                inputs = stage.link.recv_hidden(num_rows)
            out = stage.forward(inputs, meta, rows)
            if not stage.is_last:
                stage.link.send_hidden(out)
            elif batch.num_sampled and stage.is_first:
                own_logits[m] = out
            elif batch.num_sampled and stage.sends_logits:
                stage.link.send_logits(out)
    if stage.is_first:
        for m, batch in enumerate(batches):
            if batch.num_sampled:
                sample(m, num_steps[m] - 1)
    return tokens


# a micro-batch of at least this many tokens keeps a stage's GEMMs compute-bound, so splitting
# a launch into more micro-batches than stages costs no extra time reading weights
MICRO_BATCH_MIN_TOKENS = 1024
MICRO_BATCHES_PER_STAGE = 2


def micro_batches(num_tokens: int, pp_size: int) -> int:
    """How many micro-batches a launch of num_tokens runs through pp_size stages. With M of
    them the pipeline takes (M + P - 1) / M of a stage's work: 2 stages and 2 micro-batches
    leave each stage idle a third of a prefill launch, 4 a fifth. Decode-sized launches keep
    one per stage: each extra micro-batch re-reads the stage's weights."""
    return max(
        pp_size, min(MICRO_BATCHES_PER_STAGE * pp_size, num_tokens // MICRO_BATCH_MIN_TOKENS)
    )


def split_micro_batches(num_tokens: list[int], num_batches: int) -> list[slice]:
    """Contiguous slices of the scheduled sequences, of about equal tokens (at most num_batches,
    none empty)."""
    total = sum(num_tokens)
    bounds, acc, start = [], 0, 0
    for i, n in enumerate(num_tokens):
        acc += n
        if len(bounds) < num_batches - 1 and acc * num_batches >= total * (len(bounds) + 1):
            bounds.append(slice(start, i + 1))
            start = i + 1
    if start < len(num_tokens):
        bounds.append(slice(start, len(num_tokens)))
    return bounds
