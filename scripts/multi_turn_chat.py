"""Multi-turn chat as users send it: each user's next message arrives a think time after that
user's previous answer finished, independently of the other users, and the users' first messages
are spread over a start window, so at any moment only part of them are active.

A turn's prompt is the conversation so far (every earlier message and reply) + a new message:
turns after the first start with what the user's previous turns computed, which prefix caching
(and its host tier, once the GPU pool evicted it) may still hold. Messages, think times and start
offsets are drawn from one seed; when each turn arrives follows from when the previous one
finished. TTFT is measured per turn, from the turn's arrival to its first token on the host.
"""

import heapq
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pipeline.bench.metrics import percentiles
from pipeline.engine import LLMEngine, SamplingParams


@dataclass(frozen=True)
class ChatPlan:
    num_users: int
    num_turns: int
    message_len: int  # tokens a user's message adds
    reply_len: int  # tokens an answer adds
    think_s: float  # mean think time (exponential; 0: the next turn at once)
    start_window_s: float  # first turns uniform over [0, start_window_s)
    seed: int = 2

    @property
    def chat_len(self) -> int:
        """Tokens of a whole conversation (the last reply's last token never fed back)."""
        return self.num_turns * (self.message_len + self.reply_len)


class Clock(Protocol):
    """What chat() reads time from: the wall clock, or a test's clock of steps."""

    def now(self) -> float: ...

    def sleep_until(self, t: float) -> None: ...

    def stepped(self) -> None:
        """An engine step returned (a clock of steps advances here)."""


class WallClock:
    """Seconds on perf_counter, the clock the engine stamps arrivals with."""

    def now(self) -> float:
        return time.perf_counter()

    def sleep_until(self, t: float) -> None:
        time.sleep(max(0.0, t - time.perf_counter()))

    def stepped(self) -> None:
        pass


@dataclass
class Turn:
    user: int
    index: int  # 0: the user's first turn
    arrival_s: float
    first_token_s: float | None = None
    finish_s: float | None = None


def draws(plan: ChatPlan, vocab: int) -> tuple[list, np.ndarray, np.ndarray]:
    """The seeded parts: each user's messages [U][T][message_len], think times after each turn
    [U, T] and first turns' offsets [U]."""
    rng = np.random.default_rng(plan.seed)
    messages = rng.integers(0, vocab, (plan.num_users, plan.num_turns, plan.message_len))
    think = rng.exponential(plan.think_s, (plan.num_users, plan.num_turns))
    return messages.tolist(), think, rng.uniform(0, plan.start_window_s, plan.num_users)


def chat(engine: LLMEngine, plan: ChatPlan, vocab: int, clock: Clock | None = None) -> list[Turn]:
    """Run every user's conversation to its end; the turns in arrival order."""
    clock = clock or WallClock()
    messages, think, offsets = draws(plan, vocab)
    params = SamplingParams(max_tokens=plan.reply_len, ignore_eos=True)
    start = clock.now()
    due = [(start + float(offsets[user]), user, 0) for user in range(plan.num_users)]
    heapq.heapify(due)
    chats: list[list[int]] = [[] for _ in range(plan.num_users)]
    turns: list[Turn] = []
    running: dict[str, Turn] = {}

    def admit() -> None:  # every turn whose arrival has passed
        now = clock.now()
        while due and due[0][0] <= now:
            arrival, user, index = heapq.heappop(due)
            turn = Turn(user, index, arrival)
            chats[user] += messages[user][index]
            request_id = engine.add_request(chats[user], params, arrival_time_s=arrival)
            running[request_id] = turn
            turns.append(turn)

    while due or engine.has_unfinished():
        if due and not engine.has_unfinished():
            clock.sleep_until(due[0][0])
        deltas = engine.step(admit)
        clock.stepped()
        now = clock.now()
        for delta in deltas:
            turn = running[delta.request_id]
            if delta.token_ids and turn.first_token_s is None:
                turn.first_token_s = now
            chats[turn.user] += delta.token_ids
            if delta.finished:
                turn.finish_s = now
                del running[delta.request_id]
                if turn.index + 1 < plan.num_turns:
                    arrival = now + float(think[turn.user, turn.index])
                    heapq.heappush(due, (arrival, turn.user, turn.index + 1))
    return turns


def ttft_summary(turns: list[Turn]) -> dict:
    """TTFT p50 / p99 of the turns that can hit a cache (the second on) and of the first turns."""
    later = [t.first_token_s - t.arrival_s for t in turns if t.index > 0]
    first = [t.first_token_s - t.arrival_s for t in turns if t.index == 0]
    later_p, first_p = percentiles(later, (50, 99)), percentiles(first, (50,))
    return {
        "ttft_p50_s": later_p["p50"],
        "ttft_p99_s": later_p["p99"],
        "first_turn_ttft_p50_s": first_p["p50"],
        "num_turns": len(turns),
    }


def active_users(turns: list[Turn]) -> dict:
    """Users with a turn in flight (arrived, not finished): the most at once, and the mean over
    the run."""
    events = sorted([(t.arrival_s, 1) for t in turns] + [(t.finish_s, -1) for t in turns])
    active = peak = 0
    area, last = 0.0, events[0][0]
    for at, change in events:
        area += active * (at - last)
        active, last = active + change, at
        peak = max(peak, active)
    span = events[-1][0] - events[0][0]
    return {"active_users_peak": peak, "active_users_mean": area / span if span else 0.0}
