"""What a request must pass before any work: its API key, its body size, a free stream slot."""

import hmac

from starlette.requests import Request

from pipeline.openai_api.errors import APIError


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
    once (its client retries) instead of queueing unseen in front of the engine. Used from the
    event loop's thread only."""

    def __init__(self, limit: int):
        self.limit, self.num_in_flight = limit, 0

    def take(self, num: int) -> "Ticket":
        if self.num_in_flight + num > self.limit:
            raise APIError(
                429,
                f"{self.num_in_flight} engine requests are in flight and this one adds {num}, "
                f"above this server's limit of {self.limit} "
                f"(serve.openai.max_concurrent_requests); retry later",
                code="rate_limit_exceeded",
            )
        self.num_in_flight += num
        return Ticket(self, num)


class Ticket:
    """One request's slots; given back once, by whichever way out the request takes first."""

    def __init__(self, admission: Admission, num: int):
        self.admission, self.num, self.is_given_back = admission, num, False

    def give_back(self) -> bool:
        """True the first time (the caller then counts the request as done)."""
        if self.is_given_back:
            return False
        self.is_given_back = True
        self.admission.num_in_flight -= self.num
        return True
