"""Requests streamed to a served model over gRPC (pipeline.client.GrpcClient), one chunk per
response: what the server target's load generator, and each of its client processes, send with.

Token counting: each response's sequence_length output (our ensemble's: a response carries
several tokens when the server coalesces a stream that fell behind). A server without that output
(an upstream ensemble) gets one token per response with text, as one response per engine step.
Synthetic requests send end_id=-1 (as trtllm-bench's --eos_id -1) to run to exactly max_tokens.
"""

from collections.abc import Iterator

from pipeline.bench.target import Chunk
from pipeline.bench.workload import BenchRequest

NO_END_ID = -1


class GrpcStreams:
    name = "server"

    def __init__(self, url: str, timeout_s: float, model: str = "ensemble") -> None:
        from pipeline.client import GrpcClient

        self.url = url
        # the load generator's threads keep their streams open between requests (close() them)
        self.client = GrpcClient(url, model=model, timeout_s=timeout_s, keep_streams=True)
        self.count_tokens = False  # set by wait_ready, from the model's outputs

    def wait_ready(self, timeout_s: float) -> None:
        from pipeline.client.grpc_client import COUNT_OUTPUT

        self.client.wait_ready(timeout_s)
        self.count_tokens = COUNT_OUTPUT in self.client.output_names()

    def close(self) -> None:
        """Close the streams kept open: a server stops only once they are."""
        self.client.close()

    def stream(self, request: BenchRequest, temperature: float, seed: int) -> Iterator[Chunk]:
        from pipeline.client import GenerateRequest

        generate = GenerateRequest(
            request.prompt,
            max_tokens=request.max_tokens,
            temperature=temperature,
            seed=seed if temperature > 0 else None,
            end_id=NO_END_ID if request.ignore_eos else None,
        )
        for response in self.client.responses(
            generate.arrays(stream=True),
            count_tokens=self.count_tokens,
            request_id=request.request_id,  # joins the record with the server's trace
        ):
            if self.count_tokens:
                yield Chunk(response.num_tokens)
            elif response.text is not None:
                yield Chunk(1 if response.text else 0)


def counting_streams(url: str, timeout_s: float, model: str, count_tokens: bool) -> GrpcStreams:
    """GrpcStreams that already know whether the model counts tokens (a client process's)."""
    streams = GrpcStreams(url, timeout_s, model)
    streams.count_tokens = count_tokens
    return streams
