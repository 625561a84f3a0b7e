"""A stream chunk's SSE bytes are json.dumps' exactly, whether joined from pre-encoded pieces
(the usual layouts) or encoded whole (anything else)."""

import itertools
import json

import pytest

from pipeline.openai_api.responses import Shape
from pipeline.openai_api.sse_chunks import ChunkEncoder

TEXTS = ["", " t123", 'quote " back \\ slash /', "é😀\x01\t\n\u2028", "x" * 300]
REASONS = [None, "stop", "length"]
USAGES = [None, {"prompt_tokens": 64, "completion_tokens": 3, "total_tokens": 67}]


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


def test_bodies_outside_the_usual_layouts_are_encoded_whole():
    shape = Shape(True, "m")
    encoder = ChunkEncoder(head(shape))
    choice = {"index": 0, "delta": {"content": "a"}, "logprobs": None, "finish_reason": None}
    others = [
        {**head(shape), "choices": [{**choice, "logprobs": {"content": [{"logprob": -0.5}]}}]},
        {**head(shape), "choices": [{**choice, "delta": {"tool_calls": [{"index": 0}]}}]},
        {**head(shape), "choices": [{**choice, "delta": {"role": "assistant"}}]},
        {**head(shape), "choices": [choice, {**choice, "index": 1}]},
        {**head(shape), "choices": [{**choice, "index": True}]},
        {**head(shape), "choices": [choice], "usage": {"prompt_tokens": 1, "x": 2}},
        {**head(shape), "choices": [choice], "usage": None, "extra": 1},
        {**head(shape), "id": "another", "choices": [choice]},
        {**head(shape), "choices": []},
    ]
    for body in others:
        assert encoder.encode(body) == dumped(body)
