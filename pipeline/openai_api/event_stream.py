"""A streamed response's sending, cancelled when its client leaves, on plain asyncio.

Starlette's StreamingResponse, under an ASGI 2.3 server (uvicorn declares 2.3), sends the body
from a task of an anyio task group while the request's own task listens for the disconnect:
a task group, its cancel scopes and a spawned task per request, and every chunk sent from
inside them. Here the request's own task sends the body, and one plain task waits for the
disconnect and cancels it, which closes the body's generator (and so its engine requests) as
Starlette's cancel scope did; the response then ends as a finished one does, its background
task run."""

import asyncio

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class EventStream(StreamingResponse):
    """A StreamingResponse of bytes (its headers are StreamingResponse's)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sending = asyncio.current_task()
        gone = False

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            sending.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not gone:  # the server's own cancellation (shutdown) goes on up
                raise
            sending.uncancel()
        finally:
            watcher.cancel()
        if self.background is not None:
            await self.background()
