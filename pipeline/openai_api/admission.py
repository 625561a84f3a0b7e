"""What a request must pass before any work: its API key, its body size, a free stream slot
(waiting for one in a bounded queue)."""

import asyncio
import contextlib
import heapq
import hmac
import itertools
import time
from dataclasses import dataclass, field

from starlette.requests import Request

from pipeline.openai_api.errors import RETRY_AFTER_S, APIError, bad_request

# how often a worker with queued requests looks for slots that another worker gave back
SHARED_POLL_S = 0.005


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


@dataclass(order=True, slots=True)
class _Waiter:
    priority: int
    seq: int  # arrival order among equal priorities
    num: int = field(compare=False)
    granted: asyncio.Future = field(compare=False)


class Admission:
    """Engine requests in flight, at most `limit`. A request that finds no room waits in a
    queue (lower `priority` first, then in arrival order) of at most `max_queued` requests;
    past it the request gets 429 with Retry-After, and one that alone is above `limit` gets 400
    (no wait can pass it). The head of the queue runs first: a large request is not overtaken
    by smaller ones behind it, so it cannot starve.

    counts: `2 * num_workers` ints shared by the frontend processes on the port (a
    multiprocessing Array: shared_counts), each worker's requests in flight then its requests
    waiting, `index` this one's, so both bounds hold for all the processes together; None: this
    process alone. Summed under the array's lock, held for a few additions only. Each worker
    queues its own requests; one with a queue looks every SHARED_POLL_S for slots that another
    worker gave back (its own are handed on at once)."""

    def __init__(self, limit: int, max_queued: int, counts=None, index: int = 0):
        self.limit, self.max_queued, self.index = limit, max_queued, index
        self.counts = [0, 0] if counts is None else counts
        self.num_workers = len(self.counts) // 2
        self.is_shared = counts is not None
        self._lock = counts.get_lock() if self.is_shared else contextlib.nullcontext()
        self._queue: list[_Waiter] = []  # a heap
        self._arrivals = itertools.count()
        self._poller: asyncio.Task | None = None

    @staticmethod
    def shared_counts(context, num_workers: int):
        """The array that the admissions of num_workers processes share (context: theirs)."""
        return context.Array("i", 2 * num_workers)

    @staticmethod
    def forget_worker(counts, index: int) -> None:
        """A dead worker's requests ended with it: its slots and queue places are free."""
        with counts.get_lock():
            counts[index] = counts[len(counts) // 2 + index] = 0

    @property
    def num_in_flight(self) -> int:
        with self._lock:
            return sum(self.counts[: self.num_workers])

    @property
    def num_waiting(self) -> int:
        with self._lock:
            return sum(self.counts[self.num_workers :])

    def check_size(self, num: int) -> None:
        if num > self.limit:  # not even an idle server takes it: waiting cannot help
            raise bad_request(
                f"this request makes {num} engine requests (one per prompt and choice), above "
                f"this server's limit of {self.limit} in flight "
                f"(serve.openai.max_concurrent_requests), so it can never be admitted; send at "
                f"most {self.limit} prompts times n per request",
                code="request_too_large",
            )

    def take_now(self, num: int) -> "Ticket | None":
        """num slots if there is room and nobody waits for it; 400 if there never is."""
        self.check_size(num)
        if not self._queue and self._take_now(num):
            return Ticket(self, num, 0.0)
        return None

    async def take(self, num: int, priority: int = 0) -> "Ticket":
        """num slots, at once or after waiting in the queue. Cancelling it (the client left)
        leaves the queue: the slots are never taken, or given back if they just were."""
        start = time.perf_counter()
        ticket = self.take_now(num)
        if ticket is not None:
            return ticket
        with self._lock:
            num_waiting = sum(self.counts[self.num_workers :])
            if num_waiting >= self.max_queued:
                raise APIError(
                    429,
                    f"{self.limit} engine requests are in flight and {num_waiting} requests "
                    f"wait, this server's limit (serve.openai.max_concurrent_requests, "
                    f"serve.openai.max_queued_requests); retry after {RETRY_AFTER_S} s",
                    code="rate_limit_exceeded",
                    retry_after_s=RETRY_AFTER_S,
                )
            self.counts[self.num_workers + self.index] += 1
        granted = asyncio.get_running_loop().create_future()
        waiter = _Waiter(priority, next(self._arrivals), num, granted)
        heapq.heappush(self._queue, waiter)
        self._dispatch()
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.cancelled():  # still queued: it leaves (skipped when at the head)
                with self._lock:
                    self.counts[self.num_workers + self.index] -= 1
            else:  # granted as it was cancelled
                self.give_back(num)
            self._dispatch()  # it may have held up those behind it
            raise
        return Ticket(self, num, time.perf_counter() - start)

    def give_back(self, num: int) -> None:
        with self._lock:
            self.counts[self.index] -= num
        self._dispatch()

    def _take_now(self, num: int) -> bool:
        with self._lock:
            if sum(self.counts[: self.num_workers]) + num > self.limit:
                return False
            self.counts[self.index] += num
        return True

    def _dispatch(self) -> None:
        """Slots to the queue's head while they last."""
        while self._queue:
            head = self._queue[0]
            if head.granted.done():  # it left the queue
                heapq.heappop(self._queue)
                continue
            with self._lock:
                if sum(self.counts[: self.num_workers]) + head.num > self.limit:
                    break
                self.counts[self.index] += head.num
                self.counts[self.num_workers + self.index] -= 1
            heapq.heappop(self._queue)
            head.granted.set_result(None)
        if self._queue and self.is_shared and (self._poller is None or self._poller.done()):
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while self._queue:
            await asyncio.sleep(SHARED_POLL_S)
            self._dispatch()


class Ticket:
    """One request's slots; given back once, by whichever way out the request takes first.
    waited_s: its time in the queue."""

    def __init__(self, admission: Admission, num: int, waited_s: float):
        self.admission, self.num, self.waited_s = admission, num, waited_s
        self.is_given_back = False

    def give_back(self) -> bool:
        """True the first time (the caller then counts the request as done)."""
        if self.is_given_back:
            return False
        self.is_given_back = True
        self.admission.give_back(self.num)
        return True
