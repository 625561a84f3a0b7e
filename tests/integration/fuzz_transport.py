"""One fuzz case to the real server and what came back, with a deadline on every request.

gRPC: every model through ModelStreamInfer (the entry points are decoupled), each request with
its own uuid and its own stream, ended by `triton_final_response`. HTTP: the generate extension,
whose failures may come under status 200 (in the body or an SSE event). A request with no final
answer before the deadline is hung; a stream that breaks without one is broken.
"""

import json
import queue
import threading
import time
import uuid
from dataclasses import dataclass

import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from tests.integration.fuzz_cases import Case
from tests.integration.fuzz_values import GRPC, HTTP_STREAM

OK, EMPTY, ERROR, HUNG, BROKEN = "ok", "empty", "error", "hung", "broken"
# gRPC statuses of a transport that went away, rather than of a refused request
GONE = ("StatusCode.UNAVAILABLE", "StatusCode.CANCELLED", "StatusCode.INTERNAL")
OUTPUT_KEYS = ("text_output", "output_ids", "sequence_length")


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str  # OK: outputs came; EMPTY: a final answer without outputs; ERROR; HUNG; BROKEN
    message: str = ""  # the error, or the text_output pieces joined
    seconds: float = 0.0


def send(case: Case, grpc_url: str, http_url: str, timeout_s: float) -> Outcome:
    start = time.monotonic()
    if case.protocol == GRPC:
        outcome = send_grpc(grpc_url, case.model, case.arrays(), case.outputs, timeout_s)
    else:
        stream = case.protocol == HTTP_STREAM
        outcome = _send_http(http_url, case.model, case.json_body(), stream, timeout_s)
    return Outcome(outcome.status, outcome.message, time.monotonic() - start)


def send_grpc(
    url: str,
    model: str,
    arrays: dict,
    outputs: tuple[str, ...],
    timeout_s: float,
    first: threading.Event | None = None,
) -> Outcome:
    """first: set once the first response came (the request is in flight in the engine)."""
    client = grpcclient.InferenceServerClient(url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    is_done = False
    try:
        inputs = []
        for name, array in arrays.items():
            tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        try:
            client.async_stream_infer(
                model,
                inputs,
                request_id=uuid.uuid4().hex,
                outputs=[grpcclient.InferRequestedOutput(o) for o in outputs],
                enable_empty_final_response=True,
            )
        except InferenceServerException as exc:
            is_done = True
            return Outcome(ERROR, exc.message() or str(exc))
        outcome = _drain(results, outputs, time.monotonic() + timeout_s, first)
        is_done = outcome.status != HUNG
        return outcome
    finally:
        if first is not None:
            first.set()  # whatever happened, nobody waits for it any longer
        # cancel only an unanswered request: cancelling finished ones leaks server state
        client.stop_stream(cancel_requests=not is_done)
        client.close()


def _drain(results: queue.Queue, outputs, deadline: float, first) -> Outcome:
    has_output, pieces = False, []
    while True:
        try:
            result, error = results.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return Outcome(HUNG, f"no final response within the deadline ({len(pieces)} came)")
        if first is not None:
            first.set()
        if error is not None:
            status = str(error.status()) if hasattr(error, "status") else ""
            message = error.message() if hasattr(error, "message") else str(error)
            return Outcome(BROKEN if status in GONE else ERROR, message or status)
        for name in outputs:
            array = result.as_numpy(name)
            has_output |= array is not None
            if name == "text_output" and array is not None:
                pieces += [v.decode(errors="replace") for v in array.reshape(-1)]
        if result.get_response().parameters["triton_final_response"].bool_param:
            return Outcome(OK if has_output else EMPTY, "".join(pieces))


def _send_http(url: str, model: str, body: bytes, stream: bool, timeout_s: float) -> Outcome:
    path = f"{url}/v2/models/{model}/generate{'_stream' if stream else ''}"
    deadline = time.monotonic() + timeout_s
    try:
        with requests.post(path, data=body, timeout=(5, timeout_s), stream=stream) as response:
            if not stream or response.status_code != 200:
                return _http_body(response.status_code, response.text.removeprefix("data:"))
            events, has_output = 0, False
            for line in response.iter_lines(decode_unicode=True):
                if time.monotonic() > deadline:
                    return Outcome(HUNG, f"stream still open at the deadline ({events} events)")
                if not line or not line.startswith("data:"):
                    continue
                events += 1
                outcome = _http_body(response.status_code, line[5:])
                if outcome.status == ERROR:
                    return outcome
                has_output |= outcome.status == OK
            return Outcome(OK if has_output else EMPTY, f"{events} events")
    except requests.Timeout:
        return Outcome(HUNG, f"no answer within {timeout_s:.0f} s")
    except requests.ConnectionError as exc:
        return Outcome(BROKEN, f"connection failed: {exc}")


def _http_body(status_code: int, text: str) -> Outcome:
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" in body:
        return Outcome(ERROR, str(body["error"]))
    if status_code != 200 or not isinstance(body, dict):
        return Outcome(ERROR, f"HTTP {status_code} {text[:300]}")
    return Outcome(OK if any(k in body for k in OUTPUT_KEYS) else EMPTY, text[:300])
