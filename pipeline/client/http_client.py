"""HTTP: the generate extension (/generate, /generate_stream as server-sent events), KServe v2
/infer for non-decoupled models, health and metrics. Errors are checked in every body and every
SSE chunk: Triton reports failures after the first chunk under HTTP 200."""

import json
from collections.abc import Iterator

import numpy as np
import requests
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from pipeline.client.errors import ClientError, ClientTimeout, wait_until_ready
from pipeline.client.request import GenerateRequest


class HttpClient:
    def __init__(
        self, url: str = "http://127.0.0.1:8000", model: str = "ensemble", timeout_s: float = 60.0
    ):
        self.url = url if url.startswith("http") else f"http://{url}"
        self.model, self.timeout_s = model, timeout_s

    def _post(self, path: str, body: dict | None = None, stream: bool = False) -> requests.Response:
        """POST (GET without a body); HTTP errors and unreachable servers become ClientError."""
        method = "POST" if body is not None else "GET"
        try:
            response = requests.request(
                method, f"{self.url}{path}", json=body, stream=stream, timeout=(5, self.timeout_s)
            )
        except requests.Timeout as exc:
            raise ClientTimeout(
                f"client: {method} {self.url}{path} got no answer within "
                f"{self.timeout_s:.0f} s; raise --timeout"
            ) from exc
        except requests.ConnectionError as exc:
            raise ClientError(
                f"client: cannot reach {self.url} ({exc.__class__.__name__}); is "
                f"the server up (`make serve`)?"
            ) from exc
        if not response.ok:
            raise ClientError(
                f"client: {method} {self.url}{path} -> HTTP {response.status_code}: "
                f"{_error_text(response)}"
            )
        return response

    def is_ready(self) -> bool:
        try:
            return all(
                requests.get(f"{self.url}{path}", timeout=5).ok
                for path in ("/v2/health/ready", f"/v2/models/{self.model}/ready")
            )
        except requests.RequestException:
            return False

    def wait_ready(self, timeout_s: float) -> None:
        wait_until_ready(self.is_ready, self.model, self.url, timeout_s)

    def generate(self, request: GenerateRequest) -> str:
        body = self._post(f"/v2/models/{self.model}/generate", request.values(stream=False)).json()
        return checked(body, self.model)["text_output"]

    def stream(self, request: GenerateRequest) -> Iterator[str]:
        response = self._post(
            f"/v2/models/{self.model}/generate_stream", request.values(stream=True), stream=True
        )
        with response:
            try:
                for line in response.iter_lines(decode_unicode=True):
                    event = parse_sse_line(line)
                    if event is not None:
                        yield checked(event, self.model)["text_output"]
            except requests.exceptions.ConnectionError as exc:  # read timeouts surface here
                raise ClientTimeout(
                    f"client: the stream from {self.model} stalled or broke "
                    f"({exc}); raise --timeout or check the server log"
                ) from exc

    def infer(self, model: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """KServe v2 /infer (non-decoupled models only, e.g. preprocessing)."""
        inputs = [
            {
                "name": name,
                "shape": list(a.shape),
                "datatype": np_to_triton_dtype(a.dtype),
                "data": [_json_value(v) for v in a.reshape(-1)],
            }
            for name, a in arrays.items()
        ]
        body = checked(self._post(f"/v2/models/{model}/infer", {"inputs": inputs}).json(), model)
        return {
            out["name"]: np.array(out["data"], dtype=triton_to_np_dtype(out["datatype"])).reshape(
                out["shape"]
            )
            for out in body["outputs"]
        }

    def model_metadata(self, model: str) -> dict:
        return self._post(f"/v2/models/{model}").json()


def parse_sse_line(line: str | None) -> dict | None:
    """One `data: {...}` server-sent event line -> its JSON; None for blank/other lines."""
    if not line or not line.startswith("data:"):
        return None
    try:
        return json.loads(line[5:])
    except json.JSONDecodeError as exc:
        raise ClientError(f"client: malformed event from the server: {line[:200]!r}") from exc


def _json_value(value):
    return value.decode() if isinstance(value, bytes) else value.item()


def checked(body: dict, model: str) -> dict:
    if "error" in body:
        raise ClientError(f"client: {model} failed the request: {body['error']}")
    return body


def _error_text(response: requests.Response) -> str:
    """The "error" of a JSON body, or of an SSE `data:` body (generate_stream)."""
    text = response.text.strip().removeprefix("data:")
    try:
        return json.loads(text).get("error", text)
    except (ValueError, AttributeError):
        return text
