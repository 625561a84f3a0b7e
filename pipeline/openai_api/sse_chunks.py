"""Server-sent-event bytes of a stream's chunks, without json.dumps for the common ones.

A streamed token costs one chunk, and json.dumps of its dict (a JSONEncoder made per call, then
the walk of the dict) was the largest part of the frontend's Python work per chunk. Every chunk
of a stream shares its head (id, object, created, model), so the head is encoded once; a chunk
of the usual layouts (a completion's text, a chat delta of content, a role and content, or
nothing; no logprobs; usage null or the three counts) is joined from pre-encoded pieces and its
strings, escaped by json's own C escaper. Any other body (logprobs, a delta with more fields,
several choices) goes through the encoder, so the bytes are json.dumps' in every case
(tests/unit/openai_api/test_sse_chunks.py holds the fast pieces to it)."""

import json

# json.dumps(body, separators=(",", ":")), its encoder made once
_ENCODER = json.JSONEncoder(separators=(",", ":"))
_quote = json.encoder.encode_basestring_ascii  # json.dumps' escaping of a str, quotes included
HEAD_KEYS = ("id", "object", "created", "model", "choices")
TEXT_CHOICE = ("index", "text", "logprobs", "finish_reason")
DELTA_CHOICE = ("index", "delta", "logprobs", "finish_reason")
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def sse(body: dict) -> bytes:
    return b"data: " + _ENCODER.encode(body).encode() + b"\n\n"


def _usage(usage) -> str | None:
    if usage is None:
        return "null"
    if tuple(usage) != USAGE_KEYS:
        return None
    prompt, completion, total = usage.values()
    if type(prompt) is not int or type(completion) is not int or type(total) is not int:
        return None
    return f'{{"prompt_tokens":{prompt},"completion_tokens":{completion},"total_tokens":{total}}}'


def _delta(delta) -> str | None:
    keys = tuple(delta)
    if not keys:
        return "{}"
    if keys == ("content",) and type(delta["content"]) is str:
        return '{"content":' + _quote(delta["content"]) + "}"
    if keys == ("role", "content") and type(delta["role"]) is str:
        if type(delta["content"]) is str:
            return (
                '{"role":' + _quote(delta["role"]) + ',"content":' + _quote(delta["content"]) + "}"
            )
    return None


class ChunkEncoder:
    """The SSE bytes of one stream's chunk bodies (their head: `head`)."""

    def __init__(self, head: dict):
        self._head = tuple(head.values())
        self._prefix = _ENCODER.encode(head)[:-1] + ',"choices":[{"index":'

    def encode(self, body: dict) -> bytes:
        fast = self._fast(body)
        return sse(body) if fast is None else fast.encode()

    def _fast(self, body: dict) -> str | None:
        keys = tuple(body)
        if keys[:5] != HEAD_KEYS or keys[5:] not in ((), ("usage",)):
            return None
        if (body["id"], body["object"], body["created"], body["model"]) != self._head:
            return None
        choices = body["choices"]
        if len(choices) != 1:
            return None
        choice = choices[0]
        layout = tuple(choice)
        if layout not in (TEXT_CHOICE, DELTA_CHOICE):
            return None
        if choice["logprobs"] is not None or type(choice["index"]) is not int:
            return None
        reason = choice["finish_reason"]
        if reason is not None and type(reason) is not str:
            return None
        if layout == TEXT_CHOICE and type(choice["text"]) is str:
            middle = ',"text":' + _quote(choice["text"])
        elif layout == DELTA_CHOICE and type(choice["delta"]) is dict:
            delta = _delta(choice["delta"])
            if delta is None:
                return None
            middle = ',"delta":' + delta
        else:
            return None
        tail = '"logprobs":null,"finish_reason":' + ("null" if reason is None else _quote(reason))
        usage = ""
        if keys[5:]:
            usage = _usage(body["usage"])
            if usage is None:
                return None
            usage = ',"usage":' + usage
        return f"data: {self._prefix}{choice['index']}{middle},{tail}}}]{usage}}}\n\n"
