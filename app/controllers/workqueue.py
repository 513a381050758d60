"""A de-duplicating work queue of object keys (client-go's workqueue, asyncio flavour).

- ``add(key)``: queue the key unless it is already queued; a key added while a worker is
  processing it is queued again when that worker calls ``done``: one worker per key at a time.
- ``add_after(key, seconds)``: delayed add (timers on the running loop).
- ``add_rate_limited(key)``: delayed add with per-key exponential backoff
  (``base * 2**failures`` capped at ``cap`` seconds); ``forget(key)`` resets it after success.
- ``get()`` waits for a key; ``done(key)`` must follow every ``get``.

``work(queue, reconcile, ...)`` is the worker loop every controller runs over its queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from app.controllers.errors import ApiError, Conflict


class WorkQueue:
    """Keys (strings) to reconcile; see the module doc. ``base``/``cap`` in seconds."""

    def __init__(self, *, base: float = 0.05, cap: float = 30.0) -> None:
        self.base = base
        self.cap = cap
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._failures: dict[str, int] = {}
        self._ready = asyncio.Event()
        self._timers: set[asyncio.TimerHandle] = set()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: str) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._ready.set()

    def add_after(self, key: str, seconds: float) -> None:
        if seconds <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            self._timers.discard(handle)  # type: ignore[arg-type]
            self.add(key)

        handle = loop.call_later(seconds, fire)
        self._timers.add(handle)

    def add_rate_limited(self, key: str) -> float:
        """Add after this key's backoff; returns the delay used (seconds)."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        delay = min(self.cap, self.base * (2 ** min(n, 30)))
        self.add_after(key, delay)
        return delay

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    async def get(self) -> str:
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._ready.set()

    def close(self) -> None:
        for h in self._timers:
            h.cancel()
        self._timers.clear()


async def work(queue: WorkQueue, reconcile: Callable[[str], Awaitable[float | None]], *,
               may_write: Callable[[], bool], log: logging.Logger, what: str) -> None:
    """Process ``queue`` until cancelled: ``reconcile(key)`` returns seconds to look again (or
    None to forget the key's backoff). Keys taken while ``may_write()`` is false are dropped:
    the controller enqueues everything again when it leads and is synced. A ``Conflict``
    (stale copy; the watch brings the new version) retries soon; any other error retries
    with backoff and is logged (with a traceback when it is not an API error: a bug)."""
    while True:
        key = await queue.get()
        try:
            if not may_write():
                continue
            requeue = await reconcile(key)
            if requeue:
                queue.add_after(key, requeue)
            else:
                queue.forget(key)
        except asyncio.CancelledError:
            raise
        except Conflict:
            queue.add_rate_limited(key)
        except Exception as exc:  # noqa: BLE001 - one object must not stop the others
            delay = queue.add_rate_limited(key)
            api = isinstance(exc, ApiError)
            log.log(logging.WARNING if api else logging.ERROR, "%s %s failed (%s); retry in %.2fs",
                    what, key, _short(exc), delay, exc_info=not api)
        finally:
            queue.done(key)


def _short(exc: BaseException, limit: int = 400) -> str:
    """``exc`` as text, cut at ``limit`` characters: an API server's 422 quotes the whole
    object it refused (a pod template is kilobytes), which would bury the log."""
    text = str(exc)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
