"""``Manager``: the reconciler of one pykueue process, started by ``app.main``'s lifespan.

It owns the API client, the informers (ResourceFlavor, ClusterQueue, Cohort, LocalQueue,
Workload, WorkloadPriorityClass, PriorityClass, Namespace, the managed objects of every
registered job kind, Nodes and Pods for the extender, ResourceClaimTemplates when
``resources.deviceClassMappings`` is set, MultiKueueClusters and MultiKueueConfigs), Lease
leader election, the job framework's reconciler (``app.integrations.reconciler``), the
scheduling loop (with the admission core ``app.core.scheduling_cycle.Scheduler``), the queue
status writer, the finalizer controller, the MultiKueue controller and the Event recorder.
What may not be served (an optional job kind's CRD, MultiKueue's two CRDs) is set up once
discovery says it is (``OptionalApi``): until then it has no informer, so readiness never
waits on it, and MultiKueue is off (its AdmissionChecks' ``Active`` condition False, written
by ``MultiKueueOff``, until the controller takes over). Every replica watches and serves;
only the leader writes. It is the composition root: the one module of ``app.controllers``
that imports ``app.integrations``.

What the HTTP side gets (put into ``app.state`` by ``app.main``):

- ``admission_lookup`` / ``default_queue_lookup``: ``StoreAdmissionLookup`` (webhook),
- ``extender_state``: ``StoreExtenderState`` (scheduler extender),
- ``ready()``: ``(ok, message)`` for ``/readyz`` (ok once every informer has listed),
- ``cluster``: the core, for the status API (read it on the event loop only).

Usage::

    m = Manager(settings)
    await m.start()          # returns at once; informers list in the background
    await m.wait_ready(60)   # optional: wait for the first sync
    ...
    await m.stop()           # cancels everything, gives the Lease up, closes the client
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from app.config import ClientSettings, Settings
from app.controllers.admission_lookup import StoreAdmissionLookup, StoreExtenderState
from app.controllers.finalizers import FinalizerController
from app.controllers.multikueue import MultiKueueController, MultiKueueOff
from app.controllers.queue_status import StatusWriter
from app.controllers.scheduling_loop import SchedulerLoop
from app.core.scheduling_cycle import Scheduler
from app.extender.nodestore import NodeStore
from app.integrations import default_registry
from app.integrations.framework import JobKind, Registry, source_of
from app.integrations.reconciler import JobReconciler
from app.kube.aio import wait_event
from app.kube.client import JOBS, NODES, PODS, RESOURCE_CLAIM_TEMPLATES, KubeClient, Resource
from app.kube.context import (
    AC,
    CHILD_JOB_STORES,
    CHILD_JOBS,
    CO,
    CQ,
    EMPTY_QUEUE_JOBS,
    EMPTY_QUEUE_NAME,
    JOB,
    LQ,
    LR,
    MULTIKUEUE_STORES,
    NS,
    OTHER_JOBS,
    POD,
    RCT,
    RF,
    RTC,
    UNLABELLED,
    WL,
    Context,
    build_informers,
)
from app.kube.errors import NotFound
from app.kube.events import EventRecorder
from app.kube.informers import Informer, identity_only
from app.kube.leader import LeaderElector
from app.kube.workqueue import background

log = logging.getLogger(__name__)


async def is_served(client: KubeClient, res: Resource | None) -> bool | None:
    """Whether the API server serves resource ``res`` (None: a kind without one, served),
    through discovery (``GET /apis/<group>/<version>``): True / False, None when it cannot
    tell (an error other than 404)."""
    if res is None:
        return True
    try:
        doc = await client.request("GET", f"/apis/{res.group}/{res.version}")
    except NotFound:
        return False
    except Exception as exc:  # noqa: BLE001 - unknown: the caller decides
        log.warning("reconciler: cannot tell whether %s is served (%s)", res.api_version, exc)
        return None
    return any(r.get("name") == res.plural for r in doc.get("resources") or [])


async def all_served(client: KubeClient, resources: Iterable[Resource]) -> bool:
    """Whether the API server serves every one of ``resources`` (``is_served``); an unknown
    answer counts as not served: asked again at the next poll (``Manager._await_crds``), so
    readiness never waits on the list of a kind that may not be served."""
    for res in resources:
        if not await is_served(client, res):
            return False
    return True


async def served_kinds(client: KubeClient, registry: Registry) -> Registry:
    """``registry`` without the optional kinds (``optional = True``: a CRD such as JobSet's)
    whose resource the API server does not serve (or whose answer is unknown), each left out
    with one log line, as Kueue defers an integration whose CRD is absent at start-up
    (kueue-integrations.md 1.7; the Manager then waits for it: ``Manager._await_crds``)."""
    kept = []
    for kind in registry.kinds():
        res = kind.resource
        if kind.optional and res is not None and not await all_served(client, (res,)):
            log.info("reconciler: %s %s not served by the API server (its CRD is not "
                     "installed): %s objects are not managed until it is", res.plural,
                     res.api_version, kind.kind)
            continue
        kept.append(kind)
    return Registry(kept)


@dataclass(frozen=True)
class OptionalApi:
    """What the Manager sets up only once the API server serves all of ``resources`` (their
    CRDs may not be installed): an optional job kind (one resource), or MultiKueue
    (MultiKueueClusters and MultiKueueConfigs). Left out at start when not served, no
    informer and nothing readiness waits for; ``Manager._await_crds`` asks discovery and calls
    ``add`` (start and list its informers, then wire and start what uses them), which returns
    False when the first lists did not succeed in time (asked again at the next poll)."""

    name: str
    resources: tuple[Resource, ...]
    add: Callable[[], Awaitable[bool]]


NODE = "node"
CRD_WATCH = "crd-watch"
# Kueue's wait for an integration's API: exponential backoff from 1 s to 2 min.
CRD_POLL_SECONDS = 1.0
CRD_POLL_MAX_SECONDS = 120.0
# How long a newly served kind's first list may take before it is asked again at the next poll.
CRD_SYNC_TIMEOUT_SECONDS = 30.0

STOP_BUDGET_SECONDS = 25.0
STOP_STEP_SECONDS = 10.0


def events_client(client: KubeClient, settings: ClientSettings) -> KubeClient | None:
    """The client the Event recorder writes through: with ``settings.events_bucket`` "own"
    (pykueue's opt-in) a new ``KubeClient`` on ``client``'s connection settings with a
    token bucket of ``settings.qps`` / ``settings.burst`` of its own, which the caller must
    close; with "shared" (the default; Kueue's recorder shares its manager's RateLimiter)
    None: the recorder uses ``client``, its Events background traffic there."""
    if settings.events_bucket != "own":
        return None
    return KubeClient(client.companion(settings.qps, settings.burst), settings)


class Manager:
    """The reconciler of one process; see the module doc.

    ``client``: an existing ``KubeClient`` (else one is built from ``settings.client`` and
    closed by ``stop``); ``identity``: leader-election identity; ``clock``: seconds since the
    epoch (condition timestamps, core time); ``metrics``: an
    ``app.controllers.metrics.MetricsRecorder`` for Kueue's counters (optional); ``registry``:
    the job kinds to manage (default: the ``app.integrations.BUILTIN_KINDS`` that
    ``settings.integrations.frameworks`` lists).
    """

    def __init__(self, settings: Settings, *, client: KubeClient | None = None,
                 identity: str | None = None, clock: Callable[[], float] = time.time,
                 watch_nodes: bool = True, metrics: Any = None,
                 registry: Registry | None = None) -> None:
        self.settings = settings
        self._given_client = client
        self._events_client: KubeClient | None = None
        self.identity = identity
        self.clock = clock
        self.watch_nodes = watch_nodes
        self.metrics = metrics
        self.ctx: Context | None = None
        self.cluster = Scheduler(settings.fair_sharing.core(),
                               settings.admission_fair_sharing.core(),
                               requeue_batch_s=settings.scheduling.requeue_batch_seconds,
                               order_evicted_by_eviction_time=(
                                   settings.scheduling.preempted_queue_order == "Eviction"),
                               keep_nominal_for_queue=settings.scheduling.keep_nominal_for_queue)
        self.registry = registry if registry is not None else default_registry(
            settings.integrations.frameworks)
        self.jobs: JobReconciler | None = None
        self.scheduler: SchedulerLoop | None = None
        self.status: StatusWriter | None = None
        self.finalizers: FinalizerController | None = None
        self.multikueue: MultiKueueController | None = None
        # While MultiKueue is off: the writer of its checks' Active condition (until on).
        self.multikueue_off: MultiKueueOff | None = None
        self.admission_lookup: StoreAdmissionLookup | None = None
        self.extender_state: StoreExtenderState | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._started = False
        # Background tasks that ended on their own (name -> why); /readyz fails while any.
        self.dead_tasks: dict[str, str] = {}

    # ------------------------------------------------------------------ lifecycle

    def _selector(self, kind: JobKind) -> str | None:
        """The kind's informer label selector; for a kind that takes part in
        ``jobs.manage_jobs_without_queue_name`` when that is on, its ``unlabelled_selector``
        (a Pod: those the webhook marked managed), by default none (every object)."""
        if self.settings.jobs.manage_jobs_without_queue_name \
                and kind.manages_unlabelled:
            return kind.unlabelled_selector
        return kind.label_selector

    def _other_jobs(self, client: KubeClient, kinds: Iterable[JobKind]) -> Informer | None:
        """The informer of every batch Job while the Job kind is not served
        (``integrations.frameworks`` without ``batch/job``; ``OTHER_JOBS``: read only, no
        handler, each Job kept as ``identity_only``: its name, uid and controller, all that
        ``framework.pod_of`` reads of it), or None when none is needed: the Job kind is
        served (its stores hold every Job: labelled, unlabelled and labelled with an empty
        queue name, ``CHILD_JOB_STORES``), the Pod store is not watched, or no kind in
        ``kinds`` runs pods through batch Jobs (``runs_batch_jobs``). ``framework.pod_of``
        then takes a Job no store holds for one that is gone, so a tenant's unqueued Job
        whose pods carry a JobSet's name and uid labels is read, found not to be the
        JobSet's, and holds none of its quota. Kueue v0.17.1 watches no batch Job when
        ``batch/job`` is not enabled (its JobSet, TrainJob, AppWrapper and MPIJob
        integrations watch their own kind and Workloads, TrainJob its JobSets too): it
        counts no pods for a release, which pykueue does (``jobs.deleted_quota_release``,
        the Workload finalizer)."""
        if not self.watch_nodes or self.registry.get(JOB) is not None \
                or not any(getattr(k, "runs_batch_jobs", False) for k in kinds):
            return None
        return Informer(client, JOBS, transform=identity_only,
                        watch_timeout_seconds=self.settings.scheduling.watch_timeout_seconds)

    async def start(self) -> None:
        """Build and start every component (returns without waiting for the first sync)."""
        if self._started:
            return
        self._started = True
        s = self.settings
        client = self._given_client or await KubeClient.from_settings(s.client)
        wanted = self.registry.kinds()
        self.registry = await served_kinds(client, self.registry)
        awaited = [self._optional_kind(k) for k in wanted if k not in self.registry.kinds()]
        multikueue = self._optional_multikueue()
        mk_served = await all_served(client, multikueue.resources)
        if not mk_served:
            log.info("multikueue: %s not served by the API server (their CRDs are not "
                     "installed): MultiKueue is off until they are", ", ".join(
                         f"{r.plural} {r.api_version}" for r in multikueue.resources))
            awaited.append(multikueue)
        log.info("reconciler: managing %s (settings.integrations.frameworks)",
                 ", ".join(k.kind for k in self.registry.kinds()) or "no job kind")
        informers = build_informers(
            client, s.scheduling.watch_timeout_seconds,
            job_kinds=[(k.key, k.resource, self._selector(k)) for k in self.registry.kinds()
                       if k.resource is not None],
            every_statefulset=s.jobs.manage_jobs_without_queue_name)
        for k in self.registry.kinds():
            for key, res in k.side_stores:  # type: ignore[attr-defined]
                if key not in informers.informers:
                    informers.add(key, Informer(
                        client, res, watch_timeout_seconds=s.scheduling.watch_timeout_seconds))
        job_kind = self.registry.get(JOB)
        if job_kind is not None and self._selector(job_kind) is not None:
            # Unlabelled Jobs too (a JobSet's children), and those labelled with an empty
            # queue name: held to their ancestor's admission.
            for key, selector in ((CHILD_JOBS, UNLABELLED), (EMPTY_QUEUE_JOBS, EMPTY_QUEUE_NAME)):
                informers.add(key, Informer(
                    client, JOBS, label_selector=selector,
                    watch_timeout_seconds=s.scheduling.watch_timeout_seconds))
        other_jobs = self._other_jobs(client, self.registry.kinds())
        if other_jobs is not None:
            informers.add(OTHER_JOBS, other_jobs)
        if self.watch_nodes:
            informers.add(NODE, Informer(client, NODES,
                                         watch_timeout_seconds=s.scheduling.watch_timeout_seconds))
            informers.add(POD, Informer(client, PODS,
                                        watch_timeout_seconds=s.scheduling.watch_timeout_seconds))
        if s.resources.device_classes():
            # DRA (docs/dra.md): the pods' ResourceClaimTemplates are counted in quota.
            informers.add(RCT, Informer(client, RESOURCE_CLAIM_TEMPLATES,
                                        watch_timeout_seconds=s.scheduling.watch_timeout_seconds))
        if mk_served:
            for key, res in MULTIKUEUE_STORES:
                informers.add(key, Informer(
                    client, res, watch_timeout_seconds=s.scheduling.watch_timeout_seconds))
        leader = LeaderElector(client, s.leader_election, self.identity)
        # A client handed in (a test's) serves the Events too.
        self._events_client = None if self._given_client else events_client(client, s.client)
        recorder = EventRecorder(self._events_client or client, instance=leader.identity,
                                 clock=self.clock)
        ctx = Context(settings=s, client=client, informers=informers, leader=leader,
                      recorder=recorder, clock=self.clock)
        self.ctx = ctx
        self.jobs = JobReconciler(ctx, self.registry, workers=s.scheduling.job_workers)
        self.jobs.awaited = {(k.api_group, k.kind) for k in wanted
                             if k not in self.registry.kinds()}
        self.scheduler = SchedulerLoop(ctx, self.jobs, self.cluster, metrics=self.metrics)
        self.status = StatusWriter(ctx, cluster=self.cluster,
                                   awaiting_checks=self.scheduler.lifecycle.awaiting_checks)
        self.finalizers = FinalizerController(ctx, lambda cq: len(self.cluster.admitted(cq)))
        self.admission_lookup = StoreAdmissionLookup(ctx, self.registry)
        self.extender_state = StoreExtenderState(ctx, NodeStore(s.extender.gpu_resource),
                                                 self.registry)
        if not mk_served:
            self.multikueue_off = MultiKueueOff(ctx)
            informers[AC].add_handler(self.multikueue_off.on_check)
        self._wire()
        informers.start()
        recorder.start()
        self.jobs.start()
        self.scheduler.start()
        self.status.start()
        self.finalizers.start()
        if mk_served:
            self._start_multikueue()
        else:
            assert self.multikueue_off is not None
            self.multikueue_off.start()
        self._tasks = [asyncio.create_task(leader.run(), name="leader-election"),
                       asyncio.create_task(self._activate(), name="leader-activation")]
        if awaited:
            self._tasks.append(asyncio.create_task(self._await_crds(awaited), name=CRD_WATCH))
        self._supervise()

    def _supervise(self) -> None:
        """Log the death of any long-running task and record it for ``ready()``.

        Every one of them loops until cancelled, catching API errors itself; ending any other
        way is a bug that would silently stop the reconciler (the election task alone may
        return, when election is disabled)."""
        ctx, jobs, sched, status = self.ctx, self.jobs, self.scheduler, self.status
        assert ctx and jobs and sched and status and self.finalizers
        tasks = [*ctx.informers.tasks, *jobs.tasks, *sched.tasks, *status.tasks,
                 *self.finalizers.tasks, *ctx.recorder.tasks, *self._tasks,
                 *(self.multikueue_off.tasks if self.multikueue_off else ())]
        for task in tasks:
            task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or not self._started:
            return
        exc = task.exception()
        if exc is None and task.get_name() in ("leader-election", CRD_WATCH):
            return  # both may end: election disabled; every awaited CRD installed
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "returned"
        self.dead_tasks[task.get_name()] = why
        log.error("reconciler: background task %s died (%s)", task.get_name(), why,
                  exc_info=exc)

    def _wire(self) -> None:
        ctx, sched, jobs, status, ext, fin = (self.ctx, self.scheduler, self.jobs, self.status,
                                              self.extender_state, self.finalizers)
        assert ctx and sched and jobs and status and ext and fin
        inf = ctx.informers
        feed = sched.feed

        for h in (feed.on_flavor, status.on_queue, ext.on_flavor, fin.on_flavor):
            inf[RF].add_handler(h)
        for h in (feed.on_cluster_queue, status.on_queue, fin.on_cluster_queue):
            inf[CQ].add_handler(h)
        for h in (feed.on_cohort, status.on_cohort):
            inf[CO].add_handler(h)
        for h in (feed.on_local_queue, status.on_queue):
            inf[LQ].add_handler(h)
        inf[NS].add_handler(feed.on_namespace)
        inf[LR].add_handler(feed.on_limit_range)
        inf[RTC].add_handler(feed.on_runtime_class)
        if RCT in inf.informers:
            inf[RCT].add_handler(feed.on_claim_template)
        inf[AC].add_handler(feed.on_admission_check)
        # An AdmissionCheck's status (its Active condition) is what matters: every change
        # rewrites the ClusterQueue statuses (old=None: not skipped as status-only).
        inf[AC].add_handler(lambda etype, old, new: status.on_queue(etype, None, new or old))
        for h in (feed.on_workload, jobs.on_workload, status.on_workload,
                  fin.on_workload):
            inf[WL].add_handler(h)
        feed.on_release.extend((status.on_workload, fin.on_workload))
        for kind in self.registry.kinds():
            inf[source_of(kind)].add_handler(jobs.on_object(kind))
        for key in CHILD_JOB_STORES:
            if key in inf.informers:
                inf[key].add_handler(jobs.on_child_job)
        for store in {k.made_store for k in self.registry.kinds()  # type: ignore[attr-defined]
                      if k.made_store in inf.informers}:  # type: ignore[attr-defined]
            inf[store].add_handler(jobs.on_made_object(store))
        if NODE in inf.informers:
            inf[NODE].add_handler(ext.on_node)
            inf[POD].add_handler(ext.on_pod)
            inf[POD].add_handler(feed.on_pod)
            inf[POD].add_handler(jobs.on_pod)
            inf[POD].add_handler(self.admission_lookup.pod_create.on_pod)

    async def _activate(self) -> None:
        """Whenever this process leads and is synced: re-examine every Job and Workload."""
        ctx = self.ctx
        assert ctx is not None and self.jobs is not None and self.status is not None
        assert self.finalizers is not None
        await ctx.informers.wait_synced()
        log.info("reconciler: informers synced (%s)",
                 ", ".join(f"{k}={len(i.store)}" for k, i in ctx.informers.informers.items()))
        # The objects listed at start live as long as the process: take them out of the cyclic
        # collector's generations so its full collections stop scanning them (those scans were
        # the latency tail of the extender and webhook). Acyclic garbage is still freed by
        # reference counting; only cycles among these objects would be kept.
        gc.freeze()
        while True:
            await ctx.leader.leading.wait()
            log.info("reconciler: leading as %s", ctx.leader.identity)
            self.jobs.enqueue_all()
            self.finalizers.enqueue_all()
            if self.multikueue_off is not None:
                self.multikueue_off.enqueue_all()
            self.scheduler.lifecycle.observe_all()  # timers: a new leader starts them again
            self.status.dirty_all = True
            ctx.wake()
            while ctx.leader.is_leader:
                await asyncio.sleep(0.2)

    async def _await_crds(self, apis: list[OptionalApi]) -> None:
        """Set up each of ``apis`` (optional kinds and MultiKueue, whose CRDs were not served
        at start) once the API server serves it: Kueue v0.17 waits for an integration's API
        the same way (kueue-integrations.md 1.7: its RESTMapper polled with exponential
        backoff from 1 s to 2 min, then the controller started and the integration enabled).
        Asked through discovery at ``CRD_POLL_SECONDS`` doubling up to
        ``CRD_POLL_MAX_SECONDS``."""
        pending, delay = list(apis), CRD_POLL_SECONDS
        while pending:
            await asyncio.sleep(delay)
            for api in list(pending):
                with background():  # a poll: after the admission writes (TokenBucket)
                    served = await all_served(self.ctx.client,  # type: ignore[union-attr]
                                              api.resources)
                if served and await api.add():
                    pending.remove(api)
            delay = min(delay * 2, CRD_POLL_MAX_SECONDS)

    def _optional_kind(self, kind: JobKind) -> OptionalApi:
        assert kind.resource is not None
        return OptionalApi(kind.kind, (kind.resource,), lambda: self._add_kind(kind))

    def _optional_multikueue(self) -> OptionalApi:
        return OptionalApi("MultiKueue", tuple(res for _, res in MULTIKUEUE_STORES),
                           self._add_multikueue)

    def _start_multikueue(self) -> None:
        """MultiKueue on: its controller made and started, told of every change of a
        MultiKueueCluster or MultiKueueConfig (their informers are in the set). No await: a
        change between the stores' listing and the handlers would otherwise be missed (the
        controller's first pass looks at every one anyway)."""
        ctx = self.ctx
        assert ctx is not None
        self.multikueue = MultiKueueController(ctx)
        for key, _ in MULTIKUEUE_STORES:
            ctx.informers[key].add_handler(self.multikueue.on_change)
        self.multikueue.start()
        for task in self.multikueue.tasks:
            task.add_done_callback(self._on_task_done)

    async def _listed(self, informers: list[tuple[str, Informer]]
                      ) -> list[tuple[str, Informer, asyncio.Task[None]]] | None:
        """Run ``informers`` (store key, informer) and wait up to ``CRD_SYNC_TIMEOUT_SECONDS``
        for every first list: ``(key, informer, task)`` each, not yet in the set (the caller
        adopts them), or None (stopped, the tasks awaited) when one did not list in time. When
        cancelled meanwhile (pykueue stopping) the tasks are cancelled too: no informer of an
        optional API outlives the Manager."""
        started = []
        for key, inf in informers:
            task = asyncio.create_task(inf.run(), name=f"informer-{key}")
            task.add_done_callback(self._on_task_done)
            started.append((key, inf, task))
        synced = False
        try:
            synced = all(await asyncio.gather(*(
                wait_event(inf.synced, CRD_SYNC_TIMEOUT_SECONDS) for _, inf, _ in started)))
        finally:
            if not synced:  # not listed in time, or stopping meanwhile
                for _, _, task in started:
                    task.cancel()
        if not synced:
            await asyncio.gather(*(t for _, _, t in started), return_exceptions=True)
            return None
        return started

    async def _add_multikueue(self) -> bool:
        """MultiKueue on once its CRDs are served (both): the MultiKueueCluster and
        MultiKueueConfig informers list, then join the set, the writer of the checks' Active
        condition while off (``MultiKueueOff``) is stopped and the controller starts (its
        first pass at once; it owns that condition from then on); one log line. False
        (informers stopped, asked again at the next poll) when either list does not succeed
        within ``CRD_SYNC_TIMEOUT_SECONDS``."""
        ctx = self.ctx
        assert ctx is not None
        started = await self._listed([(key, Informer(
            ctx.client, res, watch_timeout_seconds=self.settings.scheduling.watch_timeout_seconds))
            for key, res in MULTIKUEUE_STORES])
        if started is None:
            log.warning("multikueue: its CRDs are served but not listed within %.0f s: "
                        "MultiKueue is still off", CRD_SYNC_TIMEOUT_SECONDS)
            return False
        if self.multikueue_off is not None:
            # One writer of the checks' Active condition: the off one is done (nothing
            # written after this) before the controller starts.
            await self.multikueue_off.stop()
            self.multikueue_off = None
        # No await from here on (``_start_multikueue``).
        for key, inf, task in started:
            ctx.informers.adopt(key, inf, task)
        self._start_multikueue()
        log.info("multikueue: %s now served (their CRDs were installed): MultiKueue is on "
                 "(%s listed)", ", ".join(f"{r.plural} {r.api_version}"
                                         for _, r in MULTIKUEUE_STORES),
                 ", ".join(f"{len(inf.store)} {inf.resource.plural}" for _, inf, _ in started))
        return True

    async def _add_kind(self, kind: JobKind) -> bool:
        """Watch and reconcile ``kind`` from now on: its informer lists first, then joins the
        set (so the stores stay synced for the webhook and extender meanwhile), the registry
        takes the kind (the webhook's managed-owner rules and Workload owners see it) and its
        objects are queued for the reconciler; one log line. False (informer stopped, asked
        again at the next poll) when the list does not succeed within
        ``CRD_SYNC_TIMEOUT_SECONDS`` (CRD removed again, list forbidden), so one such kind
        does not keep the others waiting."""
        ctx, jobs = self.ctx, self.jobs
        assert ctx is not None and jobs is not None and kind.resource is not None
        inf = Informer(ctx.client, kind.resource, label_selector=self._selector(kind),
                       watch_timeout_seconds=self.settings.scheduling.watch_timeout_seconds)
        wanted = [(kind.key, inf)]
        if OTHER_JOBS not in ctx.informers.informers:
            other_jobs = self._other_jobs(ctx.client, [kind])
            if other_jobs is not None:  # its pods may run through Jobs no store holds yet
                wanted.append((OTHER_JOBS, other_jobs))
        listed = await self._listed(wanted)
        if listed is None:
            log.warning("reconciler: %s %s served but not listed within %.0f s: %s objects are "
                        "not managed yet", kind.resource.plural, kind.resource.api_version,
                        CRD_SYNC_TIMEOUT_SECONDS, kind.kind)
            return False
        for key, res in kind.side_stores:  # type: ignore[attr-defined]
            if key not in ctx.informers.informers:
                side = Informer(ctx.client, res, watch_timeout_seconds=self.settings.scheduling
                                .watch_timeout_seconds)
                side_task = asyncio.create_task(side.run(), name=f"informer-{key}")
                side_task.add_done_callback(self._on_task_done)
                try:
                    await wait_event(side.synced, CRD_SYNC_TIMEOUT_SECONDS)
                except asyncio.CancelledError:
                    side_task.cancel()
                    for _, _, task in listed:
                        task.cancel()
                    raise
                ctx.informers.adopt(key, side, side_task)
                if key == kind.made_store:  # type: ignore[attr-defined]
                    side.add_handler(jobs.on_made_object(key))
        # No await from here on: no event falls between the store's listing and the handler.
        for key, informer, task in listed:
            ctx.informers.adopt(key, informer, task)
        self.registry.register(kind)
        jobs.awaited.discard((kind.api_group, kind.kind))
        inf.add_handler(jobs.on_object(kind))
        jobs.enqueue_all()
        log.info("reconciler: %s %s now served (its CRD was installed): managing %s objects "
                 "(%d listed)", kind.resource.plural, kind.resource.api_version, kind.kind,
                 len(inf.store.list()))
        return True

    async def stop(self) -> None:
        """Stop every task, release the Lease, close the client (idempotent)."""
        if not self._started or self.ctx is None:
            return
        self._started = False
        ctx = self.ctx
        # Shutdown is bounded (a pod gets 30 s between SIGTERM and SIGKILL): each step gets what
        # is left of STOP_BUDGET_SECONDS, at most STOP_STEP_SECONDS, and a step that does not
        # finish in time (a request stuck in flight) is abandoned with a warning.
        deadline = time.monotonic() + STOP_BUDGET_SECONDS

        async def step(what: str, coro: Any) -> None:
            left = max(0.5, min(STOP_STEP_SECONDS, deadline - time.monotonic()))
            try:
                await asyncio.wait_for(coro, left)
            except TimeoutError:
                log.warning("stop: %s did not finish within %.1fs; abandoned", what, left)
            except Exception as exc:  # noqa: BLE001 - stopping must go on
                log.warning("stop: %s failed: %s", what, exc)

        for t in self._tasks:
            t.cancel()
        await step("background tasks", asyncio.gather(*self._tasks, return_exceptions=True))
        self._tasks.clear()
        for name, comp in (("scheduler", self.scheduler), ("status", self.status),
                           ("finalizers", self.finalizers), ("multikueue", self.multikueue),
                           ("multikueue-off", self.multikueue_off),
                           ("jobs", self.jobs)):
            if comp is not None:
                await step(name, comp.stop())
        await step("informers", ctx.informers.stop())
        await step("event recorder", ctx.recorder.stop())
        if self._events_client is not None:
            await step("event client", self._events_client.close())
            self._events_client = None
        await step("lease release", ctx.leader.release())
        if self._given_client is None:
            await step("client", ctx.client.close())

    # ------------------------------------------------------------------ readiness

    def ready(self) -> tuple[bool, str]:
        """``/readyz`` check: ready once every informer has listed."""
        if self.ctx is None:
            return False, "reconciler not started"
        if self.dead_tasks:
            return False, "reconciler: background tasks died: " + ", ".join(
                f"{k} ({v})" for k, v in sorted(self.dead_tasks.items()))
        waiting = [k for k, i in self.ctx.informers.informers.items() if not i.synced.is_set()]
        if waiting:
            return False, "reconciler: waiting for informers: " + ", ".join(waiting)
        role = "leader" if self.ctx.leader.is_leader else "follower"
        return True, f"reconciler: synced ({role} {self.ctx.leader.identity})"

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every informer has synced (``asyncio.TimeoutError`` on timeout)."""
        assert self.ctx is not None, "start() first"
        await self.ctx.informers.wait_synced(timeout)

    @property
    def is_leader(self) -> bool:
        return bool(self.ctx and self.ctx.leader.is_leader)
