"""OpenAI's error body ({"error": {message, type, param, code}}) and the status that goes with it.

Every refusal of the frontend is an APIError; the app turns it, and anything unexpected (500),
into this body, so an OpenAI client raises its matching exception (BadRequestError, ...).
"""

from starlette.responses import JSONResponse

# what a 429 (the queue is full) or a 503 (the engine is not ready) tells the client to wait
RETRY_AFTER_S = 1

# OpenAI's `type` for each status it uses (401 is an invalid_request_error there too)
TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    504: "server_error",
}


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        retry_after_s: int | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.retry_after_s = retry_after_s  # sent as Retry-After when set

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": TYPES.get(self.status, "invalid_request_error"),
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        headers = None if self.retry_after_s is None else {"Retry-After": str(self.retry_after_s)}
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param, code)


def unsupported(param: str, why: str) -> APIError:
    return APIError(400, f"{param} is not supported by this server: {why}", param, "unsupported")
