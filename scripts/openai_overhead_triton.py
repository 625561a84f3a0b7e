"""A Triton stand-in for bench_openai_overhead: answers the OpenAI frontend's gRPC calls
(ServerReady, ModelReady, ModelStreamInfer) as the served `tensorrt_llm` model does, with
request_output_len responses of --tokens-per-response token ids each (the last flagged
triton_final_response), from pre-encoded messages and at once: the frontend's own host cost is
what the benchmark measures, apart from any model's. Run by path
(`python scripts/openai_overhead_triton.py --port P`): it imports no `pipeline`."""

import argparse
import asyncio

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

FIRST_TOKEN = 100  # word-level tokens t100, t101, ...: pieces of text 4-5 characters long


def _response(ids: list[int], is_final: bool) -> service_pb2.ModelStreamInferResponse:
    result = service_pb2.ModelInferResponse(model_name="tensorrt_llm", model_version="1")
    result.parameters["triton_final_response"].bool_param = is_final
    out = result.outputs.add(name="output_ids", datatype="INT32", shape=[1, len(ids)])
    del out  # its bytes go in raw_output_contents, in the outputs' order
    result.raw_output_contents.append(np.array(ids, np.int32).tobytes())
    return service_pb2.ModelStreamInferResponse(infer_response=result)


def _output_len(request: service_pb2.ModelInferRequest) -> int:
    for index, tensor in enumerate(request.inputs):
        if tensor.name == "request_output_len":
            return int(np.frombuffer(request.raw_input_contents[index], np.int32)[0])
    raise ValueError("request_output_len missing")


class Replay(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, tokens_per_response: int, vocab_size: int):
        self.per = tokens_per_response
        self.vocab_size = vocab_size
        self._cache: dict[tuple[int, bool], service_pb2.ModelStreamInferResponse] = {}

    def _cached(self, start: int, is_final: bool) -> service_pb2.ModelStreamInferResponse:
        key = (start, is_final)
        if key not in self._cache:
            ids = [
                FIRST_TOKEN + (start + i) % (self.vocab_size - FIRST_TOKEN) for i in range(self.per)
            ]
            self._cache[key] = _response(ids, is_final)
        return self._cache[key]

    async def ServerReady(self, request, context):
        return service_pb2.ServerReadyResponse(ready=True)

    async def ModelReady(self, request, context):
        return service_pb2.ModelReadyResponse(ready=True)

    async def ModelStreamInfer(self, request_iterator, context):
        async for request in request_iterator:
            num = max(1, _output_len(request) // self.per)
            for step in range(num):
                yield self._cached(step * self.per % 512, step == num - 1)
            return


async def serve(port: int, tokens_per_response: int, vocab_size: int) -> None:
    server = grpc.aio.server(
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    )
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
        Replay(tokens_per_response, vocab_size), server
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens-per-response", type=int, default=1)
    parser.add_argument("--vocab-size", type=int, default=1024)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(args.port, args.tokens_per_response, args.vocab_size))


if __name__ == "__main__":
    main()
