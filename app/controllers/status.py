"""ClusterQueue and LocalQueue status, coalesced (Kueue v1beta2, reference 1.2, 1.4, 5.2).

``QueueStats`` is fed by the Workload informer handler and keeps, per Workload, its
contribution (pending in a LocalQueue, or reserving/admitted in a ClusterQueue with its
usage per flavor and resource); totals are updated incrementally, so a flush costs
O(queues x flavors), not O(workloads). Finished Workloads count nowhere.

``StatusWriter`` writes, at most every ``Settings.scheduling.status_flush_seconds`` and only
for queues whose status changed (and only on the leader), with a merge patch of the
``status`` subresource:

- ClusterQueue: ``pendingWorkloads``, ``reservingWorkloads``, ``admittedWorkloads``,
  ``flavorsReservation`` / ``flavorsUsage`` (every flavor and resource of the spec, then any
  other in use; ``total`` and ``borrowed`` = usage above nominalQuota, always 0 without a
  cohort), condition ``Active`` (Ready "Can admit new workloads", or the configuration
  problem's reason and message).
- LocalQueue: the same counters, ``flavorsReservation`` / ``flavorsUsage`` with ``total``
  only, condition ``Active`` (Ready "Can submit new workloads to localQueue",
  ClusterQueueDoesNotExist, ClusterQueueIsInactive, Stopped).
- With the core given (``cluster``): a ClusterQueue below a cycle of Cohorts (or an invalid
  Cohort) is ``Active=False`` with the core's reason (``CohortCycle``); with fair sharing on,
  ``fairSharing.weightedShare``; and each Cohort object gets ``flavorsUsage`` (subtree quota,
  usage, borrowed), ``Active`` and, with fair sharing, ``fairSharing.weightedShare``.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from app.controllers.client import CLUSTER_QUEUES, COHORTS, LOCAL_QUEUES, MERGE_PATCH
from app.controllers.context import CO, CQ, LQ, RF, Context
from app.controllers.errors import NotFound, from_exception
from app.controllers.events import WARNING
from app.controllers.workloads import ADMITTED, has_admission, is_finished, is_true, set_condition
from app.core.cluster import CohortStatus
from app.core.quantity import QuantityError, format_quantity, parse_quantity
from app.core.scheduler import Cluster
from app.core.spec import ClusterQueueSpec, ConfigProblem, validate_cluster_queue
from app.core.types import CohortName
from app.wire.fields import WorkloadSpecError
from app.wire.queues import cluster_queue, cohort_of, resource_flavor

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Usage = dict[tuple[str, str], int]  # (flavor, resource) -> amount


def workload_usage(wl: Mapping[str, Any]) -> Usage:
    """Sum of ``status.admission.podSetAssignments[].resourceUsage`` by (flavor, resource)."""
    out: Usage = defaultdict(int)
    adm = (wl.get("status") or {}).get("admission") or {}
    for psa in adm.get("podSetAssignments") or []:
        flavors = psa.get("flavors") or {}
        for res, q in (psa.get("resourceUsage") or {}).items():
            flavor = flavors.get(res)
            if flavor is None:
                continue
            try:
                out[(flavor, res)] += parse_quantity(q, res)
            except QuantityError:
                continue
    return dict(out)


class _Totals:
    __slots__ = ("pending", "reserving", "admitted", "reserved", "used")

    def __init__(self) -> None:
        self.pending = 0
        self.reserving = 0
        self.admitted = 0
        self.reserved: Usage = defaultdict(int)
        self.used: Usage = defaultdict(int)

    def add(self, c: _Contribution, sign: int) -> None:
        if c.pending:
            self.pending += sign
            return
        self.reserving += sign
        for k, v in c.usage.items():
            self.reserved[k] += sign * v
        if c.admitted:
            self.admitted += sign
            for k, v in c.usage.items():
                self.used[k] += sign * v


class _Contribution:
    __slots__ = ("lq", "cq", "pending", "admitted", "usage")

    def __init__(self, lq: str, cq: str, pending: bool, admitted: bool, usage: Usage) -> None:
        self.lq, self.cq, self.pending, self.admitted, self.usage = lq, cq, pending, admitted, usage


class QueueStats:
    """Incremental per-queue counters and usage (see the module doc). ``dirty_cqs`` /
    ``dirty_lqs``: queues to rewrite at the next flush."""

    def __init__(self) -> None:
        self._by_wl: dict[str, _Contribution] = {}
        self.cq: dict[str, _Totals] = defaultdict(_Totals)
        self.lq: dict[str, _Totals] = defaultdict(_Totals)
        self.dirty_cqs: set[str] = set()
        self.dirty_lqs: set[str] = set()
        self.dirty_all = True

    @staticmethod
    def contribution(wl: Mapping[str, Any]) -> _Contribution | None:
        if is_finished(wl):
            return None
        meta = wl.get("metadata") or {}
        lq = f"{meta.get('namespace')}/{(wl.get('spec') or {}).get('queueName', '')}"
        if has_admission(wl):
            cq = str(wl["status"]["admission"].get("clusterQueue", ""))
            return _Contribution(lq, cq, False, is_true(wl, ADMITTED), workload_usage(wl))
        if (wl.get("spec") or {}).get("active", True) is False:
            return None
        return _Contribution(lq, "", True, False, {})

    def update(self, key: str, wl: Mapping[str, Any] | None) -> None:
        """Record the Workload ``key``'s current object (``None`` when deleted)."""
        old = self._by_wl.pop(key, None)
        if old is not None:
            self._apply(old, -1)
        new = self.contribution(wl) if wl is not None else None
        if new is not None:
            self._by_wl[key] = new
            self._apply(new, +1)

    def _apply(self, c: _Contribution, sign: int) -> None:
        # A pending Workload counts in its LocalQueue's ClusterQueue: the flush maps dirty
        # LocalQueues to their ClusterQueues.
        self.lq[c.lq].add(c, sign)
        self.dirty_lqs.add(c.lq)
        if c.cq:
            self.cq[c.cq].add(c, sign)
            self.dirty_cqs.add(c.cq)

    def pending_of_cq(self, cq: str, lq_to_cq: Mapping[str, str]) -> int:
        return sum(t.pending for lq, t in self.lq.items() if lq_to_cq.get(lq) == cq)


