"""The tensorrt_llm model's service, as a Triton stub loads it: with the engine in a process of
its own (deploy.torch.engine_process, the default) each instance's stub forwards requests and
responses only, so importing it loads neither torch nor the engine's modules (each stub would
pay their import time and memory)."""

import subprocess
import sys

HEAVY = ("torch", "triton", "pipeline.engine.core.llm_engine", "pipeline.engine.execution")


def test_the_service_a_stub_imports_loads_no_engine():
    modules = "pipeline.triton_models.llm_service, pipeline.engine.core.engine_times"
    code = f"import sys, {modules}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "", f"a stub's imports load {loaded}"
