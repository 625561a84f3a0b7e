"""Sequences with made-up tokens, and a stand-in for the engine's post-step bookkeeping."""

from pipeline.engine.scheduling.sampled_tokens import SampledTokens
from pipeline.engine.scheduling.scheduler import Scheduler
from pipeline.engine.scheduling.scheduler_output import SchedulerOutput
from pipeline.engine.scheduling.sequence import Sequence
from pipeline.request.sampling_params import SamplingParams

EOS = 2


def make_seq(request_id: str, num_prompt_tokens: int, max_tokens: int = 4) -> Sequence:
    return Sequence(
        request_id,
        [7] * num_prompt_tokens,
        SamplingParams(max_tokens=max_tokens),
        eos_token_ids=(EOS,),
    )


def launch(scheduler: Scheduler) -> tuple[SchedulerOutput, SampledTokens]:
    """Schedule a one-step launch without a model: its sampled tokens are left pending."""
    batch = scheduler.schedule()
    sampling = [seq for seq, samples in zip(batch.seqs, batch.samples, strict=True) if samples]
    sampled = SampledTokens(sampling, None, None, 1)
    scheduler.update_from_launch(batch, sampled)
    return batch, sampled


def scheduled(batch: SchedulerOutput) -> list[tuple[str, int]]:
    return [
        (seq.request_id, n) for seq, n in zip(batch.seqs, batch.num_tokens.tolist(), strict=True)
    ]


def step(scheduler: Scheduler, token_id: int = 5) -> list[tuple[str, int]]:
    """One engine step without a model: every sequence reaching its end samples token_id.
    Returns [(request_id, num_tokens)] of the step."""
    batch, sampled = launch(scheduler)
    scheduler.update_from_output(sampled, [token_id] * len(sampled.seqs))
    return scheduled(batch)


def run_to_completion(scheduler: Scheduler, max_steps: int = 1000) -> list[list[tuple[str, int]]]:
    """Steps until nothing is left; returns [(request_id, num_tokens)] per step."""
    history = []
    while scheduler.has_unfinished():
        assert len(history) < max_steps, "scheduler made no progress"
        history.append(step(scheduler))
    return history
