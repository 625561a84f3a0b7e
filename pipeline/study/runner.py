"""Every series of the study, each in a process of its own (study.isolate) or in this one,
restarted after a failure that left its engine broken, and stopped starting new cells past the
time budget (a rerun resumes where it stopped: finished cells are artifacts)."""

import logging
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
from tqdm import tqdm

from pipeline.study.series import DONE, OUT_OF_TIME, RESTART, SeriesJob, is_finished, run_series
from pipeline.study.series_main import EXIT_CODES, FAILED

log = logging.getLogger(__name__)
MAX_RESTARTS = 4  # fresh engines a series gets after OOMs / errors (one per failing cell)
RESULTS = {code: result for result, code in EXIT_CODES.items()}


def _exit_reason(code: int) -> str:
    if code >= 0:
        return f"its process exited with code {code} (its log lines above say why)"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    why = f"its process was killed ({name})"
    if -code == signal.SIGKILL:  # nobody here sends it: the kernel's out-of-memory killer does
        available = psutil.virtual_memory().available / 2**30
        why += (
            f", most likely by the kernel for memory ({available:.1f} GiB available now); lower "
            f"study.max_batch_size or set study.num_kv_blocks"
        )
    return why


def _run_isolated(job: SeriesJob) -> str:
    # this process's import path: the series imports the `pipeline` this one runs (a checkout
    # on PYTHONPATH, or the installed package)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with tempfile.TemporaryDirectory(prefix="study-series-") as tmp:
        reason = Path(tmp) / "reason.txt"
        proc = subprocess.run(
            [sys.executable, "-m", "pipeline.study.series_main", str(reason)],
            input=pickle.dumps(job),
            env=env,
        )
        if RESULTS.get(proc.returncode) == FAILED and reason.is_file():
            return f"could not run: {reason.read_text()}"
    if proc.returncode in RESULTS:
        return RESULTS[proc.returncode]
    return _exit_reason(proc.returncode)


def _run_here(job: SeriesJob) -> str:
    try:
        return run_series(job)
    except Exception as exc:  # noqa: BLE001 - the other series still run; the report says why
        log.exception("study: series %s could not run", job.series.key)
        return f"could not run: {type(exc).__name__}: {exc}".splitlines()[0][:600]


def run_series_until_done(job: SeriesJob, isolate: bool) -> str:
    """DONE, OUT_OF_TIME, or why the series could not finish."""
    for _ in range(MAX_RESTARTS + 1):
        result = _run_isolated(job) if isolate else _run_here(job)
        if result != RESTART:
            return result
    return f"still failing after {MAX_RESTARTS} fresh engines"


def run_all(jobs: Sequence[SeriesJob], isolate: bool) -> list[str]:
    """Run every unfinished series; returns notes on the series that did not finish."""
    notes = []
    with tqdm(jobs, desc="study", unit="series", disable=None) as bar:
        for job in bar:
            bar.set_postfix_str(job.series.key)
            if is_finished(job):
                continue
            if job.deadline_s and time.time() > job.deadline_s:
                notes.append(f"{job.series.key}: not run (study.time_budget_s spent)")
                continue
            result = run_series_until_done(job, isolate)
            if result == OUT_OF_TIME:
                notes.append(f"{job.series.key}: stopped (study.time_budget_s spent)")
            elif result != DONE:
                notes.append(f"{job.series.key}: {result}")
                log.error("study: series %s: %s", job.series.key, result)
    if notes:
        notes.append("a rerun of the same command resumes: finished cells are kept")
    return notes
