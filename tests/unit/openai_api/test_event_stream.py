"""EventStream sends what Starlette's StreamingResponse sends, ends quietly when its client
leaves (the body's generator closed, the background task run), and passes the server's own
cancellation on."""

import asyncio

import pytest
from starlette.background import BackgroundTask
from starlette.responses import StreamingResponse

from pipeline.openai_api.event_stream import EventStream

HEADERS = {"Cache-Control": "no-cache"}


class Client:
    """An ASGI server's receive and send for one request: it hangs up once `leave_after`
    body chunks arrived (None: never)."""

    def __init__(self, leave_after: int | None = None):
        self.sent: list[dict] = []
        self.leave_after = leave_after
        self._left = asyncio.Event()

    async def receive(self) -> dict:
        await self._left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.sent.append(message)
        num_bodies = sum(m["type"] == "http.response.body" for m in self.sent)
        if self.leave_after is not None and num_bodies >= self.leave_after:
            self._left.set()


def response(cls, body, ran: list):
    return cls(
        body,
        media_type="text/event-stream",
        headers=HEADERS,
        background=BackgroundTask(ran.append, "background"),
    )


async def events(n: int, closed: list, then_wait: bool = False):
    try:
        for i in range(n):
            yield b"data: %d\n\n" % i
        if then_wait:
            await asyncio.Event().wait()  # an engine that has nothing more yet
    finally:
        closed.append(True)


def test_a_whole_stream_is_starlettes_messages_then_the_background():
    async def run(cls):
        client, ran, closed = Client(), [], []
        await response(cls, events(3, closed), ran)({"type": "http"}, client.receive, client.send)
        return client.sent, ran, closed

    ours, ran, closed = asyncio.run(run(EventStream))
    theirs, their_ran, _ = asyncio.run(run(StreamingResponse))
    assert ours == theirs and len(ours) == 5  # start, 3 chunks, the end
    assert ran == their_ran == ["background"] and closed == [True]


def test_a_client_that_leaves_closes_the_body_and_the_background_still_runs():
    async def run():
        client, ran, closed = Client(leave_after=2), [], []
        body = events(2, closed, then_wait=True)
        await response(EventStream, body, ran)({"type": "http"}, client.receive, client.send)
        return client.sent, ran, closed

    sent, ran, closed = asyncio.run(run())
    assert [m["type"] for m in sent] == ["http.response.start"] + ["http.response.body"] * 2
    assert all(m["more_body"] for m in sent[1:])  # never ended as if finished
    assert closed == [True] and ran == ["background"]


def test_the_servers_own_cancellation_goes_on_up():
    async def run():
        client, ran, closed = Client(), [], []
        body = events(1, closed, then_wait=True)
        task = asyncio.ensure_future(
            response(EventStream, body, ran)({"type": "http"}, client.receive, client.send)
        )
        while len(client.sent) < 2:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return ran, closed

    ran, closed = asyncio.run(run())
    assert closed == [True] and ran == []
