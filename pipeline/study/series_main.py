"""A series in a process of its own: `python -m pipeline.study.series_main REASON_FILE` with the
pickled SeriesJob on stdin. Exit code: 0 done, 3 restart (an OOM or error left the engine broken),
4 out of time, 5 it could not run (why: one line in REASON_FILE, for the report's first lines).
A fresh process after an OOM gets all of the GPU memory back, which the same process, holding the
old engine's cached blocks and graphs, would not."""

import logging
import os
import pickle
import sys
from pathlib import Path

from pipeline.study.series import DONE, OUT_OF_TIME, RESTART, run_series

FAILED = "failed"  # the engine did not load, or a cell raised
EXIT_CODES = {DONE: 0, RESTART: 3, OUT_OF_TIME: 4, FAILED: 5}


def main() -> None:
    job = pickle.load(sys.stdin.buffer)
    logging.basicConfig(
        level=logging.INFO, format=f"[study {job.series.key}] %(levelname)s %(message)s"
    )
    try:
        code = EXIT_CODES[run_series(job)]
    except Exception as exc:  # noqa: BLE001 - the engine did not load: the report says why
        logging.getLogger(__name__).exception("study: series %s could not run", job.series.key)
        Path(sys.argv[1]).write_text(f"{type(exc).__name__}: {exc}".splitlines()[0][:600])
        code = EXIT_CODES[FAILED]
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown (CUDA's takes seconds)


if __name__ == "__main__":
    main()
