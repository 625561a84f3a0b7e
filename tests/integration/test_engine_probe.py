"""Real corruptions of a built engine's weights file, with its mtime put back so that the stat check
(verify_outputs) passes: the engine's probe refuses the engine at start, serve.verify=full's
re-hash names the file, and an engine that the probe cannot catch (its prompt never reaches the
broken weights) crash-loops until the restart limit, then stays down with the cause."""

import json
import os
import shutil
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.artifact_rehash import rehash_outputs
from pipeline.artifacts import verify_outputs
from pipeline.engine.engine_probe import PROBE_FILE
from pipeline.errors import ArtifactError
from pipeline.triton_repo.engine_supervisor import UNAVAILABLE
from pipeline.triton_repo.llm_service import LLMService

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


def test_a_flipped_weight_byte_with_its_mtime_put_back_keeps_the_engine_from_starting(
    engine_copy,
):
    # The corruption: one byte, the highest (sign and top exponent bits) of element 100 of
    # layer 0's MLP down projection (fp32, little-endian); XOR 0x40 flips the exponent's top bit,
    # so the weight goes from ~1e-2 to ~1e38: still finite, and every logit after it collapses.
    weights = engine_copy / WEIGHTS
    offset = _tensor_offset(weights, "transformer.layers.0.mlp.proj.weight") + 4 * 100 + 3
    with open(weights, "rb") as f:
        f.seek(offset)
        (byte,) = f.read(1)
    _write_keeping_mtime(weights, offset, bytes([byte ^ 0x40]))
    verify_outputs(engine_copy)  # the stat check cannot see it: same size, same mtime

    with pytest.raises(ArtifactError) as err:
        _service(engine_copy, lambda context, out: True)
    message = str(err.value)
    assert "\n" not in message
    assert f"engine {engine_copy}: {WEIGHTS}" in message
    assert "no longer give(s) the build's probe (greedy step 0" in message
    assert "`python -m pipeline build force=true`" in message

    with pytest.raises(ArtifactError, match=f"{WEIGHTS}: sha256 differs"):
        rehash_outputs(engine_copy)  # serve.verify=full


def test_an_engine_that_crashes_on_sampled_requests_stops_being_restarted(engine_copy):
    # The corruption: token 0's row of the input embedding (fp32) overwritten with NaN, mtime
    # put back. The probe's prompt never embeds token 0, so every start passes it; a sampled
    # request whose prompt holds token 0 gets NaN probabilities, its launch fails, and the
    # engine's own health check (one token: token 0) fails too: the engine fails, every time.
    weights = engine_copy / WEIGHTS
    offset = _tensor_offset(weights, "transformer.vocab_embedding.weight")
    _write_keeping_mtime(weights, offset, np.full(576, np.nan, np.float32).tobytes())
    verify_outputs(engine_copy)

    answers, answered = {}, threading.Condition()

    def respond(context, out) -> bool:
        with answered:
            answers[context] = out
            answered.notify_all()
        return True

    svc = _service(engine_copy, respond, max_restarts=2, restart_window_s=600.0)
    sampled = {
        "input_ids": np.array([[0, 504, 3575]], np.int32),
        "input_lengths": np.array([[3]], np.int32),
        "request_output_len": np.array([[4]], np.int32),
        "temperature": np.array([[1.0]], np.float32),
        "streaming": np.array([[False]]),
    }
    try:
        for attempt in range(3):  # the first start, then 2 restarts: each crashes on it
            _wait(lambda a=attempt: svc.is_ready and svc.stats()["num_restarts"] == a)
            svc.generate(sampled, attempt)
            with answered:
                assert answered.wait_for(lambda a=attempt: a in answers, 300)
            assert isinstance(answers[attempt], BaseException)
        _wait(lambda: svc.async_engine.is_given_up)  # the third failure in the window
        assert svc.stats()["num_restarts"] == 2 and svc.stats()["is_ready"] == 0
        with pytest.raises(RuntimeError) as err:
            svc.generate(sampled, "after")
        message = str(err.value)
        assert message.startswith(f"{UNAVAILABLE}: it failed and is not started again")
        assert "3 failures within 600 s" in message and "restart the server" in message
        assert "probability tensor contains either `inf`, `nan` or element < 0" in message
    finally:
        svc.shutdown()
