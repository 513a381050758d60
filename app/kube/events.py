"""Kubernetes Events (core/v1) on Jobs, Workloads and queues, best effort.

``EventRecorder.emit(obj, type, reason, message)`` queues an Event about ``obj`` (a dict with
``apiVersion``, ``kind``, ``metadata``); a background task writes them so the caller never
waits on the API server. An identical (object, reason, message) within ``dedupe_seconds`` is
dropped (client-go's event correlator does the same, by aggregation), so a Job that waits for
quota says why once, not every cycle. Beyond that, Events about one object with one reason
are rate-limited by a token bucket (``burst`` at once, then one per ``refill_seconds``):
client-go's ``EventSourceObjectSpamFilter`` defaults (25, one per 5 minutes), which Kueue's
recorder goes through, so a Workload preempted or re-queued over and over cannot flood the
API server. Failures are logged and dropped. By default (``ClientSettings.events_bucket``
"shared"; Kueue's recorder shares its manager's RateLimiter too) Events are background
traffic for the controllers' token bucket (``app.kube.workqueue.background``: written when no
admission write waits for a token, or after ``ClientSettings.background_max_wait_seconds``);
with "own" the recorder's client has a bucket of its own
(``app.controllers.manager.events_client``). Queued
Events are written in fair turns per namespace (``app.kube.workqueue.Lanes``), and when
``max_pending`` are queued the oldest Event of the namespace with the most queued goes: one
namespace's flood of Jobs delays and drops its own Events, not another team's. ``kubectl
describe job`` lists these Events (``involvedObject`` is the Job, source component ``pykueue``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from app.kube.client import EVENTS, KubeClient
from app.kube.errors import from_exception
from app.kube.workqueue import Lanes, background
from app.wire.fields import Obj
from app.wire.workload_status import rfc3339

log = logging.getLogger(__name__)

NORMAL, WARNING = "Normal", "Warning"


class EventRecorder:
    """Writes Events asynchronously; see the module doc. ``component``: ``source.component``."""

    def __init__(self, client: KubeClient | None, *, component: str = "pykueue",
                 instance: str = "", dedupe_seconds: float = 300.0, max_pending: int = 1000,
                 burst: int = 25, refill_seconds: float = 300.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.component = component
        self.instance = instance
        self.dedupe_seconds = dedupe_seconds
        self.clock = clock
        self._recent: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        # (object, reason) -> (tokens, when counted): the spam filter's buckets.
        self.burst, self.refill_seconds = burst, refill_seconds
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()
        self.max_pending = max_pending
        self._queue: Lanes[Obj] = Lanes()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.rate_limited = 0
        self.enabled = True

    def emit(self, obj: Mapping[str, Any], etype: str, reason: str, message: str) -> bool:
        """Queue an Event about ``obj``; returns False when deduplicated or rate-limited
        (``rate_limited`` counts those). A full queue drops an older Event instead
        (``dropped``; see the module doc)."""
        if not self.enabled:
            return False
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        key = (uid, reason, message)
        now = self.clock()
        last = self._recent.get(key)
        if last is not None and now - last < self.dedupe_seconds:
            return False
        if not self._take_token((uid, reason), now):
            self.rate_limited += 1
            return False
        self._recent[key] = now
        self._recent.move_to_end(key)
        while len(self._recent) > 10000:
            self._recent.popitem(last=False)
        ns = meta.get("namespace") or "default"
        stamp = rfc3339(now)
        # A random 64-bit suffix names the Event uniquely (client-go: name + hex time);
        # not uuid4, which reads os.urandom per Event.
        event: Obj = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta.get('name', 'object')}.{random.getrandbits(64):016x}",
                         "namespace": ns},
            "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                               "name": meta.get("name"), "namespace": meta.get("namespace"),
                               "uid": meta.get("uid")},
            "type": etype, "reason": reason, "message": message[:1024],
            "source": {"component": self.component},
            "reportingComponent": self.component, "reportingInstance": self.instance,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        if len(self._queue) >= self.max_pending:
            self._queue.drop_oldest_of_longest()
            self.dropped += 1
        self._queue.push(ns, event)
        self._ready.set()
        return True

    def _take_token(self, key: tuple[str, str], now: float) -> bool:
        """One token of ``key``'s bucket (full at ``burst``, one more per
        ``refill_seconds``); False when empty."""
        tokens, since = self._buckets.get(key, (float(self.burst), now))
        if self.refill_seconds > 0:
            tokens = min(float(self.burst), tokens + (now - since) / self.refill_seconds)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return False
        self._buckets[key] = (tokens - 1, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > 10000:
            self._buckets.popitem(last=False)
        return True

    async def _run(self) -> None:
        with background():  # after the writes that decide what runs (TokenBucket)
            await self._write_queued()

    async def _write_queued(self) -> None:
        assert self.client is not None
        while True:
            while not self._queue:
                self._ready.clear()
                await self._ready.wait()
            ev = self._queue.pop()
            try:
                await self.client.create(EVENTS, ev)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - events are best effort
                self.dropped += 1
                log.debug("event %s dropped: %s", ev.get("reason"), from_exception(exc))

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The writer task, when running."""
        return [self._task] if self._task is not None else []

    def start(self) -> None:
        if self.client is not None and self._task is None:
            self._task = asyncio.create_task(self._run(), name="event-recorder")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

