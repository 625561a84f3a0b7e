"""The frontend and the request layer load no engine: every frontend worker process would pay
torch's and transformers' import time and memory for types it only checks and shapes."""

import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "triton", "pipeline.engine")


@pytest.mark.parametrize("module", ["pipeline.openai_api.routes", "pipeline.request"])
def test_importing_loads_no_engine(module):
    code = f"import sys, {module}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "", f"importing {module} loads {loaded}"
