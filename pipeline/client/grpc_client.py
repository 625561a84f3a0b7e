"""gRPC: every call goes through ModelStreamInfer, which serves decoupled and plain models alike
(ModelInfer refuses decoupled ones). A request is done when `triton_final_response` is set.

keep_streams: each thread keeps one open stream and sends its requests down it one after another,
where by default every request opens and closes its own (a channel, a stream and its reader
thread each time: milliseconds of every request's TTFT across a load generator's 64 threads). A
request abandoned midway closes its stream, cancelling it; the thread's next request opens a new
one. Not the default: tritonserver does not stop gracefully while a client holds a stream open,
so a kept stream must be closed (`close()`, or its thread ending) before the server stops.
"""

import queue
import threading
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


class _Stream:
    """A client with its bidirectional stream open; responses land in `results`."""

    def __init__(self, client: grpcclient.InferenceServerClient):
        self.client = client
        self.results = results = queue.Queue()
        # the callback must not hold self: the stream's reader thread keeps it alive
        self.client.start_stream(callback=lambda result, error: results.put((result, error)))
        self.is_busy = True
        self.is_closed = False

    def close(self, cancel_requests: bool) -> None:
        # cancel only an abandoned request: cancelling finished streams leaks server state
        self.is_closed = True
        self.client.stop_stream(cancel_requests=cancel_requests)
        self.client.close()


class GrpcClient:
    def __init__(
        self,
        url: str = "127.0.0.1:8001",
        model: str = "ensemble",
        timeout_s: float = 60.0,
        keep_streams: bool = False,
    ):
        self.url, self.model, self.timeout_s = url, model, timeout_s
        self.keep_streams = keep_streams
        self._local = threading.local()  # .stream: this thread's kept _Stream
        self._kept: list[_Stream] = []  # every thread's, for close()
        self._kept_lock = threading.Lock()

    def _take_stream(self) -> _Stream:
        """This thread's kept stream, or a new one (kept when keep_streams and none is)."""
        kept = getattr(self._local, "stream", None)
        if kept is not None and kept.is_closed:
            kept = self._local.stream = None
        if kept is not None and not kept.is_busy:
            kept.is_busy = True
            return kept
        stream = _Stream(self._client())
        if self.keep_streams and kept is None:
            self._local.stream = stream
            with self._kept_lock:
                self._kept.append(stream)
        return stream

    def _after_request(self, stream: _Stream, is_done: bool, is_clean: bool) -> None:
        """After a request: a clean finish leaves the thread's stream open for its next one; an
        error may have broken it, and an abandoned request (not done) is cancelled by closing."""
        kept = getattr(self._local, "stream", None) is stream
        if is_clean and kept:
            stream.is_busy = False
            return
        if kept:
            self._local.stream = None
            with self._kept_lock:
                self._kept.remove(stream)
        stream.close(cancel_requests=not is_done)

    def close(self) -> None:
        """Close every thread's kept stream that is idle (before the server stops)."""
        with self._kept_lock:
            idle = [s for s in self._kept if not s.is_busy]
            self._kept = [s for s in self._kept if s.is_busy]
        for stream in idle:
            stream.close(cancel_requests=False)

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
        self,
        arrays: dict[str, np.ndarray],
        output: str = "text_output",
        count_tokens: bool = False,
        request_id: str | None = None,
    ) -> Iterator[StreamResponse]:
        """Send one request; yield each response (its `output` as text) up to the final one;
        count_tokens also asks for sequence_length (our ensemble and BLS have it). request_id:
        Triton's id for it (what its trace and logs name it), else a new uuid."""
        requested = [output, COUNT_OUTPUT] if count_tokens else [output]
        inputs = []
        for name, array in arrays.items():
            tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        stream = self._take_stream()
        is_done = is_clean = False
        try:
            try:
                stream.client.async_stream_infer(
                    self.model,
                    inputs,
                    request_id=request_id or uuid.uuid4().hex,
                    outputs=[grpcclient.InferRequestedOutput(name) for name in requested],
                    enable_empty_final_response=True,
                )
            except InferenceServerException:
                pass  # the stream broke; its callback got the reason, _drain raises it
            try:
                for response in self._drain(stream.results, output):
                    is_done = is_clean = response.is_final
                    yield response
            except ClientTimeout:
                raise  # still in flight: cancel it
            except ClientError:
                is_done = True  # the server ended it with an error
                raise
        finally:
            self._after_request(stream, is_done, is_clean)

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
