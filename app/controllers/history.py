"""Bounded in-memory history for the dashboard: usage and queue lengths per ClusterQueue, and
the recent preemptions.

``UsageHistory.sample(cluster, now)`` appends, per ClusterQueue, one sample ``(t, pending,
admitted, {FlavorResource: used})``; each ClusterQueue keeps at most ``capacity`` samples
(a ring: the oldest drop out), so memory is O(ClusterQueues x capacity x flavor-resources).
With the defaults (a sample every 30 s, 480 samples) that is the last 4 hours. Nothing is
persisted: a restarted or newly elected replica starts empty (the API objects hold no
history to rebuild it from).

``PreemptionLog`` keeps the last ``capacity`` preemptions the leader decided (followers
decide none, so theirs stays empty).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from app.core.decisions import Preempt
from app.core.quota_state import QuotaState
from app.core.types import ClusterQueueName, FlavorResource


@dataclass(frozen=True, slots=True)
class Sample:
    """One ClusterQueue at ``t`` (seconds since the epoch): Workload counts and usage
    (amounts in the resource's unit: milli-CPU, bytes, counts)."""

    t: float
    pending: int
    admitted: int
    used: dict[FlavorResource, int]


class UsageHistory:
    """Rings of ``Sample`` per ClusterQueue (see the module doc)."""

    def __init__(self, *, capacity: int = 480, interval_seconds: float = 30.0) -> None:
        self.capacity = capacity
        self.interval_seconds = interval_seconds
        self._rings: dict[ClusterQueueName, deque[Sample]] = {}

    def sample(self, cluster: QuotaState, now: float) -> None:
        """Append a sample of every ClusterQueue; forget deleted ones."""
        names = cluster.cluster_queue_names()
        for gone in set(self._rings) - set(names):
            del self._rings[gone]
        for name in names:
            counts = cluster.queue_counts(name)
            if counts is None:
                continue
            ring = self._rings.get(name)
            if ring is None:
                ring = self._rings[name] = deque(maxlen=self.capacity)
            ring.append(Sample(now, counts[0], counts[1], cluster.usage(name)))

    def of(self, name: ClusterQueueName) -> list[Sample]:
        """The samples of ``name``, oldest first (empty when none)."""
        return list(self._rings.get(name, ()))


@dataclass(frozen=True, slots=True)
class PreemptionRecord:
    """One preemption: when, the preemptor and its ClusterQueue, each victim with its reason
    (``InClusterQueue``, ``InCohortReclamation``, ...)."""

    t: float
    preemptor: str
    cluster_queue: ClusterQueueName
    victims: tuple[tuple[str, str], ...]


class PreemptionLog:
    """The last ``capacity`` preemptions, newest last."""

    def __init__(self, capacity: int = 100) -> None:
        self._ring: deque[PreemptionRecord] = deque(maxlen=capacity)

    def record(self, d: Preempt, now: float) -> None:
        """Remember preemption decision ``d`` made at ``now``."""
        self._ring.append(PreemptionRecord(
            now, str(d.preemptor), d.cluster_queue,
            tuple((str(v.workload), v.reason.value) for v in d.victims)))

    def recent(self, names: Iterable[ClusterQueueName] | None = None) -> list[PreemptionRecord]:
        """Newest first; only those of ClusterQueues ``names`` when given."""
        keep = None if names is None else set(names)
        return [r for r in reversed(self._ring) if keep is None or r.cluster_queue in keep]
