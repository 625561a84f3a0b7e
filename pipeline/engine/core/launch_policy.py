"""When the engine schedules its next launch, and how many steps that launch runs.

LLMEngine.step() asks and tells only this: it starts a step (waiting, when requests may arrive,
until the launch in flight has only its reserve steps left), asks for the plan of the batch it
scheduled, says when that launch was queued, reads the tokens through it, and ends the step.
Behind it: the pacer (steps a launch and the reserve, adjusted to what the host keeps up with:
LaunchPacer), the launch timer (where the engine thread's time goes: LaunchTimer) and the
bad-words fallback. The step counts it starts from are the model runner's (launch_steps.py:
every rank measures a decode step's GPU time in step)."""

import math
import time
from dataclasses import dataclass

from pipeline.engine.core.engine_times import TOTALS
from pipeline.engine.scheduling.sampled_tokens import SampledTokens
from pipeline.engine.scheduling.scheduler_output import LaunchPlan, SchedulerOutput

WINDOW = 32  # launches between decisions
IDLE_WAIT_S = 50e-6  # a wait shorter than this found the device done: it had idled
LATE_SHARE = 0.5  # add a step when more launches than this were late (no reserve left to give)
RESERVE_LATE_SHARE = 0.1  # widen the reserve when more launches than this were late
SPARE_STEPS = 1.5  # take a step back when the mean wait exceeds this many steps' time
RESERVE_MARGIN = 1.25  # the reserve covers this many times the host's prep time


