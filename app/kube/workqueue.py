"""A de-duplicating work queue of object keys (client-go's workqueue, asyncio flavour).

- ``add(key)``: queue the key unless it is already queued; a key added while a worker is
  processing it is queued again when that worker calls ``done``: one worker per key at a time.
- ``add_after(key, seconds)``: delayed add (timers on the running loop).
- ``add_rate_limited(key)``: delayed add with per-key exponential backoff
  (``base * 2**failures`` capped at ``cap`` seconds); ``forget(key)`` resets it after success.
- ``get()`` waits for a key; ``done(key)`` must follow every ``get``.

Fair turns: keys are served round-robin across *lanes* (``lane_of(key)``, by default the
key's namespace, ``namespace_of``), first-come-first-served within a lane. One namespace that
queues thousands of keys (a flood of Jobs) therefore delays another namespace's key by at most
one key per other busy lane, not by the whole backlog: with ``L`` lanes holding keys (and no
other lane joining), the key at position ``p`` of its lane is served within ``(p + 1) * L``
gets. client-go's workqueue, which Kueue's controllers use, is one FIFO. The order of the
queue changes no decision of the core, which orders Workloads itself (priority, creation
time).

Work on behalf of another lane: a key added with ``add(key, lane=L)`` (``L`` not the key's
own lane) is served in ``L``'s turns, moved there if it already waits elsewhere, until
``forget(key)`` (its work is done). The scheduling loop does so for a preemption's victims:
their eviction, the stop of their object and the quota release are written for the
preemptor, so they take the preemptor namespace's turns, not the victims' (whose own flood
would otherwise hold back the room another team is reclaiming). ``acting_for(lane)`` marks a
block of code (and the tasks it creates) as working for ``lane``: the API client
(``app.kube.client``) takes its tokens in that lane and ``acting_lane()`` reads it; ``work``
runs a key served in another lane inside ``acting_for`` that lane.

``work(queue, reconcile, ...)`` is the worker loop every controller runs over its queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Generic, TypeVar

from app.kube.errors import ApiError, Conflict

T = TypeVar("T")

_ACTING_LANE: ContextVar[str | None] = ContextVar("pykueue_acting_lane", default=None)


@contextmanager
def acting_for(lane: str | None) -> Iterator[None]:
    """Run the block (and the tasks created in it, which copy the context) on behalf of
    ``lane`` (a namespace; None: on nobody's behalf, each request in its own lane): see the
    module doc."""
    token = _ACTING_LANE.set(lane)
    try:
        yield
    finally:
        _ACTING_LANE.reset(token)


def acting_lane() -> str | None:
    """The lane the current code works for (``acting_for``), or None."""
    return _ACTING_LANE.get()


_BACKGROUND: ContextVar[bool] = ContextVar("pykueue_background", default=False)


@contextmanager
def background() -> Iterator[None]:
    """Run the block (and the tasks created in it) as background traffic: its API requests
    take a token only when no other request waits for one, or once they have waited
    ``ClientSettings.background_max_wait_seconds`` (``app.kube.client.TokenBucket``). For
    writes that restate what the controllers' own state already says (queue status,
    Events), so that under a full write budget they do not slow admissions."""
    token = _BACKGROUND.set(True)
    try:
        yield
    finally:
        _BACKGROUND.reset(token)


def in_background() -> bool:
    """True inside ``background()``."""
    return _BACKGROUND.get()


def namespace_of(key: str) -> str:
    """The namespace of an object key: ``ns`` of ``ns/name`` and of ``<prefix>:ns/name``
    (``job:team-a/train``); ``""`` for a cluster-scoped key (``cq-a``)."""
    rest = key.partition(":")[2] if ":" in key.partition("/")[0] else key
    ns, sep, _ = rest.partition("/")
    return ns if sep else ""


class Lanes(Generic[T]):
    """Items in round-robin lanes: ``push(lane, item)`` appends to ``lane``; ``pop()`` takes
    the oldest item of the lane whose turn it is, then that lane goes to the back of the turn
    order. A lane that empties leaves the turn order and joins at the back when it gets an
    item again. One lane behaves as a FIFO. Not thread-safe (one event loop)."""

    def __init__(self) -> None:
        self._lanes: dict[str, deque[T]] = {}
        self._turns: deque[str] = deque()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, lane: str, item: T) -> None:
        q = self._lanes.get(lane)
        if q is None:
            q = self._lanes[lane] = deque()
            self._turns.append(lane)
        q.append(item)
        self._size += 1

    def pop(self) -> T:
        """The next item in turn; ``IndexError`` when empty."""
        if not self._turns:
            raise IndexError("pop from empty Lanes")
        lane = self._turns.popleft()
        q = self._lanes[lane]
        item = q.popleft()
        self._size -= 1
        if q:
            self._turns.append(lane)
        else:
            del self._lanes[lane]
        return item

    def lane_sizes(self) -> dict[str, int]:
        """Items per non-empty lane."""
        return {lane: len(q) for lane, q in self._lanes.items()}

    def remove(self, lane: str, item: T) -> bool:
        """Remove the oldest ``item`` of ``lane`` (linear in the lane's length); False when
        the lane holds no such item."""
        q = self._lanes.get(lane)
        if q is None:
            return False
        try:
            q.remove(item)
        except ValueError:
            return False
        self._size -= 1
        if not q:
            del self._lanes[lane]
            self._turns.remove(lane)
        return True

    def drop_oldest_of_longest(self) -> tuple[str, T]:
        """Remove the oldest item of the longest lane (a bounded buffer makes room this way,
        so a full buffer costs the tenant that filled it); returns (lane, item). ``IndexError``
        when empty."""
        if not self._lanes:
            raise IndexError("drop from empty Lanes")
        lane = max(self._lanes, key=lambda name: len(self._lanes[name]))
        q = self._lanes[lane]
        item = q.popleft()
        self._size -= 1
        if not q:
            del self._lanes[lane]
            self._turns.remove(lane)
        return lane, item


class FairMap(Generic[T]):
    """A map of object keys to their latest value, taken in fair turns: ``m[key] = v`` sets
    the value (a new key joins the back of its lane, ``lane_of(key)``, default
    ``namespace_of``; a known key keeps its place, as in a dict); ``pop_next()`` takes the
    oldest key of the lane whose turn it is, with its value (``Lanes`` order)."""

    def __init__(self, lane_of: Callable[[str], str] = namespace_of) -> None:
        self.lane_of = lane_of
        self._values: dict[str, T] = {}
        self._order: Lanes[str] = Lanes()

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __setitem__(self, key: str, value: T) -> None:
        if key not in self._values:
            self._order.push(self.lane_of(key), key)
        self._values[key] = value

    def get(self, key: str) -> T | None:
        return self._values.get(key)

    def pop(self, key: str, default: T | None = None) -> T | None:
        """Remove ``key`` (its place in its lane is skipped when its turn comes)."""
        return self._values.pop(key, default)

    def pop_next(self) -> tuple[str, T]:
        """The next key in turn and its value, removed; ``KeyError`` when empty."""
        while self._order:
            key = self._order.pop()
            if key in self._values:
                return key, self._values.pop(key)
        raise KeyError("pop_next from an empty FairMap")


class WorkQueue:
    """Keys (strings) to reconcile; see the module doc. ``base``/``cap`` in seconds;
    ``lane_of(key)``: the key's own lane for fair turns (default ``namespace_of``)."""

    def __init__(self, *, base: float = 0.05, cap: float = 30.0,
                 lane_of: Callable[[str], str] = namespace_of) -> None:
        self.base = base
        self.cap = cap
        self.lane_of = lane_of
        self._queue: Lanes[str] = Lanes()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._failures: dict[str, int] = {}
        # Keys served in another lane than their own until forgotten, and the lane each
        # queued key waits in.
        self._serve_in: dict[str, str] = {}
        self._queued_in: dict[str, str] = {}
        self._ready = asyncio.Event()
        self._timers: set[asyncio.TimerHandle] = set()

    def __len__(self) -> int:
        return len(self._queue)

    def lane_sizes(self) -> dict[str, int]:
        """Queued keys per lane (metrics, tests)."""
        return self._queue.lane_sizes()

    def lane_for(self, key: str) -> str:
        """The lane ``key`` is served in: the one it was added for (``add(key, lane=...)``)
        until forgotten, else its own (``lane_of``)."""
        lane = self._serve_in.get(key)
        return self.lane_of(key) if lane is None else lane

    def acting_lane_of(self, key: str) -> str | None:
        """The other lane ``key`` is served for, or None when it is served in its own."""
        return self._serve_in.get(key)

    def _push(self, key: str) -> None:
        lane = self.lane_for(key)
        self._queue.push(lane, key)
        self._queued_in[key] = lane
        self._ready.set()

    def add(self, key: str, *, lane: str | None = None) -> None:
        """Queue ``key`` (see the module doc). ``lane``: the lane it is added for when that
        is not its own; it is then served in that lane's turns (moved to its back if it
        waits in another) until ``forget(key)``. An add without ``lane`` keeps such a lane."""
        if lane is not None and lane != self.lane_of(key) and self._serve_in.get(key) != lane:
            self._serve_in[key] = lane
            was = self._queued_in.get(key)
            if was is not None and was != lane and self._queue.remove(was, key):
                self._push(key)
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._push(key)

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
        """The key's work is done: its backoff resets and it is served in its own lane."""
        self._failures.pop(key, None)
        self._serve_in.pop(key, None)

    def get_nowait(self) -> str | None:
        """The next key in turn, or None when none is queued (``done`` must follow)."""
        if not self._queue:
            return None
        key = self._queue.pop()
        self._queued_in.pop(key, None)
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    async def get(self) -> str:
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        key = self.get_nowait()
        assert key is not None
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._push(key)

    def close(self) -> None:
        for h in self._timers:
            h.cancel()
        self._timers.clear()
        self._serve_in.clear()


async def work(queue: WorkQueue, reconcile: Callable[[str], Awaitable[float | None]], *,
               may_write: Callable[[], bool], log: logging.Logger, what: str) -> None:
    """Process ``queue`` until cancelled: ``reconcile(key)`` returns seconds to look again (or
    None to forget the key's backoff). Keys taken while ``may_write()`` is false are dropped:
    the controller enqueues everything again when it leads and is synced. A ``Conflict``
    (stale copy; the watch brings the new version) retries soon; any other error retries
    with backoff and is logged (with a traceback when it is not an API error: a bug). A key
    served for another lane is reconciled ``acting_for`` that lane."""
    while True:
        key = await queue.get()
        try:
            if not may_write():
                continue
            with acting_for(queue.acting_lane_of(key)):
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
