"""ClusterQueue, LocalQueue and Cohort status, coalesced (Kueue v1beta2, reference 1.2, 1.4,
5.2), written from the admission core's one usage tally (``app.controllers.cluster_view``
``ClusterView``, which the status API and the metrics read too): the CRD status, the API and
``/metrics`` cannot disagree, and a flush parses no object.

``StatusWriter`` marks queues dirty from Workload and queue events and writes, at most every
``Settings.scheduling.status_flush_seconds`` and only for queues whose status changed (and
only on the leader), a merge patch of the ``status`` subresource:

- ClusterQueue: ``pendingWorkloads`` (queued + inadmissible), ``reservingWorkloads`` (holding
  quota, admission writes in flight included), ``admittedWorkloads`` (admission stored),
  ``flavorsReservation`` / ``flavorsUsage`` (reserving / admitted usage; every flavor and
  resource of the spec, then any other in use; ``borrowed`` = usage above nominalQuota,
  always 0 without a cohort), condition ``Active`` (Ready "Can admit new workloads", or the
  core's reason and message: a configuration problem, ``Stopped``, a cohort cycle) and, with
  fair sharing on, ``fairSharing.weightedShare``.
- LocalQueue: the same counters, ``flavorsReservation`` / ``flavorsUsage`` with ``total``
  only (in its ClusterQueue's flavor order), condition ``Active`` (Ready "Can submit new
  workloads to localQueue", ClusterQueueDoesNotExist, ClusterQueueIsInactive, Stopped) and,
  when its ClusterQueue uses Admission Fair Sharing, ``fairSharing.admissionFairSharingStatus``
  (``consumedResources``, ``lastUpdate``: the core's ledger, rewritten after each sample).
- Cohort objects: ``flavorsUsage`` (subtree quota, usage, borrowed), ``Active`` and, with
  fair sharing, ``fairSharing.weightedShare``; rewritten when a ClusterQueue's status is
  and when a Cohort object changes (a Cohort with no ClusterQueue yet gets its status too).

A ClusterQueue asking for Admission Fair Sharing while pykueue's ``admission_fair_sharing``
setting is off admits first come, first served as Kueue does then; a Warning Event
``AdmissionFairSharingDisabled`` on it says so.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
from collections.abc import Collection, Mapping
from typing import Any

from app.controllers.cluster_view import ClusterQueueView, ClusterView, LocalQueueView
from app.core.quantity import format_quantity
from app.core.quota_state import CohortStatus, FlavorResourceStatus, LocalQueueFairSharing
from app.core.scheduling_cycle import Scheduler
from app.core.types import ClusterQueueName, CohortName, FlavorResource, WorkloadKey
from app.kube.client import CLUSTER_QUEUES, COHORTS, LOCAL_QUEUES, MERGE_PATCH
from app.kube.context import CO, CQ, LQ, Context
from app.kube.errors import NotFound, from_exception
from app.kube.events import WARNING
from app.kube.workqueue import background
from app.wire.fields import Obj
from app.wire.queues import cohort_of, consumed_resources
from app.wire.workload_status import rfc3339, set_condition

log = logging.getLogger(__name__)



# ----------------------------------------------------------------------------- builders


def _flavor_list(resources: tuple[FlavorResourceStatus, ...],
                 usage: Mapping[FlavorResource, int] | None, *, borrowed: bool,
                 cohort: bool = False) -> list[Obj]:
    """Kueue's ``[{name: flavor, resources: [{name, total[, borrowed]}]}]`` in the order of
    ``resources`` (the core's: the spec's, then others in use). ``usage``: the totals to show
    (None: each entry's own usage); ``borrowed``: add the usage above nominal, 0 outside a
    ``cohort`` (Kueue ClusterQueue ``flavorsReservation[].resources[].borrowed``)."""
    by_flavor: dict[str, list[Obj]] = {}
    for r in resources:
        total = r.usage if usage is None else usage.get(FlavorResource(r.flavor, r.resource), 0)
        entry: Obj = {"name": r.resource, "total": format_quantity(max(0, total), r.resource)}
        if borrowed:
            over = max(0, total - r.nominal) if cohort else 0
            entry["borrowed"] = format_quantity(over, r.resource)
        by_flavor.setdefault(r.flavor, []).append(entry)
    return [{"name": f, "resources": rs} for f, rs in by_flavor.items()]


def _conditions(obj: Obj) -> list[Obj]:
    return copy.deepcopy((obj.get("status") or {}).get("conditions") or [])


def cluster_queue_status(obj: Obj, view: ClusterQueueView, now: float) -> Obj:
    """The ``status`` to write for ClusterQueue ``obj`` from the core's view of it
    (conditions merged into the current ones)."""
    st = view.status
    cohort = st.cohort is not None
    status: Obj = {
        "pendingWorkloads": st.pending,
        "reservingWorkloads": view.reserving,
        "admittedWorkloads": view.admitted,
        "flavorsReservation": _flavor_list(st.resources, None, borrowed=True, cohort=cohort),
        "flavorsUsage": _flavor_list(st.resources, view.admitted_usage, borrowed=True,
                                     cohort=cohort),
        "conditions": _conditions(obj),
    }
    holder = {"status": status, "metadata": obj.get("metadata") or {}}
    set_condition(holder, "Active", "True" if st.active else "False", st.reason, st.message, now)
    return status


def local_queue_status(obj: Obj, view: LocalQueueView, cq: ClusterQueueView | None,
                       now: float, afs: LocalQueueFairSharing | None = None) -> Obj:
    """The ``status`` to write for LocalQueue ``obj`` from the core's view of it and of its
    ClusterQueue (``cq``, None when that does not exist); ``afs``: its Admission Fair
    Sharing ledger when its ClusterQueue uses it (Kueue
    ``status.fairSharing.admissionFairSharingStatus``)."""
    resources = cq.resources if cq is not None else ()
    shown = {FlavorResource(r.flavor, r.resource) for r in resources}
    extra = tuple(FlavorResourceStatus(fr.flavor, fr.resource, 0, None, None, v, 0, 0, 0)
                  for fr, v in sorted(view.usage.items()) if fr not in shown and v)
    status: Obj = {
        "pendingWorkloads": view.pending,
        "reservingWorkloads": view.reserving,
        "admittedWorkloads": view.admitted,
        "flavorsReservation": _flavor_list(resources + extra, view.usage, borrowed=False),
        "flavorsUsage": _flavor_list(resources + extra, view.admitted_usage, borrowed=False),
        "conditions": _conditions(obj),
    }
    if afs is not None:
        status["fairSharing"] = {"admissionFairSharingStatus": {
            "consumedResources": consumed_resources(afs.consumed),
            "lastUpdate": rfc3339(afs.last_update if afs.last_update is not None else now),
        }}
    holder = {"status": status, "metadata": obj.get("metadata") or {}}
    set_condition(holder, "Active", "True" if view.active else "False", view.reason,
                  view.message, now)
    return status


INT64_MAX = 2**63 - 1
_AFS_OFF = ("spec.admissionScope.admissionMode UsageBasedAdmissionFairSharing has no effect: "
            "Admission Fair Sharing is not enabled in pykueue's configuration "
            "(PYKUEUE_ADMISSION_FAIR_SHARING__ENABLE, Kueue's admissionFairSharing); workloads "
            "are admitted in plain queue order")


def weighted_share(share: float) -> int:
    """Kueue ``status.fairSharing.weightedShare``: ceil of the share, int64 max when
    infinite (weight 0 while borrowing)."""
    return INT64_MAX if math.isinf(share) else math.ceil(share)


def cohort_status(obj: Obj, st: CohortStatus | None, share: float | None, now: float) -> Obj:
    """The ``status`` to write for Cohort ``obj`` from the core's view of it: condition
    ``Active``, per-flavor ``subtreeQuota`` / ``total`` / ``borrowed`` of its subtree, and
    ``fairSharing.weightedShare`` when fair sharing is on (``share`` not None)."""
    by_flavor: dict[str, list[Obj]] = {}
    for r in st.resources if st is not None else ():
        by_flavor.setdefault(r.flavor, []).append({
            "name": r.resource,
            "subtreeQuota": format_quantity(r.subtree_quota, r.resource),
            "total": format_quantity(r.usage, r.resource),
            "borrowed": format_quantity(r.borrowed, r.resource),
        })
    status: Obj = {
        "flavorsUsage": [{"name": f, "resources": rs} for f, rs in by_flavor.items()],
        "conditions": copy.deepcopy((obj.get("status") or {}).get("conditions") or []),
    }
    if share is not None:
        status["fairSharing"] = {"weightedShare": weighted_share(share)}
    holder = {"status": status, "metadata": obj.get("metadata") or {}}
    if st is None or st.active:
        set_condition(holder, "Active", "True", "Ready", "Cohort can lend and borrow", now)
    else:
        set_condition(holder, "Active", "False", st.reason, st.message, now)
    return status


def _same_but_status(old: Obj, new: Obj) -> bool:
    """True when only ``status`` (and bookkeeping metadata) differs between two versions."""
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    return (old.get("spec") == new.get("spec")
            and all(om.get(k) == nm.get(k) for k in ("labels", "annotations",
                                                    "deletionTimestamp", "finalizers")))


def _same(current: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    cur = dict(current or {})
    return all(cur.get(k) == v for k, v in new.items())


# ----------------------------------------------------------------------------- writer


class StatusWriter:
    """Coalesces queue status writes (see the module doc). ``writes``: patches sent.
    ``dirty_cqs`` / ``dirty_lqs``: queues to rewrite at the next flush (``dirty_all``: every
    queue, after a queue event or a lost write)."""

    def __init__(self, ctx: Context, cluster: Scheduler, *,
                 awaiting_checks: Collection[WorkloadKey] = frozenset()) -> None:
        """``awaiting_checks``: the live set of Workloads holding quota whose admission
        checks are not all Ready (``Lifecycle.awaiting_checks``): reserving, not admitted."""
        self.ctx = ctx
        self.cluster = cluster
        self.view = ClusterView(cluster, awaiting_checks=awaiting_checks)
        self.writes = 0
        self.dirty_cqs: set[str] = set()
        self.dirty_lqs: set[str] = set()
        self.dirty_all = True
        # A Cohort object changed: rewrite every Cohort status even when no ClusterQueue's is.
        self.dirty_cohorts = True
        # Admission Fair Sharing: the ledger time last written per LocalQueue.
        self._afs_written: dict[str, float | None] = {}
        self._task: asyncio.Task[None] | None = None

    # handlers
    def on_workload(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """A Workload changed: its LocalQueue and the ClusterQueue of its admission (old
        and new) are rewritten at the next flush."""
        for obj in (old, new):
            if obj is None:
                continue
            ns = (obj.get("metadata") or {}).get("namespace", "")
            queue = (obj.get("spec") or {}).get("queueName")
            if queue:
                self.dirty_lqs.add(f"{ns}/{queue}")
            cq = ((obj.get("status") or {}).get("admission") or {}).get("clusterQueue")
            if cq:
                self.dirty_cqs.add(str(cq))

    def on_queue(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """A queue, Cohort or ResourceFlavor changed: every queue is rewritten at the next
        flush, except after a change of ``status`` only (this writer's own patches)."""
        if old is not None and new is not None and _same_but_status(old, new):
            return
        self.dirty_all = True

    def on_cohort(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """A Cohort object changed: every queue and every Cohort status is rewritten at the
        next flush (a new Cohort gets its status even before a ClusterQueue joins it)."""
        if old is not None and new is not None and _same_but_status(old, new):
            return
        self.dirty_all = True
        self.dirty_cohorts = True

    def mark_fair_sharing(self) -> None:
        """Mark the LocalQueues whose Admission Fair Sharing ledger was folded since their
        status was written (a sample happens without any Workload event)."""
        core = self.cluster
        if core.admission_fair_sharing is None:
            return
        for key in core.local_queue_keys():
            st = core.local_queue_fair_sharing(key)
            if st is not None and self._afs_written.get(key, -1.0) != st.last_update:
                self.dirty_lqs.add(key)

    @property
    def dirty(self) -> bool:
        return self.dirty_all or self.dirty_cohorts or bool(self.dirty_cqs or self.dirty_lqs)

    async def flush(self) -> int:
        """Write every changed queue status now; returns the number of writes."""
        ctx, view = self.ctx, self.view
        now = ctx.clock()
        if self.dirty_all:
            cqs, lqs = set(ctx.store(CQ).keys()), set(ctx.store(LQ).keys())
        else:
            cqs, lqs = set(self.dirty_cqs), set(self.dirty_lqs)
        self.dirty_all = False
        self.dirty_cqs.clear()
        self.dirty_lqs.clear()
        for key in lqs:  # a pending Workload counts in its LocalQueue's ClusterQueue
            lq = self.cluster.local_queue(key)
            if lq is not None:
                cqs.add(lq.cluster_queue)
        core = self.cluster
        cq_views: dict[str, ClusterQueueView | None] = {}
        n = 0
        for name in sorted(cqs):
            obj = ctx.store(CQ).get(name)
            v = cq_views[name] = view.cluster_queue(ClusterQueueName(name))
            if obj is None or v is None:
                continue
            _, warn = cohort_of(obj.get("spec") or {})
            if warn:
                ctx.recorder.emit(obj, WARNING, "DeprecatedField", warn)
            mode = ((obj.get("spec") or {}).get("admissionScope") or {}).get("admissionMode")
            if mode == "UsageBasedAdmissionFairSharing" and core.admission_fair_sharing is None:
                ctx.recorder.emit(obj, WARNING, "AdmissionFairSharingDisabled", _AFS_OFF)
            status = cluster_queue_status(obj, v, now)
            if core.fair_sharing is not None and core.tree.has(name):
                status["fairSharing"] = {"weightedShare": weighted_share(core.tree.share(name))}
            n += await self._write(CLUSTER_QUEUES, obj, status)
        if cqs or self.dirty_cohorts:
            self.dirty_cohorts = False
            n += await self._flush_cohorts(now)
        pending_by_cq: dict = {}
        for key in sorted(lqs):
            obj = ctx.store(LQ).get(key)
            ns, _, name = key.partition("/")
            lv = view.local_queue(ns, name, pending_by_cq)
            if obj is None or lv is None:
                continue
            if lv.cluster_queue not in cq_views:
                cq_views[lv.cluster_queue] = view.cluster_queue(lv.cluster_queue)
            afs = core.local_queue_fair_sharing(key)
            status = local_queue_status(obj, lv, cq_views[lv.cluster_queue], now, afs)
            n += await self._write(LOCAL_QUEUES, obj, status)
            if afs is not None:
                self._afs_written[key] = afs.last_update
        return n

    async def _flush_cohorts(self, now: float) -> int:
        """Write the status of every Cohort object whose view changed (any ClusterQueue
        change can move a subtree's usage)."""
        core = self.cluster
        n = 0
        for obj in list(self.ctx.store(CO)):
            name = CohortName(obj["metadata"]["name"])
            share = (core.tree.cohort_share(name)
                     if core.fair_sharing is not None and core.tree.has_cohort(name) else None)
            status = cohort_status(obj, core.cohort_status(name), share, now)
            n += await self._write(COHORTS, obj, status, CO)
        return n

    async def _write(self, res: Any, obj: Obj, status: Obj, store_key: str | None = None) -> int:
        if _same(obj.get("status"), status):
            return 0
        meta = obj["metadata"]
        try:
            out = await self.ctx.client.patch(res, meta["name"], {"status": status},
                                              meta.get("namespace"), content_type=MERGE_PATCH,
                                              subresource="status")
        except NotFound:
            return 0
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        store = self.ctx.store(store_key or (LQ if meta.get("namespace") else CQ))
        if store.get(key) is not None:
            store.put(out)
        self.writes += 1
        return 1

    async def run(self) -> None:
        """Flush every ``status_flush_seconds`` as background traffic (``background``: after
        the admission writes waiting for a token, at most ``background_max_wait_seconds``
        behind them)."""
        with background():
            await self._run()

    async def _run(self) -> None:
        interval = self.ctx.settings.scheduling.status_flush_seconds
        while True:
            await asyncio.sleep(interval)
            if not self.ctx.may_write:
                self.dirty_all = True
                continue
            self.mark_fair_sharing()
            if not self.dirty:
                continue
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001
                self.dirty_all = True
                log.warning("queue status flush failed: %s", from_exception(exc))

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The flush task, when running."""
        return [self._task] if self._task is not None else []

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="queue-status")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
