"""When the engine schedules its next launch, and how many steps that launch runs.

LLMEngine.step() asks and tells only this: it starts a step (waiting, when requests may arrive,
until the launch in flight has only its reserve steps left), asks for the plan of the batch it
scheduled, says when that launch was queued, reads the tokens through it, and ends the step.
Behind it: the pacer (steps a launch and the reserve, adjusted to what the host keeps up with:
launch_pacer.py), the launch timer (where the engine thread's time goes: launch_timer.py) and
the bad-words fallback. The step counts it starts from are the model runner's (launch_steps.py:
every rank measures a decode step's GPU time in step)."""

import time

from pipeline.engine.core.launch_pacer import LaunchPacer
from pipeline.engine.core.launch_timer import LaunchTimer
from pipeline.engine.scheduling.sampled_tokens import SampledTokens
from pipeline.engine.scheduling.scheduler_output import LaunchPlan, SchedulerOutput


class LaunchPolicy:
    """Owns the pacer and the launch timer; told what each step observed."""

    def __init__(self, num_steps: int, max_steps: int):
        self.pacer = LaunchPacer(num_steps, max_steps)
        self.timer = LaunchTimer()
        self._prep_started = self._prep_s = 0.0

    @property
    def num_steps(self) -> int:
        """Steps the next launch runs (unless its batch needs the host every step)."""
        return self.pacer.num_steps

    def start_step(self, in_flight: SampledTokens | None, will_admit: bool) -> None:
        """A step() begins. will_admit: requests may have arrived: wait until the launch in
        flight has only the reserve left, so that those arriving meanwhile join the next one."""
        self.timer.start_step()
        schedule_at = None if in_flight is None else in_flight.schedule_at
        if schedule_at is not None and will_admit:
            self.timer.wait_gpu(schedule_at.synchronize)
        self._prep_started = time.perf_counter()  # the host's part until the launch is queued

    def plan(self, batch: SchedulerOutput) -> LaunchPlan:
        num_steps = self.pacer.num_steps
        # a bad sequence of 2+ tokens needs each new token on the host before the next step is
        # queued; so does a verify step of speculative decoding (its rows' accepted tokens
        # vary). A grammar needs it before the next sampler only (grammar_bitmask.py)
        if num_steps > 1 and (
            batch.draft_token_ids is not None or any(seq.needs_host_tokens for seq in batch.seqs)
        ):
            num_steps = 1
        return LaunchPlan(num_steps, self.pacer.num_reserve_steps)

    def queued(self) -> None:
        """The step's launch is queued (or nothing was)."""
        self._prep_s = time.perf_counter() - self._prep_started

    def read_tokens(self, sampled: SampledTokens) -> list[int]:
        """A launch's tokens on the host (waiting for the device)."""
        return self.timer.wait_gpu(sampled.tolist)

    def end_step(self, launched: bool, postprocessed: bool, in_flight: bool) -> None:
        """launched / postprocessed: this step queued a launch / read one's tokens; in_flight:
        a launch is left on the device."""
        timer = self.timer
        timer.end_step(launched, in_flight)
        if launched and postprocessed:  # steady: the device had a launch
            waits = timer.step_wait_s, timer.last_cycle_s, timer.last_wait_s
            self.pacer.observe(*waits, self._prep_s)

    def stats(self) -> dict:
        pacer = self.pacer
        return {
            "num_scheduler_steps": pacer.num_steps,
            "num_reserve_steps": pacer.num_reserve_steps,
            "max_scheduler_steps": pacer.max_steps,
        } | self.timer.stats()
