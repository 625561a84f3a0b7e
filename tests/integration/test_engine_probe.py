"""A built engine's weights file corrupted for real, its mtime put back so that the stat check
(verify_outputs) passes: the engine's probe refuses the engine at start (in the service, and
`pipeline serve` never reports ready), and serve.verify=full's re-hash names the file. An engine
that keeps dying is started again up to the limit, then stays down with the cause."""

import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.artifact_rehash import rehash_outputs
from pipeline.artifacts import verify_outputs
from pipeline.engine.core.engine_probe import PROBE_FILE
from pipeline.errors import ArtifactError
from pipeline.request.errors import ENGINE_UNAVAILABLE
from pipeline.server.ports import free_ports
from pipeline.stages import build
from pipeline.triton_models.llm_service import LLMService
from tests.conftest import REPO, SMOLLM_ENGINE_OVERRIDES, make_spec

pytestmark = pytest.mark.slow
WEIGHTS = "rank0.safetensors"


def _tensor_offset(path: Path, name: str) -> int:
    """Where tensor `name`'s bytes start in a safetensors file."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
    assert header[name]["dtype"] == "F32"
    return 8 + header_len + header[name]["data_offsets"][0]


def _write_keeping_mtime(path: Path, offset: int, data: bytes) -> None:
    """Overwrite bytes in place, then put the file's times back: size and mtime as recorded."""
    before = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.fixture
def engine_copy(smollm_engine_dir, tmp_path) -> Path:
    """The shared build-stage engine, copied with its file times (its manifest still matches)."""
    copy = tmp_path / smollm_engine_dir.name
    shutil.copytree(smollm_engine_dir, copy)
    assert (copy / PROBE_FILE).is_file()
    verify_outputs(copy)
    return copy


def _flip_high_byte(weights: Path) -> None:
    """The corruption: one byte, the highest (sign and top exponent bits) of element 100 of layer
    0's MLP down projection (fp32, little-endian); XOR 0x40 flips the exponent's top bit, so the
    weight goes from ~1e-2 to ~1e38: still finite, and every logit after it collapses. The file
    keeps its size and mtime."""
    offset = _tensor_offset(weights, "transformer.layers.0.mlp.proj.weight") + 4 * 100 + 3
    with open(weights, "rb") as f:
        f.seek(offset)
        (byte,) = f.read(1)
    _write_keeping_mtime(weights, offset, bytes([byte ^ 0x40]))


def _wait(condition, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.1)


def _service(engine_dir: Path, respond, **kwargs) -> LLMService:
    return LLMService(
        engine_dir,
        "cpu",
        {"scheduler_policy": "guaranteed_no_evict", "enable_chunked_prefill": True},
        True,
        False,
        0.0,
        True,  # the engine in its own process, as deployed
        respond,
        **kwargs,
    )


def _nan_embedding_row(weights: Path) -> None:
    """The corruption: token 0's row of the input embedding (fp32) overwritten with NaN, mtime
    put back. The probe's prompt never embeds token 0: its logits stay as recorded, and a prompt
    holding token 0 is answered with tokens [0, 0, 0, 0] (empty text)."""
    offset = _tensor_offset(weights, "transformer.vocab_embedding.weight")
    _write_keeping_mtime(weights, offset, np.full(576, np.nan, np.float32).tobytes())


@pytest.mark.parametrize(
    ("corrupt", "why"),
    [
        (_flip_high_byte, "greedy step 0: top logit"),
        (_nan_embedding_row, "a weight is NaN or infinite"),
    ],
)
def test_a_corrupted_weight_with_its_mtime_put_back_keeps_the_engine_from_starting(
    engine_copy, corrupt, why
):
    corrupt(engine_copy / WEIGHTS)
    verify_outputs(engine_copy)  # the stat check cannot see it: same size, same mtime

    with pytest.raises(ArtifactError) as err:
        _service(engine_copy, lambda context, out: True)
    message = str(err.value)
    assert "\n" not in message
    assert f"engine {engine_copy}: {WEIGHTS}" in message
    assert f"no longer give(s) the build's probe ({why}" in message
    assert "`python -m pipeline build force=true`" in message

    with pytest.raises(ArtifactError, match=f"{WEIGHTS}: sha256 differs"):
        rehash_outputs(engine_copy)  # serve.verify=full


@pytest.mark.triton
def test_serve_of_an_engine_with_a_flipped_byte_never_reports_ready(session_workdir, tmp_path):
    http, grpc, metrics = free_ports(3)
    overrides = (
        # limits no other test builds: this engine is corrupted, the shared one never is
        *SMOLLM_ENGINE_OVERRIDES,
        "build.max_batch_size=5",
        f"deploy.repo_dir={tmp_path / 'model_repo'}",
        f"deploy.http_port={http}",
        f"deploy.grpc_port={grpc}",
        f"deploy.metrics_port={metrics}",
        "serve.openai.enabled=false",
    )
    engine = build.run(make_spec("build", *overrides, workdir=session_workdir))
    _flip_high_byte(engine / WEIGHTS)
    served = subprocess.run(
        [sys.executable, "-m", "pipeline", "serve", *overrides, f"workdir={session_workdir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    text = served.stdout + served.stderr
    assert served.returncode == 1 and "serve: ready" not in text
    lines = [line for line in text.splitlines() if "no longer give(s) the build's probe" in line]
    assert lines, text[-3000:]
    assert f"engine {engine}: {WEIGHTS}" in lines[0]
    assert "`python -m pipeline build force=true`" in lines[0]


def test_an_engine_that_keeps_dying_stops_being_restarted(smollm_engine_dir):
    # The crash loop: the engine process SIGKILLed each time it is up (as an OOM killer would on
    # every load). A weight that fails only sampled requests is no way to make one here: the
    # probe now refuses NaN weights at start, and before it did, NaN over token 0's embedding
    # row gave this CPU engine's sampled requests tokens [0, 0, 0, 0], no engine failure.
    answers, answered = {}, threading.Condition()

    def respond(context, out) -> bool:
        with answered:
            answers[context] = out
            answered.notify_all()
        return True

    svc = _service(smollm_engine_dir, respond, max_restarts=2, restart_window_s=600.0)
    request = {
        "input_ids": np.array([[504, 3575, 282]], np.int32),
        "input_lengths": np.array([[3]], np.int32),
        "request_output_len": np.array([[200]], np.int32),
        "end_id": np.array([[-1]], np.int32),
        "streaming": np.array([[False]]),
    }
    try:
        for attempt in range(3):  # the first start, then 2 restarts: each killed
            _wait(lambda a=attempt: svc.is_ready and svc.stats()["num_restarts"] == a)
            svc.generate(request, attempt)
            svc.async_engine.engine._process.kill()
            with answered:
                assert answered.wait_for(lambda a=attempt: a in answers, 300)
            assert "engine process exited (code -9)" in str(answers[attempt])
        _wait(lambda: svc.async_engine.is_given_up)  # the third failure in the window
        assert svc.stats()["num_restarts"] == 2 and svc.stats()["is_ready"] == 0
        with pytest.raises(RuntimeError) as err:
            svc.generate(request, "after")
        message = str(err.value)
        assert message.startswith(f"{ENGINE_UNAVAILABLE}: it failed and is not started again")
        assert "it failed 3 time(s) within 600 s" in message and "restart the server" in message
        assert "engine process exited (code -9)" in message
    finally:
        svc.shutdown()
