"""The served `tensorrt_llm` model over Triton's gRPC ModelStreamInfer, on asyncio.

Token ids in, token ids out, through the tensorrtllm backend's own inputs (interface.LLM_INPUTS),
so the same frontend serves backend=torch and backend=trtllm: tokenizing and detokenizing stay in
this process, off the python stubs' GIL. Every request is streamed (streaming=true), so a request
whose client has gone can be cancelled while it runs; each opens its own gRPC stream on one
shared channel.

Ending a stream: after the final response the request side is closed and the call left to end
by itself (cancelling a finished stream leaks server state in Triton 2.51); before it, the call
is cancelled, which Triton passes on to the model as the request's cancellation.
"""

import uuid
from collections.abc import AsyncIterator

import grpc
import numpy as np
from tritonclient.grpc import InferResult, service_pb2, service_pb2_grpc
from tritonclient.utils import serialize_byte_tensor

from pipeline.lora.adapters import task_id
from pipeline.openai_api.grpc_tensors import output_list
from pipeline.openai_api.response_scores import (
    PROMPT_LOG_PROBS,
    TOP_LOG_PROBS,
    ResponseScores,
    response_scores,
)
from pipeline.request.errors import ENGINE_UNAVAILABLE, SHUTTING_DOWN
from pipeline.request.sampling_params import SamplingParams

LLM_MODEL = "tensorrt_llm"
LOG_PROBS = "output_log_probs"  # [1, 1, n]: each new token's log probability
# [1, 1] on the final response: prompt blocks the engine's prefix cache held (backend=torch sends
# it when asked by name; the tensorrtllm backend with return_perf_metrics)
REUSED_BLOCKS = "kv_cache_reused_blocks"
_DATATYPES = {
    np.int32: "INT32",
    np.float32: "FP32",
    np.uint64: "UINT64",
    np.bool_: "BOOL",
    np.object_: "BYTES",
}


class EngineError(Exception):
    """The model failed the request (its message), or Triton could not be reached."""

    def __init__(self, message: str, is_request_error: bool = False, status: int = 502):
        super().__init__(message)
        self.is_request_error = is_request_error  # the request's fault (400), not the server's
        self.status = status


def stop_words_list(sequences: tuple[tuple[int, ...], ...]) -> np.ndarray:
    """[1, 2, N]: row 0 every word's ids in a row, row 1 each word's end offset, -1 padded."""
    ids = [t for seq in sequences for t in seq]
    ends = np.cumsum([len(seq) for seq in sequences]).tolist()
    return np.array([[ids, ends + [-1] * (len(ids) - len(ends))]], np.int32)


def embedding_bias(biases: tuple[tuple[int, float], ...], vocab_size: int) -> np.ndarray:
    """[1, V]: the tensorrtllm backend's per-vocabulary bias added to the logits."""
    dense = np.zeros((1, vocab_size), np.float32)
    for token, bias in biases:
        dense[0, token] = bias
    return dense


def request_arrays(
    prompt_ids: list[int], params: SamplingParams, vocab_size: int
) -> dict[str, np.ndarray]:
    """The tensorrt_llm inputs of one streamed request ([1, ...]: batch 1). stop_token_ids go
    as one-token stop words (kept in the output, as the engine keeps a stop token)."""
    arrays = {
        "input_ids": np.array([prompt_ids], np.int32),
        "input_lengths": np.array([[len(prompt_ids)]], np.int32),
        "request_output_len": np.array([[params.max_tokens]], np.int32),
        "streaming": np.array([[True]], np.bool_),
        "temperature": np.array([[params.temperature]], np.float32),
        "runtime_top_k": np.array([[params.top_k]], np.int32),
        "runtime_top_p": np.array([[params.top_p]], np.float32),
    }
    if params.seed is not None:
        arrays["seed"] = np.array([[params.seed]], np.uint64)
    if params.end_id is not None:
        arrays["end_id"] = np.array([[params.end_id]], np.int32)
    stops = params.stop_sequences + tuple((t,) for t in params.stop_token_ids)
    if stops:
        arrays["stop_words_list"] = stop_words_list(stops)
    if params.logit_bias:
        arrays["embedding_bias"] = embedding_bias(params.logit_bias, vocab_size)
    # the rest only when set: a model without them (the tensorrtllm backend has no
    # prompt_ignore_length) then still takes the request
    for name, default in (
        ("presence_penalty", 0.0),
        ("frequency_penalty", 0.0),
        ("repetition_penalty", 1.0),
        ("min_p", 0.0),  # the torch backend's (an input after upstream's)
    ):
        if getattr(params, name) != default:
            arrays[name] = np.array([[getattr(params, name)]], np.float32)
    for name in ("min_tokens", "prompt_ignore_length"):
        if getattr(params, name):
            arrays[name] = np.array([[getattr(params, name)]], np.int32)
    if params.logprobs is not None:
        arrays["return_log_probs"] = np.array([[True]], np.bool_)
    if params.lora_name is not None:  # the served model finds the adapter by its task id
        arrays["lora_task_id"] = np.array([[task_id(params.lora_name)]], np.uint64)
    if params.logprobs:
        arrays["num_top_log_probs"] = np.array([[params.logprobs]], np.int32)
    if params.prompt_logprobs is not None:
        arrays["num_prompt_log_probs"] = np.array([[params.prompt_logprobs]], np.int32)
    if params.guide is not None:  # the tensorrtllm backend's guided decoding inputs
        arrays["guided_decoding_guide_type"] = np.array([[params.guide.type.encode()]], object)
        if params.guide.text:
            arrays["guided_decoding_guide"] = np.array([[params.guide.text.encode()]], object)
    return arrays