# ----------------------------------------------------------------------------- builders


def _flavor_list(spec: ClusterQueueSpec, usage: Usage, nominal: Mapping[tuple[str, str], int],
                 *, borrowed: bool, cohort: bool) -> list[Obj]:
    order: list[tuple[str, str]] = []
    for g in spec.resource_groups:
        for f in g.flavors:
            for rq in f.resources:
                order.append((f.name, rq.name))
    for k in sorted(usage):
        if k not in order and usage[k]:
            order.append(k)
    by_flavor: dict[str, list[Obj]] = {}
    for flavor, res in order:
        total = max(0, usage.get((flavor, res), 0))
        entry: Obj = {"name": res, "total": format_quantity(total, res)}
        if borrowed:
            over = max(0, total - nominal.get((flavor, res), 0)) if cohort else 0
            entry["borrowed"] = format_quantity(over, res)
        by_flavor.setdefault(flavor, []).append(entry)
    return [{"name": f, "resources": rs} for f, rs in by_flavor.items()]


def cluster_queue_status(obj: Obj, totals: _Totals, pending: int,
                         problem: ConfigProblem | None, now: float) -> Obj:
    """The ``status`` to write for ClusterQueue ``obj`` (conditions merged into the current)."""
    spec, parse_problem = cluster_queue(obj)
    problem = parse_problem or problem
    nominal = {(fr.flavor, fr.resource): q.nominal for fr, q in spec.quotas.items()}
    cohort = spec.cohort is not None
    status: Obj = {
        "pendingWorkloads": pending,
        "reservingWorkloads": totals.reserving,
        "admittedWorkloads": totals.admitted,
        "flavorsReservation": _flavor_list(spec, totals.reserved, nominal, borrowed=True,
                                           cohort=cohort),
        "flavorsUsage": _flavor_list(spec, totals.used, nominal, borrowed=True, cohort=cohort),
        "conditions": copy.deepcopy((obj.get("status") or {}).get("conditions") or []),
    }
    holder = {"status": status, "metadata": obj.get("metadata") or {}}
    if problem is None:
        set_condition(holder, "Active", "True", "Ready", "Can admit new workloads", now)
    else:
        set_condition(holder, "Active", "False", problem.reason, problem.message, now)
    return status


def local_queue_status(obj: Obj, totals: _Totals, cq_obj: Obj | None, cq_active: bool,
                       cq_spec: ClusterQueueSpec | None, now: float) -> Obj:
    """The ``status`` to write for LocalQueue ``obj``."""
    spec = cq_spec or ClusterQueueSpec(name="")  # type: ignore[arg-type]
    status: Obj = {
        "pendingWorkloads": totals.pending,
        "reservingWorkloads": totals.reserving,
        "admittedWorkloads": totals.admitted,
        "flavorsReservation": _flavor_list(spec, totals.reserved, {}, borrowed=False,
                                           cohort=False),
        "flavorsUsage": _flavor_list(spec, totals.used, {}, borrowed=False, cohort=False),
        "conditions": copy.deepcopy((obj.get("status") or {}).get("conditions") or []),
    }
    holder = {"status": status, "metadata": obj.get("metadata") or {}}
    stop = (obj.get("spec") or {}).get("stopPolicy") or "None"
    if stop != "None":
        set_condition(holder, "Active", "False", "Stopped", "LocalQueue is stopped", now)
    elif cq_obj is None:
        set_condition(holder, "Active", "False", "ClusterQueueDoesNotExist",
                      "Can't submit new workloads to clusterQueue", now)
    elif not cq_active:
        set_condition(holder, "Active", "False", "ClusterQueueIsInactive",
                      "Can't submit new workloads to clusterQueue", now)
    else:
        set_condition(holder, "Active", "True", "Ready", "Can submit new workloads to localQueue",
                      now)
    return status


