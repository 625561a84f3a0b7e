"""Rank 0's worker processes (ranks 1..N-1): started, watched and stopped here.

A worker is `python -m pipeline.engine.execution.worker_main` (a plain interpreter: a Triton stub's
sys.executable is not one), told its start-up spec on stdin, once. Its stdin stays open: when it
reads end-of-file, rank 0's process is gone (however it ended), and it exits, so a killed engine
leaves no rank holding a GPU. `kill -USR1` on a rank prints its Python stacks.

A watcher thread notices a worker that exits while the engine runs: its failure (with the
worker's own error, which it puts in the store) is what the engine raises; on CUDA, where a rank
blocked in NCCL would wait for the dead one, the NCCL groups are aborted, and if the process is
still stuck HARD_EXIT_S later it exits (a process that cannot reach its peers cannot go on, and
must free its GPU)."""

import logging
import os
import pickle
import shutil
import subprocess
import sys
import threading
import time

import torch.distributed as dist

logger = logging.getLogger(__name__)

HARD_EXIT_S = 30.0
POLL_S = 0.1
START_TIMEOUT_S = 300.0  # a worker's interpreter, imports and weights before it joins


def worker_python() -> str:
    name = os.path.basename(sys.executable)
    return sys.executable if name.startswith("python") else shutil.which("python3") or "python3"


def error_key(rank: int) -> str:
    return f"worker_error/{rank}"


def joined_key(rank: int) -> str:
    return f"joined/{rank}"


class WorkerProcesses:
    def __init__(self, spec: dict, world_size: int, store: dist.Store, is_cuda: bool):
        self.store, self.is_cuda = store, is_cuda
        self.failure: str | None = None
        self._stopping = threading.Event()
        self._procs: dict[int, subprocess.Popen] = {}
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        for rank in range(1, world_size):
            proc = subprocess.Popen(
                [worker_python(), "-m", "pipeline.engine.execution.worker_main"],
                stdin=subprocess.PIPE,
                env=env,
            )
            proc.stdin.write(pickle.dumps({**spec, "rank": rank}))
            proc.stdin.flush()
            self._procs[rank] = proc
        self._watcher = threading.Thread(target=self._watch, name="engine-ranks", daemon=True)
        self._watcher.start()

    def wait_joined(self, timeout_s: float) -> None:
        """Block until every worker is about to join the process group (raise if one exits
        first, or none came in time): init_process_group would otherwise wait its whole timeout
        for a rank that is gone."""
        deadline = time.monotonic() + timeout_s
        keys = [joined_key(rank) for rank in self._procs]
        while not self.store.check(keys):
            self.raise_failure()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"engine: worker ranks did not start in {timeout_s:.0f} s; see their log "
                    f"lines ([engine rank N])"
                )
            time.sleep(POLL_S)

    def raise_failure(self) -> None:
        if self.failure is None:
            self._check()
        if self.failure is not None:
            raise RuntimeError(self.failure)

    def wait_failure(self, timeout_s: float) -> str | None:
        """The failure the watcher finds within timeout_s (a collective error races it)."""
        deadline = time.monotonic() + timeout_s
        while self.failure is None and time.monotonic() < deadline:
            self._check()
            time.sleep(POLL_S)
        return self.failure

    def _check(self) -> None:
        for rank, proc in self._procs.items():
            code = proc.poll()
            if code is not None and not self._stopping.is_set() and self.failure is None:
                self.failure = self._describe(rank, proc.pid, code)

    def _describe(self, rank: int, pid: int, code: int) -> str:
        error = ""
        try:
            if self.store.check([error_key(rank)]):
                error = ": " + self.store.get(error_key(rank)).decode(errors="replace").strip()
        except Exception:  # noqa: BLE001 - the store may be gone with it
            pass
        return (
            f"engine: rank {rank} (pid {pid}) exited with code {code}{error}; the engine cannot "
            f"go on without it (restart it; if the log shows a collective timeout, a rank "
            f"stalled: raise collective_timeout_s or check that GPU; if it was killed for memory, "
            f"lower max_batch_size / max_num_tokens or set num_kv_blocks)"
        )

    def _watch(self) -> None:
        while not self._stopping.wait(POLL_S):
            self._check()
            if self.failure is not None:
                break
        if self.failure is None:
            return
        logger.error("%s", self.failure)
        if self.is_cuda:
            try:
                dist.distributed_c10d._abort_process_group()
            except Exception:  # noqa: BLE001 - best effort; the hard exit follows
                logger.exception("engine: aborting the NCCL groups failed")
            if not self._stopping.wait(HARD_EXIT_S):
                logger.critical(
                    "engine: still blocked %.0f s after a rank died; exiting", HARD_EXIT_S
                )
                os._exit(1)

    def expect_exit(self) -> None:
        """Before the STOP command: a worker that exits from now on has not failed."""
        self._stopping.set()

    def stop(self, timeout_s: float = 30.0) -> None:
        """After the STOP command (or a failure): wait for each worker, then kill."""
        self._stopping.set()
        deadline = time.monotonic() + timeout_s
        for proc in self._procs.values():
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdin.close()

    def kill(self) -> None:
        self._stopping.set()
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdin.close()

    @property
    def pids(self) -> dict[int, int]:
        return {rank: proc.pid for rank, proc in self._procs.items()}