def loads_from_host(batch: SchedulerOutput) -> bool:
    """Whether the batch's copies load blocks from the host tier (a host slot is < 0)."""
    copies = batch.blocks_to_copy
    return copies is not None and bool((copies[:, 0] < 0).any())


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
        # vary). A grammar needs it before the next sampler only (grammar_bitmask.py). A request
        # whose prefix this launch loads from the host tier runs from the next launch
        # (prefix_cache.py): one step keeps its wait to one step
        if num_steps > 1 and (
            batch.draft_token_ids is not None
            or any(seq.needs_host_tokens for seq in batch.seqs)
            or loads_from_host(batch)
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
        """launched / postprocessed: this step queued a launch / read the tokens of a launch
        that paces the others (not a speculative verify step's: the host reads those at once,
        whatever its pace, and their wait would take steps from the plain launches); in_flight:
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


class LaunchPacer:
    """How many decode steps a launch runs, and how late in the launch before it the next one is
    scheduled, adjusted to what the host keeps up with.

    Steps: the auto rule sizes a launch from the GPU's step time alone (ModelRunner: the fewest
    steps that cover AUTO_LAUNCH_GPU_MS). The host's part of a launch depends on the machine and on
    what else runs there: beside a server's processes on a slow or loaded host it outgrew that
    launch, so every launch waited for the host and the GPU idled between them. The pacer watches
    each launch: when most launches of a window found the device already done with the one before
    (the host is late), it adds a step, up to max_steps; when the host waited on the device for more
    than 1.5 steps' time on average, it takes one back, down to min_steps. A quiet host stays at the
    auto count; a loaded one gets longer launches (docs/design.md, "Pacing").

    Reserve: a request that arrives while a launch runs waits for the next schedule. Scheduled as
    soon as the launch before was postprocessed, the next launch is fixed a whole launch before it
    runs; the engine instead waits until only num_reserve_steps of the running launch are left on
    the device (an event after that step), then schedules, so requests that arrived meanwhile join
    it. The reserve is the host's time to admit, schedule and queue a launch (prep), in steps: it
    starts at the whole launch (schedule at once, as without it), and each window sets it to cover
    RESERVE_MARGIN times the window's 90th-percentile prep, a step more than it was when more than
    RESERVE_LATE_SHARE of its launches found the device done before they were queued."""

    def __init__(self, min_steps: int, max_steps: int):
        self.min_steps, self.max_steps = min_steps, max_steps
        self.num_steps = min_steps
        self.num_reserve_steps = min_steps  # the whole launch: schedule the next one at once
        self._num = self._num_late = 0
        self._wait_s = self._cycle_s = 0.0
        self._prep_s: list[float] = []

    def observe(self, wait_s: float, cycle_s: float, sync_wait_s: float, prep_s: float) -> None:
        """One steady launch: how long the host waited on the device in all (before scheduling
        and for the tokens), of it the wait for the tokens after the next launch was queued,
        the host's whole cycle for it (its step() call and the caller's time before it), and
        its prep: admitting, scheduling and queuing the next launch."""
        self._num += 1
        self._num_late += sync_wait_s < IDLE_WAIT_S
        self._wait_s += wait_s
        self._cycle_s += cycle_s
        self._prep_s.append(prep_s)
        if self._num < WINDOW:
            return
        # waiting: the cycle is the device's time for the launch
        step_s = self._cycle_s / self._num / self.num_steps
        is_late = self._num_late > LATE_SHARE * self._num
        if is_late and self.num_reserve_steps == self.num_steps and self.num_steps < self.max_steps:
            self.num_steps += 1
        elif self._wait_s / self._num > SPARE_STEPS * step_s and self.num_steps > self.min_steps:
            self.num_steps -= 1
        self.num_reserve_steps = min(self.num_steps, self._reserve(step_s))
        self._num = self._num_late = 0
        self._wait_s = self._cycle_s = 0.0
        self._prep_s.clear()

    def _reserve(self, step_s: float) -> int:
        prep_s = sorted(self._prep_s)[int(0.9 * (len(self._prep_s) - 1))]
        steps = max(1, math.ceil(RESERVE_MARGIN * prep_s / step_s))
        if self._num_late > RESERVE_LATE_SHARE * self._num:
            steps = max(steps, self.num_reserve_steps + 1)
        return steps


@dataclass(slots=True)
class LaunchTimer:
    """Where the engine thread's time goes, launch by launch.

    A launch's GPU work overlaps the host's work for the next one, so the device idles exactly
    when the host takes longer than the GPU. Split the host's side three ways to see why:
    - host: in step(), not waiting on the device (schedule, pack, launch, postprocess);
    - host_cpu: the part of host this thread actually ran; host - host_cpu is time spent runnable
      but not running (other threads holding the GIL, or the OS running other processes);
    - away: between step() calls while a launch was in flight (the caller's work: routing deltas).
    gpu_wait is time blocked on the device: for the launch's tokens, and (late scheduling) until
    the launch in flight reached the pacer's reserve before the next one was scheduled; either
    way the host was ahead."""

    num_launches: int = 0
    host_s: float = 0.0
    host_cpu_s: float = 0.0
    gpu_wait_s: float = 0.0
    away_s: float = 0.0
    _started: float = 0.0
    _started_cpu: float = 0.0
    _returned: float | None = None  # when step() last returned with a launch in flight
    _wait_cpu_s: float = 0.0
    _away_before_s: float = 0.0
    step_wait_s: float = 0.0  # of the current (or last) step(): its wait on the device
    last_wait_s: float = 0.0  # the last wait on the device (a step's last: for its tokens)
    last_cycle_s: float = 0.0  # the last step() call and the time away before it

    def start_step(self) -> None:
        self._started, self._started_cpu = time.perf_counter(), time.thread_time()
        self._away_before_s = 0.0 if self._returned is None else self._started - self._returned
        self.away_s += self._away_before_s
        self.step_wait_s = self._wait_cpu_s = 0.0

    def wait_gpu(self, sync) -> list[int]:
        """sync(): block until the device's tokens are on the host, and return them."""
        started, started_cpu = time.perf_counter(), time.thread_time()
        tokens = sync()
        self.last_wait_s = time.perf_counter() - started
        self.step_wait_s += self.last_wait_s
        self._wait_cpu_s += time.thread_time() - started_cpu  # a spinning sync burns CPU
        return tokens

    def end_step(self, launched: bool, in_flight: bool) -> None:
        now = time.perf_counter()
        self.num_launches += launched
        self.host_s += now - self._started - self.step_wait_s
        self.host_cpu_s += time.thread_time() - self._started_cpu - self._wait_cpu_s
        self.gpu_wait_s += self.step_wait_s
        self.last_cycle_s = now - self._started + self._away_before_s
        self._returned = now if in_flight else None

    def stats(self) -> dict:
        return {"num_launches": self.num_launches} | {key: getattr(self, key) for key in TOTALS}
