"""What a request must pass before any work: its API key, its body size, a free stream slot
(waiting for one in a bounded queue)."""

import asyncio
import contextlib
import heapq
import hmac
import threading
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
    seq: int  # arrival number (over all the workers): the order among equal priorities
    num: int = field(compare=False)
    granted: asyncio.Future = field(compare=False)


RUNNING, WAITING, HEAD_PRIORITY, HEAD_SEQ = range(4)  # the shared array's rows, a slot per worker


class Admission:
    """Engine requests in flight, at most `limit`. A request that finds no room waits in a
    queue (lower `priority` first, then in arrival order) of at most `max_queued` requests;
    past it the request gets 429 with Retry-After, and one that alone is above `limit` gets 400
    (no wait can pass it). The head of the queue runs first: a large request is not overtaken
    by smaller ones behind it, so it cannot starve.

    counts: the state that the frontend processes on the port share (a multiprocessing Array:
    shared_counts), so both bounds and the order hold for all of them together: per worker its
    requests in flight, its requests waiting and its queue's head (priority, arrival number),
    then the next arrival number; `index` is this worker's. None: this process alone. Read and
    changed under the array's lock, held for a few additions only. Each worker queues its own
    requests and admits its head only when no other worker's head comes first; one with a queue
    looks every SHARED_POLL_S for slots that another worker gave back (its own are handed on at
    once). closed: set once the server drains (a multiprocessing Event shared by the processes,
    or None: this process's own): from then on every request, queued ones included, gets 503."""

    def __init__(self, limit: int, max_queued: int, counts=None, index: int = 0, closed=None):
        if limit < 1:  # serve.openai.max_concurrent_requests=0 is resolved before (server.py)
            raise ValueError(f"admission: a limit of {limit} engine requests admits none")
        self.limit, self.max_queued, self.index = limit, max_queued, index
        self.closed = threading.Event() if closed is None else closed
        self.is_shared = counts is not None
        self.counts = counts if self.is_shared else [0, 0, 0, -1, 0]
        self.num_workers = (len(self.counts) - 1) // 4
        self._lock = counts.get_lock() if self.is_shared else contextlib.nullcontext()
        self._queue: list[_Waiter] = []  # a heap
        self._poller: asyncio.Task | None = None

    @staticmethod
    def shared_counts(context, num_workers: int):
        """The array that the admissions of num_workers processes share (context: theirs)."""
        counts = context.Array("q", 4 * num_workers + 1)
        counts[HEAD_SEQ * num_workers : (HEAD_SEQ + 1) * num_workers] = [-1] * num_workers
        return counts

    @staticmethod
    def forget_worker(counts, index: int) -> None:
        """A dead worker's requests ended with it: its slots and queue places are free."""
        num_workers = (len(counts) - 1) // 4
        with counts.get_lock():
            counts[RUNNING * num_workers + index] = counts[WAITING * num_workers + index] = 0
            counts[HEAD_SEQ * num_workers + index] = -1

    @property
    def num_in_flight(self) -> int:
        with self._lock:
            return self._sum(RUNNING)

    @property
    def num_waiting(self) -> int:
        with self._lock:
            return self._sum(WAITING)

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
        """num slots if there is room and nobody waits for it; 400 if there never is, 503 once
        the server drains."""
        if self.closed.is_set():
            raise _shutting_down()
        self.check_size(num)
        with self._lock:
            if self._sum(WAITING) or self._sum(RUNNING) + num > self.limit:
                return None
            self.counts[self._at(RUNNING)] += num
        return Ticket(self, num, 0.0)

    async def take(self, num: int, priority: int = 0) -> "Ticket":
        """num slots, at once or after waiting in the queue. Cancelling it (the client left)
        leaves the queue: the slots are never taken, or given back if they just were."""
        start = time.perf_counter()
        ticket = self.take_now(num)
        if ticket is not None:
            return ticket
        granted = asyncio.get_running_loop().create_future()
        with self._lock:
            num_waiting = self._sum(WAITING)
            if num_waiting >= self.max_queued:
                raise APIError(
                    429,
                    f"{self.limit} engine requests are in flight and {num_waiting} requests "
                    f"wait, this server's limit (serve.openai.max_concurrent_requests, "
                    f"serve.openai.max_queued_requests); retry after {RETRY_AFTER_S} s",
                    code="rate_limit_exceeded",
                    retry_after_s=RETRY_AFTER_S,
                )
            self.counts[self._at(WAITING)] += 1
            arrival = self.counts[-1]
            self.counts[-1] = arrival + 1
            heapq.heappush(self._queue, _Waiter(priority, arrival, num, granted))
        self._dispatch()
        try:
            await granted
        except asyncio.CancelledError:
            if granted.cancelled():  # still queued: it leaves (dropped once at the head)
                with self._lock:
                    self.counts[self._at(WAITING)] -= 1
            else:  # granted as it was cancelled
                self.give_back(num)
            self._dispatch()  # it may have held up those behind it
            raise
        return Ticket(self, num, time.perf_counter() - start)

    def give_back(self, num: int) -> None:
        with self._lock:
            self.counts[self._at(RUNNING)] -= num
        self._dispatch()

    def _at(self, row: int, index: int | None = None) -> int:
        return row * self.num_workers + (self.index if index is None else index)

    def _sum(self, row: int) -> int:
        return sum(self.counts[row * self.num_workers : (row + 1) * self.num_workers])

    def _head(self) -> "_Waiter | None":
        """The queue's head, published for the other workers (lock held)."""
        while self._queue and self._queue[0].granted.done():  # it left the queue
            heapq.heappop(self._queue)
        head = self._queue[0] if self._queue else None
        self.counts[self._at(HEAD_PRIORITY)] = 0 if head is None else head.priority
        self.counts[self._at(HEAD_SEQ)] = -1 if head is None else head.seq
        return head

    def _comes_first(self, head: _Waiter) -> bool:
        """No other worker's head comes before this one (lock held)."""
        for index in range(self.num_workers):
            seq = self.counts[self._at(HEAD_SEQ, index)]
            if index != self.index and seq >= 0:
                if (self.counts[self._at(HEAD_PRIORITY, index)], seq) < (head.priority, head.seq):
                    return False
        return True

    def _dispatch(self) -> None:
        """Slots to the queue's head while they last and no other worker's head comes first;
        once the server drains, every queued request is refused instead."""
        if self.closed.is_set():
            self._refuse_queued()
            return
        while True:
            with self._lock:
                head = self._head()
                if head is None or not self._comes_first(head):
                    break
                if self._sum(RUNNING) + head.num > self.limit:
                    break
                self.counts[self._at(RUNNING)] += head.num
                self.counts[self._at(WAITING)] -= 1
                heapq.heappop(self._queue)
                self._head()
            head.granted.set_result(None)
        # shared: slots another worker gives back; alone too: the drain's closed event
        if self._queue and (self._poller is None or self._poller.done()):
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    def _refuse_queued(self) -> None:
        with self._lock:
            waiters, self._queue = self._queue, []
            for waiter in waiters:
                if not waiter.granted.done():
                    self.counts[self._at(WAITING)] -= 1
                    waiter.granted.set_exception(_shutting_down())
            self._head()

    async def _poll(self) -> None:
        while self._queue:
            await asyncio.sleep(SHARED_POLL_S)
            self._dispatch()


def _shutting_down() -> APIError:
    return APIError(
        503,
        "this server is shutting down and takes no new requests; send the request to another "
        "replica, or retry once this one is back",
        code="server_shutting_down",
    )


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
