"""The Starlette app: routes, the OpenAI error body for every failure, the gRPC channel's life.

Bodies are parsed by the routes themselves (protocol.parse), not by a framework, so a malformed
body or a wrong type is OpenAI's 400, never a 422, and a body's size is checked as it is read.
"""

import contextlib
import gc
import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pipeline.openai_api.errors import RETRY_AFTER_S, APIError
from pipeline.openai_api.metrics import FrontendMetrics
from pipeline.openai_api.openapi import ENDPOINTS
from pipeline.openai_api.routes import Frontend
from pipeline.openai_api.triton_llm import EngineError

log = logging.getLogger(__name__)


def build_app(frontend: Frontend) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        await frontend.llm.open()
        # what startup made (the tokenizer, the modules) lives as long as the process: frozen,
        # the collector's full passes, which a stream's garbage sets off, no longer walk it
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            await frontend.llm.close()

    routes = []
    for endpoint in ENDPOINTS:
        handler = getattr(frontend, endpoint.handler)
        if endpoint.metric is not None:
            handler = counted(frontend.metrics, endpoint.metric, handler)
        routes.append(Route(endpoint.path, handler, methods=[endpoint.method]))
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
    )


def counted(metrics: FrontendMetrics, endpoint: str, handler):
    """handler, its every answer counted in metrics.requests, a failure's 500 too."""

    async def answer(request: Request) -> Response:
        try:
            response = await handler(request)
        except APIError as exc:
            response = exc.response()
        except EngineError as exc:
            retry_after_s = RETRY_AFTER_S if exc.status == 503 else None  # not ready yet
            response = APIError(exc.status, str(exc), retry_after_s=retry_after_s).response()
        except Exception as exc:
            response = await _server_error(request, exc)
        metrics.requests.labels(endpoint, str(response.status_code)).inc()
        return response

    return answer


async def _http_error(request: Request, exc: HTTPException) -> Response:
    """Starlette's own refusals (unknown path 404, wrong method 405) in OpenAI's body."""
    message = f"{request.method} {request.url.path}: {exc.detail}"
    code = "not_found" if exc.status_code == 404 else None
    return APIError(exc.status_code, message, code=code).response()


async def _server_error(request: Request, exc: Exception) -> Response:
    log.exception("openai: %s %s failed", request.method, request.url.path, exc_info=exc)
    return APIError(500, f"the server failed this request ({type(exc).__name__}: {exc})").response()
