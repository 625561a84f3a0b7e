"""Where a process's threads spend their CPU, by sampling their stacks (stdlib only, Linux).

cProfile follows one thread; the served path's work is spread over several (responder, lanes,
the engine reader). A Sampler thread reads every thread's Python stack each interval, with the
CPU time the thread used since the last sample (/proc/self/task/TID/schedstat, in ns), and
charges that time to the stack: a thread blocked in a lock or a socket read uses none, so it is
not counted, whatever its stack says. report() gives each thread's CPU and the top stacks.
"""

import collections
import sys
import threading


def _cpu_ns(native_id: int) -> int:
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):  # the thread has ended
        return 0


class Sampler:
    def __init__(self, interval_s: float = 0.005, depth: int = 5):
        self.interval_s, self.depth = interval_s, depth
        self.stacks: collections.Counter = collections.Counter()  # (thread, stack) -> ns
        self.threads: collections.Counter = collections.Counter()  # thread -> ns
        self._last: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            threads = {t.ident: t for t in threading.enumerate() if t is not self._thread}
            for ident, frame in sys._current_frames().items():
                thread = threads.get(ident)
                if thread is None or thread.native_id is None:
                    continue
                now = _cpu_ns(thread.native_id)
                used = now - self._last.get(ident, now)
                self._last[ident] = now
                if used <= 0:
                    continue
                stack = []
                while frame is not None and len(stack) < self.depth:
                    code = frame.f_code
                    stack.append(f"{code.co_name} ({code.co_filename.rsplit('/', 1)[-1]})")
                    frame = frame.f_back
                self.threads[thread.name] += used
                self.stacks[(thread.name, " < ".join(stack))] += used

    def report(self, top: int = 40) -> str:
        lines = ["CPU ms by thread:"]
        lines += [f"  {ns / 1e6:9.1f} {name}" for name, ns in self.threads.most_common()]
        lines.append("CPU ms by stack (innermost Python frames first):")
        lines += [
            f"  {ns / 1e6:9.1f} {thread}: {stack}"
            for (thread, stack), ns in self.stacks.most_common(top)
        ]
        return "\n".join(lines)
