"""Where the engine thread's time goes, launch by launch.

A launch's GPU work overlaps the host's work for the next one, so the device idles exactly when
the host takes longer than the GPU. Split the host's side three ways to see why:
- host: in step(), not waiting on the device (schedule, pack, launch, postprocess);
- host_cpu: the part of host this thread actually ran; host - host_cpu is time spent runnable
  but not running (other threads holding the GIL, or the OS running other processes);
- away: between step() calls while a launch was in flight (the caller's work: routing deltas).
gpu_wait is time blocked on the device: for the launch's tokens, and (late scheduling) until the
launch in flight reached the pacer's reserve before the next one was scheduled; either way the
host was ahead."""

import time
from dataclasses import dataclass

TOTALS = ("host_s", "host_cpu_s", "gpu_wait_s", "away_s")  # summed over launches, in stats()


@dataclass(slots=True)
class LaunchTimer:
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


def mean_ms(
    after: dict, before: dict | None, count: str, totals: tuple[str, ...], suffix: str = "_ms"
) -> dict[str, float]:
    """Summed seconds in two engine stats() -> ms per counted item between them (before: None
    for since start); "<total>_s" becomes "<total><suffix>"."""
    before = before or {}
    num = max(1, after[count] - before.get(count, 0))
    return {
        key.removesuffix("_s") + suffix: 1e3 * (after[key] - before.get(key, 0.0)) / num
        for key in totals
    }


def ms_per_launch(after: dict, before: dict | None = None) -> dict[str, float]:
    """The timer's totals in two engine stats() (before: None for since start) -> ms a launch."""
    return mean_ms(after, before, "num_launches", TOTALS, "_ms_per_launch")
