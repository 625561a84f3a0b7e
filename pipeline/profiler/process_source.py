"""CPU% and RSS of process trees (the bench client, the server and its backend stubs) via psutil.

Trees are re-walked on every sample because the server starts its python-backend stubs after it
is launched. A process in two trees (the server is a child of the bench process) counts once,
for the root registered last (the more specific one). Each process keeps one psutil handle, and
cpu_percent is read once per sample, so it measures the time since the previous sample.
"""

import os

import psutil


class ProcessSource:
    name = "process"

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = dict(roots)  # {label: pid}, e.g. {"bench": os.getpid(), "server": 1234}
        self._procs: dict[int, psutil.Process] = {}

    def add_root(self, label: str, pid: int) -> None:
        self.roots = {**self.roots, label: pid}  # a new dict: the sampling thread may be iterating

    def describe(self) -> dict:
        return {
            "source": "psutil",
            "roots": self.roots,
            "num_cpus": os.cpu_count(),
            "metrics": {
                "cpu_pct": "% of one core, summed over the tree",
                "rss_bytes": "bytes, summed over the tree",
            },
        }

    def _tree(self, pid: int) -> list[psutil.Process]:
        try:
            root = self._procs.setdefault(pid, psutil.Process(pid))
            return [root] + [
                self._procs.setdefault(p.pid, p) for p in root.children(recursive=True)
            ]
        except psutil.Error:
            return []

    def sample(self) -> dict[str, dict[str, float | None]]:
        roots = self.roots  # one snapshot: add_root may swap the dict mid-sample
        claimed: set[int] = set()
        out = {}
        for label, pid in reversed(list(roots.items())):
            cpu, rss, alive = 0.0, 0.0, False
            for proc in self._tree(pid):
                if proc.pid in claimed:
                    continue
                claimed.add(proc.pid)
                try:
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
                    alive = True
                except psutil.Error:
                    continue
            out[label] = {"cpu_pct": cpu if alive else None, "rss_bytes": rss if alive else None}
        return {label: out[label] for label in roots}

    def close(self) -> None:
        self._procs.clear()
