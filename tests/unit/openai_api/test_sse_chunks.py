"""A stream chunk's SSE bytes are json.dumps' exactly, whether joined from pre-encoded pieces
(the usual layouts) or encoded whole (anything else)."""

import itertools
import json

import pytest

from pipeline.openai_api.responses import Shape
from pipeline.openai_api.sse_chunks import ChunkEncoder

TEXTS = ["", " t123", 'quote " back \\ slash /', "é😀\x01\t\n\u2028", "x" * 300]
REASONS = [None, "stop", "length"]
USAGES = [
    None,
    {"prompt_tokens": 64, "completion_tokens": 3, "total_tokens": 67},
    {
        "prompt_tokens": 64,
        "completion_tokens": 3,
        "total_tokens": 67,
        "prompt_tokens_details": {"cached_tokens": 32},
    },
]


def dumped(body: dict) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def head(shape: Shape) -> dict:
    return shape._head(is_chunk=True)


@pytest.mark.parametrize("is_chat", [False, True])
def test_every_chunk_a_stream_sends_is_json_dumps_bytes(is_chat):
    shape = Shape(is_chat, 'model "ü"')
    cases = itertools.product(range(3), TEXTS, REASONS, [False, True], [False, True], USAGES)
    for index, text, reason, with_usage, role, so_far in cases:
        out = shape.chunk(index, text, reason, with_usage, role, so_far)
        body = json.loads(out.removeprefix(b"data: "))
        assert out == dumped(body), (index, text, reason, with_usage, role, so_far)
        assert body["id"] == shape.id and body["choices"][0]["index"] == index


def test_chunks_outside_the_usual_layouts_are_encoded_whole():
    shape = Shape(True, "m")
    usual = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    unusual_usages = [
        {"prompt_tokens": 1, "x": 2},
        {**usual, "prompt_tokens_details": {"cached_tokens": 1, "audio_tokens": 0}},
        {**usual, "prompt_tokens_details": None},
        {**usual, "total_tokens": 3.0},
    ]
    for so_far in unusual_usages:
        assert ChunkEncoder(head(shape)).choice(0, "a", None, so_far, True, "content") is None
        out = shape.chunk(0, "a", None, True, False, so_far)
        assert out == dumped(json.loads(out.removeprefix(b"data: ")))
        assert json.loads(out.removeprefix(b"data: "))["usage"] == so_far
    assert ChunkEncoder(head(shape)).choice(True, "a", None, None, False, "content") is None
    logprobs = {"content": [{"token": "a", "logprob": -0.5}]}
    for role in (False, True):
        out = shape.chunk(0, "a", None, True, role, None, logprobs)
        body = json.loads(out.removeprefix(b"data: "))
        assert out == dumped(body) and body["choices"][0]["logprobs"] == logprobs
