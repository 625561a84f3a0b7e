"""The bench's OpenAI target against the frontend, beside the gRPC path on the same server."""

import time

import pytest

from tests.integration.openai_api.conftest import API_KEY

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def test_bench_openai_streams_count_the_tokens_the_grpc_path_counts(api, triton, tokenizer):
    """The bench's OpenAI target on a synthetic workload (token-id prompts, EOS off): every
    request's events add up to exactly output_len tokens, as through the gRPC path."""
    from pipeline.bench.grpc_streams import GrpcStreams
    from pipeline.bench.load_generator import LoadGenerator
    from pipeline.bench.metrics import summarize
    from pipeline.bench.openai_streams import OpenAIStreams
    from pipeline.bench.openai_target import openai_overhead
    from pipeline.bench.workload import PromptMaker

    output_len = 8
    workload = PromptMaker(tokenizer).make("synthetic", None, 4, 16, output_len, 0, "req")
    load = {"mode": "concurrency", "concurrency": 2, "request_rate": 1.0, "temperature": 0.0}
    load |= {"seed": 0, "origin_s": time.perf_counter()}
    summaries = {}
    for name, streams in (
        ("openai", OpenAIStreams(api.url, api.model_name, 120, API_KEY)),
        ("server", GrpcStreams(triton.endpoints.grpc_url, 120)),
    ):
        streams.wait_ready(60)
        try:
            records = LoadGenerator(streams, **load).run(workload, "measure")
        finally:
            streams.close()
        assert [r.error for r in records] == [None] * len(workload), name
        assert [r.num_output_tokens for r in records] == [output_len] * len(workload), name
        assert all(r.first_token_s is not None for r in records), name
        summaries[name] = {"summary": summarize(records)}
    ratio = openai_overhead(summaries)
    assert ratio["output_tok_s_ratio"] > 0
