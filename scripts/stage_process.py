"""A pipeline stage run by the CLI in a fresh process (it frees the GPU after it), its artifact
dir read from a JSON file the process writes: what it prints (Hydra's log, a late warning) is
only its log."""

import json
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent  # `python -m pipeline` runs from here

# the CLI as `python -m pipeline` runs it, the stage's artifact dir also written to a JSON file
CHILD = """
import json, sys
from pathlib import Path
from pipeline import cli
result_path = Path(sys.argv.pop(1))
run_stage = cli.run_stage
def run_and_record(spec):
    out = run_stage(spec)
    result_path.write_text(json.dumps({"stage": spec.stage, "artifact": str(out)}))
    return out
cli.run_stage = run_and_record
cli.main()
"""


def run_step(stage: str, overrides: list[str], log_path: Path, timeout_s: float) -> Path:
    """The pipeline's CLI running `stage` with these overrides, in a fresh process (it frees the
    GPU after it); returns the stage's artifact dir."""
    result_path = log_path.with_suffix(".result.json")
    result_path.unlink(missing_ok=True)
    argv = [sys.executable, "-c", CHILD, str(result_path), stage, *overrides]
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # SIGINT first: the stage's `with` blocks stop the server it started
        proc.send_signal(signal.SIGINT)
        try:
            output, _ = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        log_path.write_text(output)
        raise RuntimeError(
            f"`{stage} ...` ran past {timeout_s:.0f} s (time budget); log {log_path}"
        ) from None
    log_path.write_text(output)
    if proc.returncode != 0 or not result_path.is_file():
        lines = output.strip().splitlines()
        raise RuntimeError(
            f"`{stage} ...` exited {proc.returncode}; log {log_path}:\n" + "\n".join(lines[-30:])
        )
    return Path(json.loads(result_path.read_text())["artifact"])
