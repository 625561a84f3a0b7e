"""The OpenAI-compatible frontend as a bench target: the same requests as the gRPC path, sent to
/v1/completions of a frontend started here in front of the bench's tritonserver, so the two
served paths compare on one server, one engine and one workload (openai_vs_server).

The frontend runs as serve runs it: in a thread of the bench's process, or in worker processes
(serve.openai.workers); the load comes from client processes (bench.client_processes), so the
clients' GIL is not the frontend's.
"""

import contextlib
import functools
import math
from collections.abc import Iterator, Mapping
from pathlib import Path

from pipeline.bench.client_processes import ClientProcesses
from pipeline.bench.load_generator import LoadGenerator
from pipeline.bench.openai_streams import OpenAIStreams
from pipeline.bench.server_target import ServedLoad
from pipeline.specs.pipeline import PipelineSpec


class OpenAITarget(ServedLoad, OpenAIStreams):
    def generator(self, bench, origin_s: float) -> LoadGenerator | ClientProcesses:
        make_streams = functools.partial(
            OpenAIStreams, self.url, self.model, self.timeout_s, self.api_key
        )
        return self.served_generator(bench, origin_s, make_streams, self.name)


@contextlib.contextmanager
def openai_target(spec: PipelineSpec, grpc_url: str, deployed: Path) -> Iterator[OpenAITarget]:
    """The frontend (serve.openai, its workers included) in front of the tritonserver at
    grpc_url, for the deploy artifact `deployed`, while the block lasts."""
    from pipeline.artifacts import Manifest
    from pipeline.openai_api.server import frontend_server
    from pipeline.server.launch import endpoints

    facts = Manifest.read(deployed).extra
    metrics_url = endpoints(spec.deploy).metrics_url
    server = frontend_server(
        spec.serve.openai, spec.model.name, facts, spec.deploy, grpc_url, metrics_url
    )
    with server:
        target = OpenAITarget(
            server.url, server.model_name, spec.bench.request_timeout_s, server.api_key
        )
        try:
            target.wait_ready(spec.deploy.startup_timeout_s)
            yield target
        finally:
            target.close()


def openai_overhead(targets: Mapping[str, dict]) -> dict | None:
    """The OpenAI path vs the gRPC path on the same server and requests."""
    if "openai" not in targets or "server" not in targets:
        return None
    api, grpc = targets["openai"]["summary"], targets["server"]["summary"]

    def ratio(key: str) -> float:
        return api[key] / grpc[key] if grpc[key] else math.nan

    return {
        "output_tok_s_ratio": ratio("output_tok_s"),
        "request_per_s_ratio": ratio("request_per_s"),
        "ttft_ms_p50_added": api["ttft_ms_p50"] - grpc["ttft_ms_p50"],
        "itl_ms_p50_added": api["itl_ms_p50"] - grpc["itl_ms_p50"],
        "e2e_ms_p50_ratio": ratio("e2e_ms_p50"),
    }
