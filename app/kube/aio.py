"""asyncio helpers shared by the controllers' loops."""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass (None: no limit); True when
    set. Not ``asyncio.wait_for(event.wait(), timeout)``: on Python 3.11 that returns
    normally, swallowing the cancellation, when the event is set in the same loop iteration
    as the task is cancelled (gh-86296, fixed in 3.12), so a loop woken by a busy event (a new
    Workload, a kick, an informer's first list) could ignore ``stop`` and run on for ever."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return bool(done)
