"""What a request must pass before any work: its API key, its body size, a free stream slot."""

import contextlib
import hmac
import threading

from starlette.requests import Request

from pipeline.openai_api.errors import APIError, bad_request


def check_api_key(request: Request, api_key: str) -> None:
    """401 unless `Authorization: Bearer <api_key>` (no key configured: all pass)."""
    if not api_key:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise APIError(
            401,
            "You didn't provide an API key: send it as 'Authorization: Bearer <key>'",
            code="invalid_api_key",
        )
    if not hmac.compare_digest(token.strip().encode(), api_key.encode()):
        raise APIError(401, "Incorrect API key provided", code="invalid_api_key")


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The body, refused (413) past max_bytes whether or not Content-Length announced it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(int(declared), max_bytes)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise _too_large(len(body), max_bytes)
    return bytes(body)


def _too_large(num_bytes: int, max_bytes: int) -> APIError:
    return APIError(
        413,
        f"the request body has {num_bytes} bytes or more, above this server's limit of "
        f"{max_bytes} (serve.openai.max_request_bytes)",
        code="request_too_large",
    )


class Admission:
    """Engine requests in flight, at most `limit`; a request that would pass it gets 429 at
    once (its client retries) instead of queueing unseen in front of the engine, and one that
    alone is above it gets 400 (no retry can pass it).

    counts: each frontend process's requests in flight (a multiprocessing Array, one slot per
    worker, `index` this one's), so the limit holds for all the processes on the port together;
    None: this process alone. Summed under the array's lock, held for a few additions only.
    closed: set once the server drains (503 from then on); a multiprocessing Event shared by
    the processes, or (None) this process's own."""

    def __init__(self, limit: int, counts=None, index: int = 0, closed=None):
        self.limit, self.index = limit, index
        self.counts = [0] if counts is None else counts
        self._lock = contextlib.nullcontext() if counts is None else counts.get_lock()
        self.closed = threading.Event() if closed is None else closed

    @property
    def num_in_flight(self) -> int:
        with self._lock:
            return sum(self.counts)

    def take(self, num: int) -> "Ticket":
        if self.closed.is_set():
            raise APIError(
                503,
                "this server is shutting down and takes no new requests; send the request to "
                "another replica, or retry once this one is back",
                code="server_shutting_down",
            )
        if num > self.limit:  # not even an idle server takes it: retrying cannot help
            raise bad_request(
                f"this request makes {num} engine requests (one per prompt and choice), above "
                f"this server's limit of {self.limit} in flight "
                f"(serve.openai.max_concurrent_requests), so it can never be admitted; send at "
                f"most {self.limit} prompts times n per request",
                code="request_too_large",
            )
        with self._lock:
            num_in_flight = sum(self.counts)
            if num_in_flight + num > self.limit:
                raise APIError(
                    429,
                    f"{num_in_flight} engine requests are in flight and this one adds {num}, "
                    f"above this server's limit of {self.limit} "
                    f"(serve.openai.max_concurrent_requests); retry later",
                    code="rate_limit_exceeded",
                )
            self.counts[self.index] += num
        return Ticket(self, num)

    def give_back(self, num: int) -> None:
        with self._lock:
            self.counts[self.index] -= num


class Ticket:
    """One request's slots; given back once, by whichever way out the request takes first."""

    def __init__(self, admission: Admission, num: int):
        self.admission, self.num, self.is_given_back = admission, num, False

    def give_back(self) -> bool:
        """True the first time (the caller then counts the request as done)."""
        if self.is_given_back:
            return False
        self.is_given_back = True
        self.admission.give_back(self.num)
        return True
