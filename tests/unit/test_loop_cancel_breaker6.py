"""breaker6: the scheduling loop's background loops end when cancelled even if their event
is set in the same loop iteration. On Python 3.11 ``asyncio.wait_for(event.wait(), t)``
swallowed such a cancellation (gh-86296), so ``SchedulerLoop.stop`` (cancel, then gather)
waited for a loop that ran on for ever: a new pending Workload's ETA kick, or any event
waking the cycle loop, at the moment of a stop was enough."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.test_eta_messages import _loop


@pytest.mark.parametrize("which", ["run_refresher", "run", "run_writer"])
async def test_a_loop_cancelled_as_its_event_is_set_ends(which: str) -> None:
    loop, ctx, _ = _loop(strict=False, eta_message_seconds=3600)
    ctx.wake_event = asyncio.Event()
    m = loop.messages
    event = {"run_refresher": m._eta_kick, "run": ctx.wake_event,  # noqa: SLF001
             "run_writer": m._pending_kick}[which]  # noqa: SLF001
    task = asyncio.create_task(getattr(loop if which == "run" else m, which)())
    for _ in range(20):  # let it reach its wait
        await asyncio.sleep(0)
    event.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2.0)
