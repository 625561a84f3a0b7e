"""The admission's queue: requests past the limit wait (lower priority first, then in arrival
order), a full queue refuses with Retry-After, a waiter that is cancelled (its client left)
never takes its slots, slots given back by another worker reach this worker's queue, and the
order holds across workers."""

import asyncio
import multiprocessing

import pytest

from pipeline.openai_api.admission import Admission
from pipeline.openai_api.errors import RETRY_AFTER_S, APIError


async def _settle() -> None:
    """Until every task that can run has run (no timers involved)."""
    for _ in range(10):
        await asyncio.sleep(0)


def test_waiters_run_by_priority_then_arrival_and_the_full_queue_refuses():
    async def scenario():
        admission = Admission(2, 3)
        held = [admission.take_now(1), admission.take_now(1)]
        order = []

        async def wait(name, priority):
            ticket = await admission.take(1, priority)
            order.append(name)
            return ticket

        tasks = [
            asyncio.create_task(wait("late low", 5)),
            asyncio.create_task(wait("first", 0)),
            asyncio.create_task(wait("second", 0)),
        ]
        await _settle()
        assert admission.num_waiting == 3 and order == []
        with pytest.raises(APIError) as refused:
            await admission.take(1)
        assert refused.value.status == 429 and refused.value.retry_after_s == RETRY_AFTER_S
        assert admission.take_now(1) is None  # nobody jumps the queue, even with room later
        for ticket in held:
            ticket.give_back()
        await _settle()
        assert order == ["first", "second"] and admission.num_waiting == 1
        first = tasks[1].result()
        assert first.waited_s > 0
        first.give_back()
        await _settle()
        assert order == ["first", "second", "late low"]
        assert admission.num_in_flight == 2 and admission.num_waiting == 0

    asyncio.run(scenario())


def test_a_cancelled_waiter_never_takes_its_slots_nor_holds_up_those_behind_it():
    async def scenario():
        admission = Admission(4, 10)
        held = admission.take_now(3)
        big = asyncio.create_task(admission.take(4))  # the head: needs every slot
        small = asyncio.create_task(admission.take(1))  # fits now, but waits behind it
        await _settle()
        assert admission.num_waiting == 2 and not small.done()
        big.cancel()  # its client left
        await _settle()
        assert small.done() and admission.num_in_flight == 4 and admission.num_waiting == 0
        held.give_back()
        small.result().give_back()
        assert admission.num_in_flight == 0

    asyncio.run(scenario())


def test_slots_another_worker_gives_back_reach_this_workers_queue():
    counts = Admission.shared_counts(multiprocessing.get_context("spawn"), 2)
    other = Admission(1, 10, counts, 1)
    held = other.take_now(1)

    async def scenario():
        this = Admission(1, 10, counts, 0)
        waiter = asyncio.create_task(this.take(1))
        await _settle()
        assert this.num_waiting == other.num_waiting == 1
        held.give_back()  # in the other worker: nothing tells this one but its poll
        ticket = await asyncio.wait_for(waiter, 30)
        assert this.num_in_flight == 1 and this.num_waiting == 0
        ticket.give_back()

    asyncio.run(scenario())


def test_the_order_holds_across_workers():
    counts = Admission.shared_counts(multiprocessing.get_context("spawn"), 2)

    async def scenario():
        first, second = Admission(1, 10, counts, 0), Admission(1, 10, counts, 1)
        held = second.take_now(1)
        earlier = asyncio.create_task(first.take(1))
        await _settle()
        later = asyncio.create_task(second.take(1))
        await _settle()
        held.give_back()  # in the second worker, whose own waiter came later
        await _settle()
        assert not later.done()  # the earlier arrival in the other worker comes first
        (await asyncio.wait_for(earlier, 30)).give_back()  # the first worker's poll takes it
        (await asyncio.wait_for(later, 30)).give_back()
        assert first.num_in_flight == first.num_waiting == 0

    asyncio.run(scenario())
