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
from collections.abc import Coroutine
from typing import Any

from app.kube.context import Context

log = logging.getLogger(__name__)


class WorkloadWrites:
    """Per-Workload locks, the in-flight cap (``max_inflight`` writes that take ``limit``)
    and the tasks started by ``spawn``."""

    def __init__(self, ctx: Context, max_inflight: int = 32) -> None:
        self.ctx = ctx
        self.limit = asyncio.Semaphore(max_inflight)
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
