"""Sequences with made-up tokens, and a stand-in for the engine's post-step bookkeeping."""

from pipeline.engine.scheduler import ScheduledSequence, Scheduler
from pipeline.engine.sequence import Sequence
from pipeline.request.sampling_params import SamplingParams

EOS = 2


def make_seq(request_id: str, num_prompt_tokens: int, max_tokens: int = 4) -> Sequence:
    return Sequence(
        request_id,
        [7] * num_prompt_tokens,
        SamplingParams(max_tokens=max_tokens),
        eos_token_ids=(EOS,),
    )


def step(scheduler: Scheduler, token_id: int = 5) -> list[ScheduledSequence]:
    """One engine step without a model: every sequence reaching its end samples token_id."""
    scheduled = scheduler.schedule()
    for entry in scheduled:
        seq = entry.seq
        reaches_end = seq.reaches_end(entry.num_tokens)
        seq.num_computed_tokens += entry.num_tokens
        if reaches_end:
            reason = seq.append_token(token_id)
            if reason is not None:
                scheduler.finish(seq, reason)
    return scheduled


def run_to_completion(scheduler: Scheduler, max_steps: int = 1000) -> list[list[tuple[str, int]]]:
    """Steps until nothing is left; returns [(request_id, num_tokens)] per step."""
    history = []
    while scheduler.has_unfinished():
        assert len(history) < max_steps, "scheduler made no progress"
        history.append([(e.seq.request_id, e.num_tokens) for e in step(scheduler)])
    return history
