"""Server-sent-event bytes of a stream's chunks, without json.dumps for the common ones.

A streamed token costs one chunk, and json.dumps of its dict (a JSONEncoder made per call, then
the walk of the dict) was the largest part of the frontend's Python work per chunk. Every chunk
of a stream shares its head (id, object, created, model), so the head is encoded once; a chunk
of one choice without logprobs (a completion's text, a chat delta of content, a role and
content, or nothing) is joined from pre-encoded pieces and its strings, escaped by json's own C
escaper, with no body dict built at all; its usage (null, or the counts with or without
prompt_tokens_details, as continuous_usage_stats sends them with every token) likewise. Any
other body (logprobs, tool calls, an unusual usage) is left to the encoder, so the bytes are
json.dumps' in every case (tests/unit/openai_api/test_sse_chunks.py holds the fast pieces to
it)."""

import json

# json.dumps(body, separators=(",", ":")), its encoder made once
_ENCODER = json.JSONEncoder(separators=(",", ":"))
_quote = json.encoder.encode_basestring_ascii  # json.dumps' escaping of a str, quotes included
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
DETAILED_USAGE_KEYS = (*USAGE_KEYS, "prompt_tokens_details")


def sse(body: dict) -> bytes:
    return b"data: " + _ENCODER.encode(body).encode() + b"\n\n"


def usage_json(usage: dict | None) -> str | None:
    """usage's JSON when it has the usual layout of ints; None: encode it whole."""
    if usage is None:
        return "null"
    keys = tuple(usage)
    if keys == DETAILED_USAGE_KEYS:
        details = usage["prompt_tokens_details"]
        if type(details) is not dict or tuple(details) != ("cached_tokens",):
            return None
        cached = details["cached_tokens"]
        if type(cached) is not int:
            return None
        tail = f',"prompt_tokens_details":{{"cached_tokens":{cached}}}}}'
    elif keys == USAGE_KEYS:
        tail = "}"
    else:
        return None
    prompt, completion, total = (
        usage["prompt_tokens"],
        usage["completion_tokens"],
        usage["total_tokens"],
    )
    if type(prompt) is not int or type(completion) is not int or type(total) is not int:
        return None
    counts = f'"prompt_tokens":{prompt},"completion_tokens":{completion},"total_tokens":{total}'
    return "{" + counts + tail


class ChunkEncoder:
    """The SSE bytes of one stream's single-choice chunks (their head: `head`)."""

    def __init__(self, head: dict):
        self._prefix = "data: " + _ENCODER.encode(head)[:-1] + ',"choices":[{"index":'

    def choice(
        self,
        index: int,
        text: str,
        finish_reason: str | None,
        usage: dict | None,
        has_usage: bool,
        delta: str | None,
    ) -> bytes | None:
        """One choice without logprobs: its text (delta None: a completion's) or a chat delta
        (delta: "" for {}, "content", or "role" for the role and content); has_usage: the body
        has a usage key (usage, or null). None: a layout to encode whole."""
        so_far = usage_json(usage) if has_usage else ""
        if so_far is None or type(index) is not int:
            return None
        if delta is None:
            middle = ',"text":' + _quote(text)
        elif not delta:
            middle = ',"delta":{}'
        elif delta == "role":
            middle = ',"delta":{"role":"assistant","content":' + _quote(text) + "}"
        else:
            middle = ',"delta":{"content":' + _quote(text) + "}"
        reason = "null" if finish_reason is None else _quote(finish_reason)
        usage_part = ',"usage":' + so_far if has_usage else ""
        return (
            f'{self._prefix}{index}{middle},"logprobs":null,"finish_reason":{reason}}}]'
            f"{usage_part}}}\n\n"
        ).encode()