def _infer_request(model: str, arrays: dict[str, np.ndarray]) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model, id=uuid.uuid4().hex)
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    for name, array in arrays.items():
        request.inputs.add(name=name, datatype=_DATATYPES[array.dtype.type], shape=array.shape)
        request.raw_input_contents.append(
            serialize_byte_tensor(array).item() if array.dtype == object else array.tobytes()
        )
    request.outputs.add(name="output_ids")
    request.outputs.add(name=REUSED_BLOCKS)
    if "return_log_probs" in arrays:
        request.outputs.add(name=LOG_PROBS)
    for name in TOP_LOG_PROBS if "num_top_log_probs" in arrays else ():
        request.outputs.add(name=name)
    for name in PROMPT_LOG_PROBS if "num_prompt_log_probs" in arrays else ():
        request.outputs.add(name=name)
    return request


class TritonLLM:
    def __init__(
        self,
        url: str,
        timeout_s: float,
        vocab_size: int,
        model: str = LLM_MODEL,
        block_size: int = 0,
    ):
        """vocab_size: the engine's, the length of a request's embedding_bias; block_size: its
        tokens a KV block (cached prompt tokens = reused blocks x block_size)."""
        self.url, self.timeout_s, self.model = url, timeout_s, model
        self.vocab_size, self.block_size = vocab_size, block_size
        self._channel: grpc.aio.Channel | None = None
        self._stub = None
        self._ending: set = set()  # finished calls not closed yet: a dropped call is cancelled

    async def open(self) -> None:
        """In the event loop that will use it (a grpc.aio channel belongs to one)."""
        self._channel = grpc.aio.insecure_channel(
            self.url,
            options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
        )
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()

    async def is_ready(self) -> bool:
        try:
            server = await self._stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=5)
            model = await self._stub.ModelReady(
                service_pb2.ModelReadyRequest(name=self.model), timeout=5
            )
        except grpc.aio.AioRpcError:
            return False
        return server.ready and model.ready

    async def stream(
        self, prompt_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[tuple[list[int], list[float] | None, bool, int, ResponseScores | None]]:
        """(new token ids, their log probabilities when params.logprobs asks, is_final, prompt
        tokens the prefix cache held (final response; else 0), the likeliest tokens' and the
        prompt's scores when asked) for each response, up to the final one. Closing this
        generator before the final response cancels the request in the engine."""
        request = _infer_request(self.model, request_arrays(prompt_ids, params, self.vocab_size))
        # written and read on this coroutine: a request iterator costs a task and an event a call
        call = self._stub.ModelStreamInfer(timeout=self.timeout_s)
        is_final = False
        scores_asked = bool(params.logprobs) or params.prompt_logprobs is not None
        try:
            await call.write(request)  # the request side stays open until the answer is complete
            while (response := await call.read()) is not grpc.aio.EOF:
                if response.error_message:
                    raise _model_error(response.error_message)
                result = response.infer_response
                is_final = result.parameters["triton_final_response"].bool_param
                ids = output_list(result, "output_ids")
                logprobs = output_list(result, LOG_PROBS) if params.logprobs is not None else None
                reused = output_list(result, REUSED_BLOCKS) if is_final else None
                yield (
                    [] if ids is None else ids,
                    logprobs,
                    is_final,
                    reused[0] * self.block_size if reused else 0,
                    response_scores(InferResult(result), params) if scores_asked else None,
                )
                if is_final:
                    return
            raise EngineError(f"{self.model} ended the stream without a final response")
        except grpc.aio.AioRpcError as exc:
            raise _rpc_error(exc, self.url, self.timeout_s) from None
        finally:
            if is_final:
                self._ending.add(call)
                call.add_done_callback(self._ending.discard)
                await call.done_writing()
            else:
                call.cancel()


def _model_error(message: str) -> EngineError:
    # the model's ValueError texts: input checks name an input ("tensorrt_llm: max_tokens=...")
    # and the engine's RequestLimits start "request:"; anything else is the server's failure
    is_request_error = (
        "tensorrt_llm: request:" in message
        or "is outside [" in message
        or "request: guided_decoding_guide" in message  # a grammar the engine cannot compile
    )
    if ENGINE_UNAVAILABLE in message:  # the engine is down (restarting, or failed too often): 503
        return EngineError(message, status=503)
    if SHUTTING_DOWN in message:  # the server's drain ran out: this one is worth a retry
        return EngineError(message, status=503)
    return EngineError(message, is_request_error, 400 if is_request_error else 502)


def _rpc_error(exc: grpc.aio.AioRpcError, url: str, timeout_s: float) -> EngineError:
    if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return EngineError(
            f"the request ran past serve.openai.request_timeout_s={timeout_s:.0f} s", status=504
        )
    if exc.code() == grpc.StatusCode.UNAVAILABLE:
        return EngineError(f"Triton at {url} is not reachable ({exc.details()})", status=503)
    return EngineError(f"Triton at {url} failed the request: {exc.details()}")
