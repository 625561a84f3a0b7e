"""demo: fetch -> convert -> build -> deploy -> serve SmolLM2, stream a few answers, measure.

Starts the real tritonserver on the deployed repository, streams three chat answers over gRPC
as they arrive, then sends a burst of concurrent requests for a latency/throughput line, asks
one question through the OpenAI-compatible API, and stops the server (no processes or shared
memory left behind).
"""

import logging
import statistics
import time
from pathlib import Path

from transformers import AutoTokenizer

from pipeline.artifacts import Manifest
from pipeline.client import GenerateRequest, GrpcClient
from pipeline.client.timing import stream_concurrently, timed_stream
from pipeline.errors import ConfigError
from pipeline.openai_api import quick_chat
from pipeline.openai_api.server import serve_beside
from pipeline.server import launch
from pipeline.specs.pipeline import PipelineSpec
from pipeline.stages import deploy

log = logging.getLogger(__name__)

QUESTIONS = (
    "What is the capital of France?",
    "Give me two tips for writing readable Python code.",
    "Explain in one sentence what a GPU is.",
)
ANSWER_TOKENS = 48
NUM_BURST_REQUESTS = 16
BURST_TOKENS = 32


def _chat_prompts(tokenizer_dir: Path) -> list[str]:
    """The instruct model answers best inside its chat template (applied client-side)."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if tokenizer.chat_template is None:
        return list(QUESTIONS)
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )
        for q in QUESTIONS
    ]


def _burst_line(client: GrpcClient, prompts: list[str], concurrency: int) -> str:
    requests = [
        GenerateRequest(prompts[i % len(prompts)], max_tokens=BURST_TOKENS)
        for i in range(NUM_BURST_REQUESTS)
    ]
    timings, wall_s = stream_concurrently(client, requests, concurrency)
    num_tokens = sum(t.num_tokens for t in timings)
    ttft_ms = statistics.median(t.ttft_s for t in timings) * 1e3
    latency_s = statistics.median(t.latency_s for t in timings)
    return (
        f"{NUM_BURST_REQUESTS} requests x {BURST_TOKENS} tokens at concurrency "
        f"{concurrency}: {num_tokens / wall_s:.1f} tok/s, {len(timings) / wall_s:.2f} req/s, "
        f"TTFT p50 {ttft_ms:.0f} ms, latency p50 {latency_s:.2f} s"
    )


def run(spec: PipelineSpec) -> Path:
    artifact = deploy.run(spec)
    facts = Manifest.read(artifact).extra
    if facts["backend"] != "torch":
        raise ConfigError(
            "demo: runs the torch backend on this machine; use backend=torch, or "
            "`make serve BACKEND=trtllm` on a GPU host for TensorRT-LLM"
        )
    prompts = _chat_prompts(Path(facts["tokenizer_dir"]))
    start = time.perf_counter()
    with launch.signals_as_interrupt(), launch.local_server(spec.deploy, spec.workdir) as server:
        startup_s = time.perf_counter() - start
        print(
            f"demo: tritonserver ready in {startup_s:.1f} s ({server.endpoints.grpc_url})",
            flush=True,
        )
        client = GrpcClient(server.endpoints.grpc_url, timeout_s=spec.deploy.startup_timeout_s)
        single = []
        for question, prompt in zip(QUESTIONS, prompts, strict=True):
            print(f"\n>>> {question}\n", flush=True)
            timing = timed_stream(
                client,
                GenerateRequest(prompt, max_tokens=ANSWER_TOKENS),
                on_delta=lambda d: print(d, end="", flush=True),
            )
            single.append(timing)
            print(
                f"\n[{timing.num_tokens} tokens, first after {timing.ttft_s * 1e3:.0f} ms, "
                f"{timing.num_tokens / timing.latency_s:.1f} tok/s]",
                flush=True,
            )
        burst = _burst_line(client, prompts, concurrency=facts["triton_max_batch_size"])
        with serve_beside(spec, facts, server.endpoints) as api:
            if api is not None:
                print(f"\n>>> the OpenAI API ({api.url}/v1)\n", flush=True)
                print(quick_chat.ask(api, QUESTIONS[0], ANSWER_TOKENS, 300), flush=True)
    print(
        f"\ndemo: startup {startup_s:.1f} s | one stream: TTFT p50 "
        f"{statistics.median(t.ttft_s for t in single) * 1e3:.0f} ms, "
        f"{sum(t.num_tokens for t in single) / sum(t.latency_s for t in single):.1f} tok/s | "
        f"{burst} | server stopped"
    )
    return artifact
