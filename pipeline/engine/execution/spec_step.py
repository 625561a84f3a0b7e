"""A speculative decoding step: the target verifies each row's drafts in one forward.

A drafted row feeds its newest token and its k drafts as k + 1 query tokens of the varlen step
(the path prompt chunks take: their K/V goes into the paged cache at positions the scheduler
gave blocks for), and every one of its positions gets a logits row, where a plain row gets only
its last. The sampler then draws the target's token at each logits row as it would for a decode
step (greedy, or from the target's filtered distribution with the row's own generator), and the
host keeps the drafts the target agrees with (scheduling/spec_tokens.py). The step runs alone in
its launch (one step a launch, no overlap): the next step's drafts need its tokens on the host.
"""

import numpy as np

from pipeline.engine.execution.step_inputs import PackedStep
from pipeline.engine.scheduling.scheduler_output import SchedulerOutput
from pipeline.engine.scheduling.sequence import Sequence


def with_verify_rows(step: PackedStep, batch: SchedulerOutput) -> PackedStep:
    """The packed step of `batch` with a logits row at every position of its drafted rows; its
    seqs: the sequence of each logits row (a drafted row's k + 1 times), which the sampler
    reads per row."""
    header, parts = step.header, step.parts
    assert header.num_ahead == 0, "a verify step runs alone in its launch"
    sampled_at = np.flatnonzero(batch.samples)
    num_drafts = np.fromiter(
        (len(batch.draft_token_ids[i]) for i in sampled_at.tolist()), np.int64, len(sampled_at)
    )
    counts = 1 + num_drafts
    num_rows = int(counts.sum())
    firsts = batch.query_start[1:][sampled_at] - counts  # each row's first verified position
    offsets = np.arange(num_rows) - np.repeat(np.cumsum(counts) - counts, counts)
    logits_rows = np.repeat(firsts, counts) + offsets
    samples_all = num_rows == header.num_tokens
    header = header._replace(num_sampled=num_rows, samples_all=samples_all)
    parts = parts._replace(logits_rows=() if samples_all else logits_rows)
    seqs = [seq for seq, n in zip(step.seqs, counts.tolist(), strict=True) for _ in range(n)]
    return PackedStep(header, parts, seqs)


def verified_rows(batch: SchedulerOutput) -> tuple[list[Sequence], list[tuple[int, ...]]]:
    """The sequences that sample, in batch order, and the drafts each verifies."""
    rows = np.flatnonzero(batch.samples).tolist()
    return [batch.seqs[i] for i in rows], [batch.draft_token_ids[i] for i in rows]
