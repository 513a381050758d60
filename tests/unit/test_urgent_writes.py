"""A preemption's evictions go ahead of the other writes waiting (issue 33, lost seconds).

Kueue v0.17.1 issues a cycle's preemptions synchronously and in parallel
(``Preemptor.IssuePreemptions``) before it goes on, so the victims of one decision stop
together right after it. pykueue's writes wait for a write slot (``WriteSlots``, 32 in
flight) and an API token (``TokenBucket``); queued behind the admissions of earlier cycles,
the victims of one decision landed over up to 1.8 s on Kueue's baseline (each running, and
thrown away, for as long as its write waited: ~30 admitted seconds a run). Inside
``app.kube.workqueue.urgent`` (the scheduling loop's Preempt writes) a write takes its slot
and its token before every other waiting one. The decisions are unchanged: only the order of
writes already decided."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.controllers.write_tasks import WriteSlots
from app.kube.client import TokenBucket
from app.kube.workqueue import is_urgent, urgent
from tests.unit.test_stale_preemption import _loop, _preempt


async def _take(slots: WriteSlots, tag: str, order: list[str]) -> None:
    async with slots:
        order.append(tag)


async def test_an_urgent_write_takes_the_next_slot_before_earlier_waiters() -> None:
    slots = WriteSlots(1)
    await slots.acquire()
    order: list[str] = []
    tasks = [asyncio.create_task(_take(slots, f"admit-{i}", order)) for i in range(3)]
    await asyncio.sleep(0)
    with urgent():
        tasks += [asyncio.create_task(_take(slots, f"evict-{i}", order)) for i in range(2)]
    await asyncio.sleep(0)
    assert slots.waiting == 5 and order == []
    slots.release()
    await asyncio.gather(*tasks)
    assert order == ["evict-0", "evict-1", "admit-0", "admit-1", "admit-2"]
    assert slots.waiting == 0
    await asyncio.wait_for(slots.acquire(), 1.0)  # the slot came back to the pool


async def test_a_cancelled_waiter_does_not_keep_the_slot() -> None:
    slots = WriteSlots(1)
    await slots.acquire()
    with urgent():
        gone = asyncio.create_task(slots.acquire())
    other = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    gone.cancel()
    slots.release()  # the cancelled waiter is passed over
    await asyncio.gather(gone, return_exceptions=True)
    await asyncio.wait_for(other, 1.0)
    assert slots.waiting == 0
    with urgent():
        gone = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    gone.cancel()  # removed from the line before any release
    await asyncio.gather(gone, return_exceptions=True)
    assert slots.waiting == 0
    slots.release()
    await asyncio.wait_for(slots.acquire(), 1.0)


def test_write_slots_refuse_zero() -> None:
    with pytest.raises(ValueError, match="n must be"):
        WriteSlots(0)


async def test_an_urgent_request_takes_the_next_token_before_earlier_waiters() -> None:
    """TokenBucket(qps=8, burst=1), fake clock: 10 foreground requests of three lanes and a
    background one wait; an urgent one queued last gets the next token; the others keep
    their order and the rate is unchanged. A background request inside ``urgent`` stays
    background."""
    now = [0.0]

    async def sleep(d: float) -> None:
        now[0] += d
        await asyncio.sleep(0)

    bucket = TokenBucket(qps=8, burst=1, clock=lambda: now[0], sleep=sleep,
                         background_max_wait=60.0)
    order: list[tuple[str, float]] = []

    async def one(lane: str, tag: str, *, bg: bool = False, first: bool = False) -> None:
        await bucket.acquire(lane, background=bg, urgent=first)
        order.append((tag, now[0]))

    assert bucket.try_acquire()
    tasks = [asyncio.create_task(one(f"team-{i % 3}", f"a{i}")) for i in range(10)]
    tasks.append(asyncio.create_task(one("", "status", bg=True, first=True)))
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(one("team-0", "evict", first=True)))
    await asyncio.gather(*tasks)
    tags = [t for t, _ in order]
    assert tags[0] == "evict" and tags[-1] == "status"
    assert order[0][1] == pytest.approx(1 / 8)
    assert sorted(tags[1:-1], key=lambda t: int(t[1:])) == [f"a{i}" for i in range(10)]
    assert order[-1][1] == pytest.approx(12 / 8)  # the rate is unchanged


async def test_the_scheduling_loop_writes_a_preemptions_evictions_before_earlier_writes() -> None:
    """One write slot, held; a write queued before the Preempt decision (an admission of an
    earlier cycle); the victim's eviction, queued after it, is written first, as urgent."""
    sim, d = _preempt()
    loop, ctx = _loop(sim)
    loop.writes.limit = WriteSlots(1)  # the DecisionWriter shares ``loop.writes``
    order: list[str] = []

    async def replace(resource: Any, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        order.append(f"evict {body['metadata']['name']} urgent={is_urgent()}")
        return body
    ctx.client.replace = replace
    await loop.writes.limit.acquire()
    loop.writes.spawn(_take(loop.writes.limit, "earlier write", order))
    await asyncio.sleep(0)
    loop.apply(d)
    assert not is_urgent()  # only the victims' tasks
    await asyncio.sleep(0)
    loop.writes.limit.release()
    await asyncio.gather(*loop.writes.tasks)
    assert order == ["evict v urgent=True", "earlier write"]
    assert sim.state("v") == "evicting"
