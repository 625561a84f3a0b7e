"""gRPC: every call goes through ModelStreamInfer, which serves decoupled and plain models alike
(ModelInfer refuses decoupled ones). A request is done when `triton_final_response` is set."""

import queue
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from pipeline.client.errors import ClientError, ClientTimeout, wait_until_ready
from pipeline.client.request import GenerateRequest

COUNT_OUTPUT = "sequence_length"


@dataclass(frozen=True, slots=True)
class StreamResponse:
    text: str | None  # None: a response without the output (e.g. the empty final one)
    is_final: bool
    num_tokens: int = 0  # tokens behind text (sequence_length), when asked for with count_tokens


class GrpcClient:
    def __init__(
        self, url: str = "127.0.0.1:8001", model: str = "ensemble", timeout_s: float = 60.0
    ):
        self.url, self.model, self.timeout_s = url, model, timeout_s

    def _client(self) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(self.url)

    def is_ready(self) -> bool:
        try:
            with self._client() as client:
                return client.is_server_ready() and client.is_model_ready(self.model)
        except InferenceServerException:
            return False

    def wait_ready(self, timeout_s: float) -> None:
        wait_until_ready(self.is_ready, self.model, self.url, timeout_s)

    def generate(self, request: GenerateRequest) -> str:
        """The whole answer in one response (stream=false)."""
        return "".join(r.text for r in self.responses(request.arrays(stream=False)) if r.text)

    def stream(self, request: GenerateRequest) -> Iterator[str]:
        """Text deltas as the server sends them (stream=true)."""
        return (r.text for r in self.responses(request.arrays(stream=True)) if r.text is not None)

    def output_names(self) -> set[str]:
        with self._client() as client:
            return {o.name for o in client.get_model_metadata(self.model).outputs}

    def responses(
        self, arrays: dict[str, np.ndarray], output: str = "text_output", count_tokens: bool = False
    ) -> Iterator[StreamResponse]:
        """Send one request; yield each response (its `output` as text) up to the final one;
        count_tokens also asks for sequence_length (our ensemble and BLS have it)."""
        requested = [output, COUNT_OUTPUT] if count_tokens else [output]
        inputs = []
        for name, array in arrays.items():
            tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        results: queue.Queue = queue.Queue()
        client = self._client()
        is_done = False
        try:
            client.start_stream(callback=lambda result, error: results.put((result, error)))
            try:
                client.async_stream_infer(
                    self.model,
                    inputs,
                    request_id=uuid.uuid4().hex,
                    outputs=[grpcclient.InferRequestedOutput(name) for name in requested],
                    enable_empty_final_response=True,
                )
            except InferenceServerException:
                pass  # the stream broke; its callback got the reason, _drain raises it
            try:
                for response in self._drain(results, output):
                    is_done = response.is_final
                    yield response
            except ClientTimeout:
                raise  # still in flight: cancel it
            except ClientError:
                is_done = True  # the server ended it with an error
                raise
        finally:
            # cancel only an abandoned request: cancelling finished streams leaks server state
            client.stop_stream(cancel_requests=not is_done)
            client.close()

    def _drain(self, results: queue.Queue, output: str) -> Iterator[StreamResponse]:
        while True:
            try:
                result, error = results.get(timeout=self.timeout_s)
            except queue.Empty:
                raise ClientTimeout(
                    f"client: no response from {self.model} at {self.url} within "
                    f"{self.timeout_s:.0f} s; raise --timeout or check the "
                    f"server log"
                ) from None
            if error is not None:
                raise ClientError(
                    f"client: {self.model} at {self.url} failed the request: "
                    f"{error.message() if hasattr(error, 'message') else error}"
                )
            array = result.as_numpy(output)
            is_final = result.get_response().parameters["triton_final_response"].bool_param
            lengths = result.as_numpy(COUNT_OUTPUT)
            yield StreamResponse(
                None if array is None else "".join(_text(v) for v in array.reshape(-1)),
                is_final,
                0 if lengths is None else int(lengths.sum()),
            )
            if is_final:
                return


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
