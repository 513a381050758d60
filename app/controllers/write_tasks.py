"""Background writes for Workloads: one lock per Workload, a cap on writes in flight, and the
set of write tasks (so stopping the controller cancels them).

Every writer of a Workload's status (``DecisionWriter``, ``PendingMessages``, ``DraVerdicts``,
``Lifecycle``) holds the Workload's lock around its read-modify-write, so an eviction cannot
overtake the admission it undoes (acceptance KQ-29). Keys are ``namespace/name`` strings;
a lock is dropped once no one holds it.

A write task that ends with an exception is a bug: it is logged at ERROR and the scheduling
loop is woken (nothing is swallowed silently).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Coroutine
from typing import Any

from app.kube.context import Context
from app.kube.workqueue import is_urgent

log = logging.getLogger(__name__)


class WriteSlots:
    """At most ``n`` writes in flight (``async with slots:``); waiters are served first come
    first served, those inside ``app.kube.workqueue.urgent`` (a preemption's evictions)
    before every other. Raises ``ValueError`` for ``n`` < 1."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError("n must be >= 1")
        self._free = n
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._others: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        """Callers waiting for a slot."""
        return len(self._urgent) + len(self._others)

    async def acquire(self) -> None:
        """Wait for and take a slot (see the class doc)."""
        if self._free > 0:  # then no one waits: a freed slot goes to a waiter first
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        q = self._urgent if is_urgent() else self._others
        q.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # granted as the caller was cancelled: pass it on
            elif fut in q:  # not yet passed over by ``release``
                q.remove(fut)
            raise

    def release(self) -> None:
        """Give a slot back: to the next waiter in turn, else to the pool."""
        for q in (self._urgent, self._others):
            while q:
                fut = q.popleft()
                if not fut.done():  # else cancelled, its caller not yet resumed
                    fut.set_result(None)
                    return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class WorkloadWrites:
    """Per-Workload locks, the in-flight cap (``max_inflight`` writes that take ``limit``,
    urgent ones first: ``WriteSlots``) and the tasks started by ``spawn``."""

    def __init__(self, ctx: Context, max_inflight: int = 32) -> None:
        self.ctx = ctx
        self.limit = WriteSlots(max_inflight)
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def tasks(self) -> list[asyncio.Task[Any]]:
        """The write tasks still running."""
        return list(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` as a write task (kept until it ends)."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._write_done)

    def _write_done(self, task: asyncio.Task[Any]) -> None:
        """A write task ended: forget it; an escaped exception is a bug, never silent."""
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("scheduler write task failed", exc_info=task.exception())
            self.ctx.wake()

    def lock(self, key: str) -> asyncio.Lock:
        """The lock of Workload ``key`` (created on first use); pair with ``release``."""
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def release(self, key: str) -> None:
        """Drop ``key``'s lock when no one holds it (call after leaving ``lock(key)``)."""
        lock = self._locks.get(key)
        if lock is not None and not lock.locked():
            self._locks.pop(key, None)
