"""What every controller of one process shares: client, stores, leader gate, events, clock.

``Context`` is built by ``Manager`` (``app.controllers.manager``) and passed to the Job
controller, the scheduling loop and the status writer. No module globals (design.md
"Settings as typed groups, clock and clients injected").
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.config import Settings
from app.controllers.client import (
    CLUSTER_QUEUES,
    COHORTS,
    JOBS,
    LOCAL_QUEUES,
    NAMESPACES,
    PRIORITY_CLASSES,
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    KubeClient,
)
from app.controllers.events import EventRecorder
from app.controllers.informers import Informer, InformerSet, Store
from app.controllers.leader import LeaderElector
from app.controllers.workloads import owner_job
from app.core.workload import QUEUE_NAME_LABEL

Obj = dict[str, Any]

# Jobs with a non-empty queue-name label: an empty value is no queue, for the webhook too
# (one rule everywhere; Kueue's QueueName "" is unmanaged). "k" selects the label's presence,
# "k!=" (empty value) its non-empty values; together, present and non-empty.
MANAGED_JOBS = f"{QUEUE_NAME_LABEL},{QUEUE_NAME_LABEL}!="

# Informer keys.
RF, CQ, CO, LQ, WL, WPC, PC, NS, JOB = "rf", "cq", "co", "lq", "wl", "wpc", "pc", "ns", "job"


def build_informers(client: KubeClient, watch_timeout_seconds: int = 300) -> InformerSet:
    """Informers for every kind the reconciler reads; Jobs only with a non-empty queue-name
    label (``MANAGED_JOBS``)."""
    infs = InformerSet()
    for key, res, selector in (
        (RF, RESOURCE_FLAVORS, None), (CQ, CLUSTER_QUEUES, None), (CO, COHORTS, None),
        (LQ, LOCAL_QUEUES, None),
        (WL, WORKLOADS, None), (WPC, WORKLOAD_PRIORITY_CLASSES, None),
        (PC, PRIORITY_CLASSES, None), (NS, NAMESPACES, None), (JOB, JOBS, MANAGED_JOBS),
    ):
        infs.add(key, Informer(client, res, label_selector=selector,
                               watch_timeout_seconds=watch_timeout_seconds))
    return infs


class OwnerIndex:
    """Workload keys by their controlling Job (``namespace/jobname``), kept by a handler."""

    def __init__(self) -> None:
        self._by_job: dict[str, set[str]] = defaultdict(set)
        self._job_of: dict[str, str] = {}

    def update(self, wl: Obj | None, key: str) -> None:
        prev = self._job_of.pop(key, None)
        if prev is not None:
            self._by_job[prev].discard(key)
            if not self._by_job[prev]:
                del self._by_job[prev]
        if wl is None:
            return
        owner = owner_job(wl)
        if owner is not None:
            job_key = f"{key.split('/', 1)[0]}/{owner[0]}"
            self._job_of[key] = job_key
            self._by_job[job_key].add(key)

    def workloads_of(self, job_key: str) -> set[str]:
        return set(self._by_job.get(job_key, ()))

    def job_of(self, wl_key: str) -> str | None:
        return self._job_of.get(wl_key)


@dataclass
class Context:
    """Shared state of the controllers of one process (see the module doc).

    ``inflight``: Workload keys whose admission write is in flight (the Job controller must not
    stop their Jobs meanwhile). ``wake``: ask the scheduling loop for a cycle soon.
    """

    settings: Settings
    client: KubeClient
    informers: InformerSet
    leader: LeaderElector
    recorder: EventRecorder
    clock: Callable[[], float] = time.time
    owners: OwnerIndex = field(default_factory=OwnerIndex)
    inflight: set[str] = field(default_factory=set)
    wake_event: asyncio.Event = field(default_factory=asyncio.Event)

    def store(self, key: str) -> Store:
        return self.informers.store(key)

    def wake(self) -> None:
        self.wake_event.set()

    @property
    def synced(self) -> bool:
        return self.informers.synced

    @property
    def may_write(self) -> bool:
        """Leader and synced: the only state in which decisions are written."""
        return self.leader.is_leader and self.informers.synced
