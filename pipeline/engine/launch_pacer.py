"""How many decode steps a launch runs, adjusted to what the host keeps up with.

The auto rule sizes a launch from the GPU's step time alone (ModelRunner: the fewest steps that
cover AUTO_LAUNCH_GPU_MS). The host's part of a launch depends on the machine and on what else
runs there: beside a server's processes on a slow host it outgrew that launch, so every launch
waited for the host and the GPU idled between them (H100, SmolLM2 served: steps 1.29-1.37 ms
in such leases, 1.19 in others, for the same ~55 sequences). The pacer watches each launch: when
most launches of a window found the device already done with the one before (the host is late),
it adds a step, up to max_steps; when the host waited on the device for more than 1.5 steps'
time on average, it takes one back, down to min_steps. More steps than needed only hold back
new requests, which wait for the launch in flight. Same model, 12 CPU hogs on the 16 cores:
3.3-3.8 steps a launch, served / direct 0.79-0.84 against 0.74-0.79 with a fixed 3; a quiet host
stays at 3.
"""

WINDOW = 32  # launches between decisions
IDLE_WAIT_S = 50e-6  # a wait shorter than this found the device done: it had idled
LATE_SHARE = 0.5  # add a step when more launches than this were late
SPARE_STEPS = 1.5  # take one back when the mean wait exceeds this many steps' time


class LaunchPacer:
    def __init__(self, min_steps: int, max_steps: int):
        self.min_steps, self.max_steps = min_steps, max_steps
        self.num_steps = min_steps
        self._num = self._num_late = 0
        self._wait_s = self._cycle_s = 0.0

    def observe(self, wait_s: float, cycle_s: float) -> None:
        """One steady launch: how long its postprocess waited on the device, and the host's
        whole cycle for it (its step() call and the caller's time before it)."""
        if self.min_steps == self.max_steps:
            return
        self._num += 1
        self._num_late += wait_s < IDLE_WAIT_S
        self._wait_s += wait_s
        self._cycle_s += cycle_s
        if self._num < WINDOW:
            return
        # waiting: the cycle is the device's time for the launch
        step_s = self._cycle_s / self._num / self.num_steps
        if self._num_late > LATE_SHARE * self._num:
            self.num_steps = min(self.max_steps, self.num_steps + 1)
        elif self._wait_s / self._num > SPARE_STEPS * step_s:
            self.num_steps = max(self.min_steps, self.num_steps - 1)
        self._num = self._num_late = 0
        self._wait_s = self._cycle_s = 0.0
