"""scripts.check_rank_teardown --tiny: the GPU check's code path on CPU (gloo): each engine's
ranks close and its process exits cleanly."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_check_rank_teardown_tiny_closes_every_mapping_cleanly(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "scripts.check_rank_teardown", "--out", str(tmp_path), "--tiny"],
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=400,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    mappings = json.loads((tmp_path / "rank_teardown.json").read_text())["mappings"]
    assert sorted(mappings) == ["pp2", "tp2"]
    for result in mappings.values():
        assert result["ok"], result
        assert result["close_s"] < 20
