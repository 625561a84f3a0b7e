"""How many decode steps a launch runs, and how late in the launch before it the next one is
scheduled, adjusted to what the host keeps up with.

Steps: the auto rule sizes a launch from the GPU's step time alone (ModelRunner: the fewest steps
that cover AUTO_LAUNCH_GPU_MS). The host's part of a launch depends on the machine and on what
else runs there: beside a server's processes on a slow or loaded host it outgrew that launch, so
every launch waited for the host and the GPU idled between them. The pacer watches each launch:
when most launches of a window found the device already done with the one before (the host is
late), it adds a step, up to max_steps; when the host waited on the device for more than 1.5
steps' time on average, it takes one back, down to min_steps. A quiet host stays at the auto
count; a loaded one gets longer launches (docs/design.md, "Pacing").

Reserve: a request that arrives while a launch runs waits for the next schedule. Scheduled as
soon as the launch before was postprocessed, the next launch is fixed a whole launch before it
runs; the engine instead waits until only num_reserve_steps of the running launch are left on
the device (an event after that step), then schedules, so requests that arrived meanwhile join
it. The reserve is the host's time to admit, schedule and queue a launch (prep), in steps: it
starts at the whole launch (schedule at once, as without it), and each window sets it to cover
RESERVE_MARGIN times the window's 90th-percentile prep, a step more than it was when more than
RESERVE_LATE_SHARE of its launches found the device done before they were queued.
"""

import math

WINDOW = 32  # launches between decisions
IDLE_WAIT_S = 50e-6  # a wait shorter than this found the device done: it had idled
LATE_SHARE = 0.5  # add a step when more launches than this were late (no reserve left to give)
RESERVE_LATE_SHARE = 0.1  # widen the reserve when more launches than this were late
SPARE_STEPS = 1.5  # take a step back when the mean wait exceeds this many steps' time
RESERVE_MARGIN = 1.25  # the reserve covers this many times the host's prep time


class LaunchPacer:
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
