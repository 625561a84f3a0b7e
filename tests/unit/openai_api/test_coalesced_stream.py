"""A stream whose tokens reach the frontend several a response (the model merged what piled up
while it was behind) reads as the whole answer: every token once, in order, in fewer events
than tokens, with the usage counting tokens, not responses. The frontend runs as served
(scripts/openai_overhead_frontend.py) in front of a Triton stand-in answering 5 tokens a
response (scripts/openai_overhead_triton.py)."""

import json
import os
import subprocess
import sys

import pytest
import requests

from pipeline.server.ports import free_ports
from scripts.bench_openai_overhead import _wait_listening
from scripts.model_shapes import write_tokenizer
from scripts.openai_overhead_triton import FIRST_TOKEN
from tests.conftest import REPO

VOCAB_SIZE, PER_RESPONSE, MAX_TOKENS = 1024, 5, 20
pytestmark = pytest.mark.slow  # two processes to start


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    tokenizer = write_tokenizer(VOCAB_SIZE, tmp_path_factory.mktemp("tokenizer"))
    grpc_port, port = free_ports(2)
    scripts = REPO / "scripts"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    triton = subprocess.Popen(
        [sys.executable, str(scripts / "openai_overhead_triton.py"), f"--port={grpc_port}"]
        + [f"--tokens-per-response={PER_RESPONSE}", f"--vocab-size={VOCAB_SIZE}"]
    )
    frontend = subprocess.Popen(
        [sys.executable, str(scripts / "openai_overhead_frontend.py"), f"--port={port}"]
        + [f"--grpc-url=127.0.0.1:{grpc_port}", f"--tokenizer-dir={tokenizer}"]
        + [f"--vocab-size={VOCAB_SIZE}"],
        env=env,
    )
    try:
        _wait_listening(grpc_port, triton, "Triton stand-in")
        _wait_listening(port, frontend, "frontend")
        yield f"http://127.0.0.1:{port}/v1/completions"
    finally:
        for proc in (frontend, triton):
            proc.terminate()
            proc.wait(30)


def body(stream: bool) -> dict:
    return {
        "model": "bench",
        "prompt": [100, 101, 102],
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": stream,
        **({"stream_options": {"include_usage": True}} if stream else {}),
    }


def test_merged_responses_stream_every_token_once_in_order(url):
    whole = requests.post(url, json=body(False), timeout=60).json()
    expected = " ".join(f"t{FIRST_TOKEN + i}" for i in range(MAX_TOKENS))
    assert whole["choices"][0]["text"].split() == expected.split()

    with requests.post(url, json=body(True), stream=True, timeout=60) as response:
        events = [
            json.loads(line[len(b"data: ") :])
            for line in response.iter_lines()
            if line.startswith(b"data: ") and line != b"data: [DONE]"
        ]
    texts = [e["choices"][0]["text"] for e in events if e["choices"]]
    assert "".join(texts) == whole["choices"][0]["text"]
    assert len([t for t in texts if t]) <= MAX_TOKENS // PER_RESPONSE  # a piece a response
    assert events[-1]["usage"]["completion_tokens"] == MAX_TOKENS
