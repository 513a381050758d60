"""What every controller of one process shares: client, stores, leader gate, events, clock.

``Context`` is built by ``Manager`` (``app.controllers.manager``) and passed to the job
framework's reconciler, the scheduling loop and the status writer. No module globals (design.md
"Settings as typed groups, clock and clients injected").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from app.config import Settings
from app.kube.client import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    COHORTS,
    LIMIT_RANGES,
    LOCAL_QUEUES,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    NAMESPACES,
    PRIORITY_CLASSES,
    RESOURCE_FLAVORS,
    RUNTIME_CLASSES,
    STATEFULSETS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    KubeClient,
    Resource,
)
from app.kube.events import EventRecorder
from app.kube.informers import Informer, InformerSet, Store
from app.kube.leader import LeaderElector
from app.wire.fields import Obj
from app.wire.names import QUEUE_NAME_LABEL

# Informer keys. JOB is the batch/v1 Job kind's (app.integrations.batchjob), whose store the
# webhook and extender views read.
RF, CQ, CO, LQ, WL, WPC, PC, NS, JOB = "rf", "cq", "co", "lq", "wl", "wpc", "pc", "ns", "job"
AC = "ac"  # AdmissionChecks: ClusterQueues naming a missing or inactive one admit nothing
# LimitRanges (every namespace) and RuntimeClasses: what Kueue adds to a pending Workload's
# pod sets before counting them (app.wire.podadjust).
LR, RTC = "lr", "rtc"
# MultiKueueClusters and MultiKueueConfigs: read by the MultiKueue controller from its cache,
# as Kueue's reconcilers read theirs, so keeping the clusters' status costs no client tokens.
# Not in ``build_informers``: their CRDs may not be installed, so the Manager watches them,
# as an optional job kind, once the API server serves both (MultiKueue off until then).
MKC, MKCFG = "mkc", "mkcfg"
MULTIKUEUE_STORES: tuple[tuple[str, Resource], ...] = (
    (MKC, MULTIKUEUE_CLUSTERS), (MKCFG, MULTIKUEUE_CONFIGS))
STS = "sts"  # queued (or all) StatefulSets: Pod webhook sizes their pods' group from spec.replicas
RCT = "rct"  # ResourceClaimTemplates, watched only with resources.deviceClassMappings (DRA)
# Every Pod, watched with the Nodes for the scheduler extender; the job reconciler reads it
# too (the pods a job still runs hold its quota).
POD = "pod"
# batch Jobs without a queue-name label, watched while the Job kind's informer lists only
# labelled ones: a managed ancestor's (a JobSet's) children are held to its admission.
CHILD_JOBS = "jobchild"
# batch Jobs labelled with an empty queue name (``EMPTY_QUEUE_NAME``; stored before the
# webhook refused that), watched with ``CHILD_JOBS`` and handled as its Jobs are: Kueue
# v0.17.1 reads an empty queue name as none (``QueueName``), so such a child of a managed
# ancestor is held to the ancestor's admission too. No selector lists both at once.
EMPTY_QUEUE_JOBS = "jobempty"
CHILD_JOB_STORES = (CHILD_JOBS, EMPTY_QUEUE_JOBS)
# Every batch Job while the Job kind is not served, read only (no handler), watched while a
# kind whose operator runs pods through batch Jobs is served (``KindDefaults.runs_batch_jobs``)
# with the Pod store, each kept as ``informers.identity_only`` (what ``framework.pod_of``
# reads). With the Job kind's stores, every batch Job is then in some store, so
# ``framework.pod_of`` takes one no store holds for one gone.
OTHER_JOBS = "jobother"
# Every JobSet, watched while the JobSet kind is served (its ``side_stores``: the unlabelled
# JobSet an AppWrapper wraps leads its Jobs to their ancestor, ``framework.stored_object``)
# or a kind makes JobSets through its operator (a TrainJob's trainer,
# ``KindDefaults.made_store``): such a JobSet, unlabelled, is held to that object's admission.
CHILD_JOBSETS = "jobsetchild"
UNLABELLED = f"!{QUEUE_NAME_LABEL}"
EMPTY_QUEUE_NAME = f"{QUEUE_NAME_LABEL}="


NAMESPACE_INDEX = "namespace"  # a store's index by metadata.namespace


def in_namespace(ctx: Context, key: str, namespace: str) -> list[Obj]:
    """The objects of store ``key`` in ``namespace``, through the store's namespace index
    (built on first use, then kept by every change); ``[]`` when this process does not watch
    that store."""
    informers = getattr(ctx, "informers", None)  # a bare store view (tests) has none
    if informers is not None and key not in informers.informers:
        return []
    try:
        store = ctx.store(key)
    except KeyError:
        return []
    store.index(NAMESPACE_INDEX, lambda o: (o.get("metadata") or {}).get("namespace"))
    return store.by_index(NAMESPACE_INDEX, namespace)


def build_informers(client: KubeClient, watch_timeout_seconds: int = 300, *,
                    job_kinds: Iterable[tuple[str, Resource, str | None]] = (),
                    every_statefulset: bool = False) -> InformerSet:
    """Informers for every Kueue kind the reconciler reads, plus ``job_kinds``: (store key,
    resource, label selector) of each job kind (the managed objects only).
    ``every_statefulset``: the StatefulSet store holds unlabelled ones too (their pods are
    queued with ``jobs.manage_jobs_without_queue_name``)."""
    infs = InformerSet()
    for key, res, selector in (
        (RF, RESOURCE_FLAVORS, None), (CQ, CLUSTER_QUEUES, None), (CO, COHORTS, None),
        (LQ, LOCAL_QUEUES, None), (AC, ADMISSION_CHECKS, None), (WL, WORKLOADS, None),
        (WPC, WORKLOAD_PRIORITY_CLASSES, None), (PC, PRIORITY_CLASSES, None),
        (NS, NAMESPACES, None), (LR, LIMIT_RANGES, None), (RTC, RUNTIME_CLASSES, None),
        (STS, STATEFULSETS, None if every_statefulset else QUEUE_NAME_LABEL), *job_kinds,
    ):
        infs.add(key, Informer(client, res, label_selector=selector,
                               watch_timeout_seconds=watch_timeout_seconds))
    return infs


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
