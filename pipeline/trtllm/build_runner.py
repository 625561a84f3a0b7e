"""Run trtllm-build as a subprocess; its whole output goes to a log kept in the artifact."""

import logging
import shlex
import shutil
import subprocess
import time
from collections import deque
from pathlib import Path

from pipeline.errors import StageError

log = logging.getLogger(__name__)

TAIL_LINES = 50


def run_trtllm_build(argv: list[str], log_path: Path, failure_log_dir: Path) -> None:
    """Run argv, writing stdout+stderr to log_path; on failure keep the log and raise StageError.

    failure_log_dir receives a copy of the log when the build fails, because the artifact's temp
    dir (where log_path lives) is discarded then.
    """
    command = shlex.join(argv)
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with open(log_path, "w") as out:
        out.write(f"$ {command}\n")
        out.flush()
        try:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
            )
        except OSError as exc:
            raise StageError(f"build: cannot start {argv[0]} ({exc}); command: {command}") from None
        for line in proc.stdout:
            out.write(line)
            tail.append(line.rstrip("\n"))
            log.debug("trtllm-build: %s", line.rstrip("\n"))
        returncode = proc.wait()
    if returncode != 0:
        failure_log_dir.mkdir(parents=True, exist_ok=True)
        kept = failure_log_dir / f"trtllm-build-{time.strftime('%Y%m%d-%H%M%S')}.log"
        shutil.copyfile(log_path, kept)
        lines = "\n".join(tail)
        raise StageError(
            f"build: trtllm-build failed with exit code {returncode}; command: "
            f"{command}; full log: {kept}; last {len(tail)} lines:\n{lines}"
        )
