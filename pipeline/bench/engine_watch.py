"""Polls `engine.stats()` while a sweep size runs: how many sequences ran at once, how many
waited, preemptions, free KV blocks. This is how the sweep sees the KV-capacity threshold in an
engine that queues (guaranteed_no_evict) or preempts (max_utilization) rather than failing."""

import threading


class EngineWatch:
    def __init__(self, engine, period_s: float = 0.005) -> None:
        self.engine = engine
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.peak_running = 0
        self.peak_waiting = 0
        self.min_free_blocks: int | None = None
        self.num_total_blocks = 0
        self._preemptions_at_start = 0
        self._preemptions_now = 0

    def _poll(self) -> None:
        stats = self.engine.stats()
        self.peak_running = max(self.peak_running, stats["num_running"])
        self.peak_waiting = max(self.peak_waiting, stats["num_waiting"])
        free = stats["num_free_blocks"]
        self.min_free_blocks = free if self.min_free_blocks is None else min(
            self.min_free_blocks, free)
        self.num_total_blocks = stats["num_total_blocks"]
        self._preemptions_now = stats["num_preemptions"]

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self._poll()

    def __enter__(self) -> "EngineWatch":
        self._preemptions_at_start = self.engine.stats()["num_preemptions"]
        self._poll()
        self._thread = threading.Thread(target=self._loop, name="engine-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()

    @property
    def num_preemptions(self) -> int:
        return self._preemptions_now - self._preemptions_at_start

    def to_dict(self) -> dict:
        return {"peak_running": self.peak_running, "peak_waiting": self.peak_waiting,
                "num_preemptions": self.num_preemptions, "min_free_blocks": self.min_free_blocks,
                "num_total_blocks": self.num_total_blocks}
