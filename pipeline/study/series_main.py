"""A series in a process of its own: `python -m pipeline.study.series_main` with the pickled
SeriesJob on stdin. Exit code: 0 done, 3 restart (an OOM or error left the engine broken), 4 out
of time. A fresh process after an OOM gets all of the GPU memory back, which the same process,
holding the old engine's cached blocks and graphs, would not."""

import logging
import os
import pickle
import sys

from pipeline.study.series import DONE, OUT_OF_TIME, RESTART, run_series

EXIT_CODES = {DONE: 0, RESTART: 3, OUT_OF_TIME: 4}


def main() -> None:
    job = pickle.load(sys.stdin.buffer)
    logging.basicConfig(
        level=logging.INFO, format=f"[study {job.series.key}] %(levelname)s %(message)s"
    )
    code = EXIT_CODES[run_series(job)]
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown (CUDA's takes seconds)


if __name__ == "__main__":
    main()