INT64_MAX = 2**63 - 1


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


def _same(current: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    cur = dict(current or {})
    return all(cur.get(k) == v for k, v in new.items())


# ----------------------------------------------------------------------------- writer


class StatusWriter:
    """Coalesces queue status writes (see the module doc). ``writes``: patches sent."""

    def __init__(self, ctx: Context, stats: QueueStats | None = None,
                 cluster: Cluster | None = None) -> None:
        self.ctx = ctx
        self.stats = stats or QueueStats()
        # The admission core, for what only it knows: cohort-tree problems, Cohort status
        # (subtree quota and usage), fair-sharing shares. None: ClusterQueues and
        # LocalQueues only, from the stores.
        self.cluster = cluster
        self.writes = 0
        self._task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()

    # handlers
    def on_workload(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        if obj is None:
            return
        meta = obj["metadata"]
        self.stats.update(f"{meta['namespace']}/{meta['name']}", new)

    def on_queue(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        self.stats.dirty_all = True

    def problems(self, names: set[str]) -> dict[str, ConfigProblem | None]:
        """Configuration problem (or None) of the named ClusterQueues that exist."""
        flavors = {}
        for o in self.ctx.store(RF):
            try:
                flavors[o["metadata"]["name"]] = resource_flavor(o)
            except WorkloadSpecError:
                continue  # read as absent, as the scheduler does

        out: dict[str, ConfigProblem | None] = {}
        for name in names:
            obj = self.ctx.store(CQ).get(name)
            if obj is not None:
                spec, bad = cluster_queue(obj)
                out[name] = bad or validate_cluster_queue(spec, flavors)  # type: ignore[arg-type]
                if out[name] is None and self.cluster is not None:
                    out[name] = self.cluster.cohort_problem(spec.cohort)
        return out

    async def flush(self) -> int:
        """Write every changed queue status now; returns the number of writes."""
        ctx = self.ctx
        st = self.stats
        now = ctx.clock()
        if st.dirty_all:
            cqs = set(ctx.store(CQ).keys())
            lqs = set(ctx.store(LQ).keys())
        else:
            cqs, lqs = set(st.dirty_cqs), set(st.dirty_lqs)
        st.dirty_all = False
        st.dirty_cqs.clear()
        st.dirty_lqs.clear()
        lq_to_cq = {f"{o['metadata']['namespace']}/{o['metadata']['name']}":
                    str((o.get("spec") or {}).get("clusterQueue", "")) for o in ctx.store(LQ)}
        for name, lq in lq_to_cq.items():
            if name in lqs:
                cqs.add(lq)
        problems = self.problems(cqs | {lq_to_cq.get(k, "") for k in lqs})
        n = 0
        for name in sorted(cqs):
            obj = ctx.store(CQ).get(name)
            if obj is None:
                continue
            _, warn = cohort_of(obj.get("spec") or {})
            if warn:
                ctx.recorder.emit(obj, WARNING, "DeprecatedField", warn)
            status = cluster_queue_status(obj, st.cq[name], st.pending_of_cq(name, lq_to_cq),
                                          problems.get(name), now)
            core = self.cluster
            if core is not None and core.fair_sharing is not None and core.tree.has(name):
                status["fairSharing"] = {"weightedShare": weighted_share(core.tree.share(name))}
            n += await self._write(CLUSTER_QUEUES, obj, status)
        if self.cluster is not None and cqs:
            n += await self._flush_cohorts(now)
        for key in sorted(lqs):
            obj = ctx.store(LQ).get(key)
            if obj is None:
                continue
            cq_name = (obj.get("spec") or {}).get("clusterQueue", "")
            cq_obj = ctx.store(CQ).get(cq_name)
            cq_spec = cluster_queue(cq_obj)[0] if cq_obj is not None else None
            status = local_queue_status(obj, st.lq[key], cq_obj,
                                        cq_obj is not None and problems.get(cq_name) is None,
                                        cq_spec, now)
            n += await self._write(LOCAL_QUEUES, obj, status)
        return n

    async def _flush_cohorts(self, now: float) -> int:
        """Write the status of every Cohort object whose view changed (any ClusterQueue
        change can move a subtree's usage)."""
        core = self.cluster
        assert core is not None
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
        interval = self.ctx.settings.scheduling.status_flush_seconds
        while True:
            await asyncio.sleep(interval)
            if not self.ctx.may_write:
                self.stats.dirty_all = True
                continue
            if not (self.stats.dirty_all or self.stats.dirty_cqs or self.stats.dirty_lqs):
                continue
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001
                self.stats.dirty_all = True
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
