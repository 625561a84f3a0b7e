"""Errors are found in every body and every SSE event, whatever the HTTP status said."""

import pytest

from pipeline.client import ClientError
from pipeline.client.http_client import checked, parse_sse_line


def test_sse_lines():
    assert parse_sse_line('data: {"text_output": " Paris"}') == {"text_output": " Paris"}
    assert parse_sse_line("") is None and parse_sse_line(None) is None
    assert parse_sse_line(": keep-alive") is None


def test_error_event_after_200_is_raised():
    event = parse_sse_line('data: {"error": "tensorrt_llm: request: the prompt is empty"}')
    with pytest.raises(ClientError, match="ensemble failed the request: tensorrt_llm: request"):
        checked(event, "ensemble")


def test_malformed_event():
    with pytest.raises(ClientError, match="malformed event"):
        parse_sse_line("data: {not json")
