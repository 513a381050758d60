"""Feeding the admission core (``app.core.scheduling_cycle.Scheduler``) from the informers:
one handler per watched kind, ``(etype, old, new)`` as ``app.kube.informers`` calls it,
synchronous, no I/O of its own (writes it decides are spawned on ``WorkloadWrites``).

- ResourceFlavors, ClusterQueues, Cohorts, AdmissionChecks, LocalQueues and Namespaces are
  mirrored into the core (``add_*`` / ``delete_*``), read by ``app.wire.queues``. An
  unreadable ResourceFlavor is treated as absent (its ClusterQueues stay inactive); an
  unreadable LocalQueue fair-sharing weight is read as 1 (the CRD refuses both; objects
  written before are tolerated). With Admission Fair Sharing a LocalQueue's persisted
  ``status.fairSharing.admissionFairSharingStatus`` seeds the core's ledger after a restart
  (Kueue seeds its ledger the same way).
- Every Workload object becomes a domain ``Workload`` (``app.wire.workload.domain_workload``)
  and is added / updated / finished / deleted in the core. A restart therefore rebuilds usage
  from ``Workload.status.admission`` during the first list; no cycle runs before every
  informer has synced (``SchedulerLoop.run``). Not queued: deactivated Workloads
  (``spec.active: false``) without admission, those waiting out a requeue backoff
  (Requeued=False, ``lifecycle.backoff_held``), and those being deleted
  (``deletionTimestamp``: a finalizer keeps them) without admission, which never run (beyond
  Kueue v0.17.1, whose queues keep such a Workload until its delete event: its job
  reconciler drops the finalizer at once; pykueue's waits for the pods of an admitted one).
  An unreadable Workload is kept out of the core and listed in ``bad_workloads`` (key ->
  message). With waitForPodsReady ``requeuingStrategy.timestamp: Creation`` a
  PodsReadyTimeout eviction does not reset the Workload's place in the queue (Kueue v1beta2
  Configuration). An admitted Workload turned inactive is evicted (``Deactivated``, or
  ``DeactivatedDueTo<reason>`` after a DeactivationTarget condition: Kueue's workload
  controller); an active one whose DeactivationTarget another controller set (Kueue's
  MultiKueue manager on a worker's copy, ``EvictedOnManagerCluster``) is deactivated
  (``spec.active: false``), as Kueue's does.
- Kueue's adjustment (``app.wire.podadjust``): a pending Workload's podSets get the
  overhead of the RuntimeClass their pods name, the defaults of their namespace's
  LimitRanges, and limits for missing requests before the core counts them, and the core
  learns whether their requests exceed their limits or those LimitRanges
  (``Workload.invalid_resources``: pending with Kueue's message). An admitted Workload keeps
  its admission's usage. A change of a LimitRange re-reads the pending Workloads of its
  namespace; of a RuntimeClass, the pending Workloads that name it (Kueue's workload
  controller re-adjusts the same ones). The stored Workload is not changed.
- DRA (docs/dra.md): a pending Workload's podSets get the devices its pods claim through
  ResourceClaimTemplates (``app.wire.dra``, renamed by ``resources.deviceClassMappings``)
  added to their per-pod requests before the core sees it, as Kueue's Workload controller
  does while a Workload is pending (an admitted one is counted by its
  ``status.admission``); claims that cannot be counted go to ``DraVerdicts``. A change of a
  ResourceClaimTemplate re-reads the pending Workloads of its namespace that name it.

- A Workload deleted from the API while it holds quota (admitted, not Finished: ``kubectl
  delete job``, whose garbage collection deletes the Workload while the pods run out their
  termination grace period) keeps that quota in the core (``Scheduler.hold_deleted``: shown
  as being evicted) until no pod of its owner holds resources any more (``pods_holding``,
  the reconciler's count for orphaned Workloads: ``pods_of_workload``; a pod Succeeded or
  Failed holds none, even while being deleted: Kueue KEP-10076 ``OnTerminal``), re-counted
  on each Pod event of its namespace (``on_pod``); then it is released (``release_deleted``) and
  the loop woken. ``jobs.deleted_quota_release: Immediately`` (Kueue v0.17.1) releases it at
  the deletion, as does a process that watches no pods. The hold lives in memory only: a
  restart (or a new leader that was not running at the deletion) forgets it.

Every handler wakes the scheduling loop (``ctx.wake``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from app.controllers.decision_writer import DecisionWriter
from app.controllers.dra_verdicts import DraVerdicts
from app.controllers.lifecycle import Lifecycle, backoff_held
from app.controllers.pending_messages import PendingMessages
from app.controllers.write_tasks import WorkloadWrites
from app.core.scheduling_cycle import Scheduler
from app.core.types import ClusterQueueName, CohortName, FlavorName, WorkloadKey
from app.integrations.framework import controller_uid
from app.kube.context import LR, RCT, RTC, WL, Context, in_namespace
from app.kube.informers import DELETED
from app.wire.dra import DraInadmissible, claim_template_names, with_claim_requests
from app.wire.fields import Obj, WorkloadSpecError
from app.wire.names import JOB_UID_LABEL
from app.wire.podadjust import runtime_class_names, with_adjusted_resources
from app.wire.queues import (
    admission_check,
    cluster_queue,
    cohort,
    consumed_from_status,
    is_multikueue_check,
    local_queue,
    resource_flavor,
)
from app.wire.workload import domain_workload, workload_key
from app.wire.workload_status import (
    DEACTIVATED_DUE_TO,
    DEACTIVATION_TARGET,
    EVICTED,
    condition,
    has_admission,
    is_active,
    is_evicted,
    is_finished,
    is_true,
    priority_class_name,
)

log = logging.getLogger(__name__)


def _deactivation_asked(wl: Obj) -> bool:
    return is_true(wl, DEACTIVATION_TARGET)


class InformerFeed:
    """The informer handlers that keep ``cluster`` in step with the API objects (module
    doc); they hand each Workload's follow-up to ``lifecycle``, ``decisions``, ``messages``
    and ``dra``."""

    def __init__(self, ctx: Context, cluster: Scheduler, *, lifecycle: Lifecycle,
                 decisions: DecisionWriter, messages: PendingMessages, dra: DraVerdicts,
                 writes: WorkloadWrites, metrics: Any = None,
                 pods_holding: Callable[[Obj, str], int | None] | None = None) -> None:
        self.ctx = ctx
        self.cluster = cluster
        self.lifecycle = lifecycle
        self.decisions = decisions
        self.messages = messages
        self.dra = dra
        self.writes = writes
        self.metrics = metrics
        self.bad_workloads: dict[WorkloadKey, str] = {}
        # Deleted Workloads whose quota the core holds while their owner's pods still hold
        # resources: namespace -> key -> (the last object, its owner's uid). ``pods_holding``
        # counts those pods (None: no Pod watch).
        self.pods_holding = pods_holding
        self.held: dict[str, dict[WorkloadKey, tuple[Obj, str]]] = {}
        # Handlers of the Workload informer that saw the deletion while the quota was held (the
        # queue status writer, the ClusterQueue finalizer): told it again at the release, as
        # ``(DELETED, workload, None)``, since the usage they show or wait on changes only then.
        self.on_release: list[Callable[[str, Obj | None, Obj | None], None]] = []
        # DRA: DeviceClass -> quota resource.
        self.device_classes = ctx.settings.resources.device_classes()

    def on_flavor(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        if etype == DELETED:
            self.cluster.delete_flavor(FlavorName(old["metadata"]["name"]))  # type: ignore[index]
        elif new is not None:
            try:
                self.cluster.add_flavor(resource_flavor(new))
            except WorkloadSpecError as exc:
                # The CRD refuses such a flavor; one written before it is read as absent, so
                # the ClusterQueues naming it stay inactive rather than admit onto it.
                log.warning("ResourceFlavor %s is unreadable, treated as absent: %s",
                            new["metadata"]["name"], exc)
                self.cluster.delete_flavor(FlavorName(new["metadata"]["name"]))
        self.ctx.wake()

    def on_cluster_queue(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        if etype == DELETED:
            self.cluster.delete_cluster_queue(
                ClusterQueueName(old["metadata"]["name"]))  # type: ignore[index]
        elif new is not None:
            spec, _ = cluster_queue(new)
            self.cluster.add_cluster_queue(spec)
            if old is not None and (old.get("spec") or {}).get("admissionChecksStrategy") \
                    != (new.get("spec") or {}).get("admissionChecksStrategy"):
                # Its Workloads holding quota get the queue's checks now (Kueue syncs them).
                store = self.ctx.store(WL)
                for key in self.cluster.admitted(spec.name):
                    if (obj := store.get(key)) is not None:
                        self.lifecycle.observe(obj)
        self.ctx.wake()

    def on_cohort(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        if etype == DELETED:
            self.cluster.delete_cohort(CohortName(old["metadata"]["name"]))  # type: ignore[index]
        elif new is not None:
            spec, _ = cohort(new)
            self.cluster.add_cohort(spec)
        self.ctx.wake()

    def on_admission_check(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """An AdmissionCheck changed: ClusterQueues naming it are re-validated (Kueue: a
        missing or inactive check makes them inactive)."""
        if etype == DELETED:
            self.cluster.delete_admission_check(admission_check(old)[0])  # type: ignore[arg-type]
        elif new is not None:
            self.cluster.set_admission_check(*admission_check(new),
                                             multikueue=is_multikueue_check(new))
        self.ctx.wake()

    def on_local_queue(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        if etype == DELETED:
            m = old["metadata"]  # type: ignore[index]
            self.cluster.delete_local_queue(f"{m['namespace']}/{m['name']}")
        elif new is not None:
            try:
                lq = local_queue(new)
            except WorkloadSpecError as exc:
                # The CRD refuses such a weight; one written before it keeps the default 1.
                log.warning("LocalQueue %s/%s: %s; using weight 1", new["metadata"].get(
                    "namespace"), new["metadata"]["name"], exc)
                lq = local_queue({**new, "spec": {**(new.get("spec") or {}),
                                                  "fairSharing": {}}})
            self.cluster.add_local_queue(lq)
            if self.cluster.admission_fair_sharing is not None:
                # After a restart, the history persisted in the status (Kueue seeds its
                # ledger the same way); ignored once the core has its own.
                consumed = consumed_from_status(new)
                if consumed is not None:
                    self.cluster.seed_local_queue_usage(lq.key, consumed)
        self.ctx.wake()

    def on_namespace(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        if etype == DELETED:
            self.cluster.delete_namespace(old["metadata"]["name"])  # type: ignore[index]
        elif new is not None:
            self.cluster.set_namespace(new["metadata"]["name"],
                                       new["metadata"].get("labels") or {})
        self.ctx.wake()

    def on_workload(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        if obj is None:
            return
        key = workload_key(obj)
        self.ctx.wake()
        if etype == DELETED or new is None:
            self._forget_held(key)
            if not self._hold_deleted(key, old or obj):
                self.cluster.delete_workload(key)
            self.decisions.drop_deadline(key)
            self.messages.drop(key)
            self.lifecycle.forget(key)
            return
        if self.held:
            self._forget_held(key)  # a new Workload of a held one's key (the core drops it)
        if is_finished(new):
            info = self.cluster.workload(key)
            if info is not None and info.state != "pending" \
                    and not (old is not None and is_finished(old)):
                self.messages.learn_runtime(key, new)
            if self.metrics is not None and info is not None and info.cluster_queue \
                    and info.state != "pending" and not (old is not None and is_finished(old)):
                self.metrics.finished(info.cluster_queue, namespace=key.split("/", 1)[0],
                                      local_queue=(new.get("spec") or {}).get("queueName", ""),
                                      priority_class=priority_class_name(new))
            self.cluster.finish(key)
            self.decisions.drop_deadline(key)
            self.messages.drop(key)
            self.lifecycle.forget(key)
            return
        if (new.get("metadata") or {}).get("deletionTimestamp") and not has_admission(new):
            # Being deleted without a quota reservation: it never runs, so it is not queued
            # (admitted, or preempting for, it would hold quota for nothing until its
            # finalizer goes). An admitted one keeps its usage until it is released.
            self.cluster.delete_workload(key)
            self.messages.drop(key)
            self.lifecycle.forget(key)
            return
        if (not is_active(new) and not has_admission(new)) or backoff_held(new):
            # Deactivated, or waiting out a requeue backoff (Requeued=False): not queued.
            self.cluster.delete_workload(key)
            self.lifecycle.observe(new)
            return
        try:
            wl = domain_workload(new)
            if wl.admission is None:
                wl = with_adjusted_resources(wl, new, self._overheads(new),
                                             in_namespace(self.ctx, LR, wl.namespace))
                wl = with_claim_requests(wl, new, self._claim_template, self.device_classes)
        except DraInadmissible as exc:
            self.cluster.delete_workload(key)
            self.dra.refuse(key, str(exc))
            return
        except WorkloadSpecError as exc:
            self.bad_workloads[key] = str(exc)
            self.cluster.delete_workload(key)
            return
        self.bad_workloads.pop(key, None)
        self.dra.countable(key, new)
        if wl.admission is None and wl.evicted_at is not None \
                and self._ordered_by_creation((condition(new, EVICTED) or {}).get("reason")):
            wl = replace(wl, evicted_at=None)
        if old is None and wl.admission is None:
            self.messages.observe_arrival(wl)  # a new Workload: one more arrival of its class
        self.cluster.update_workload(wl)
        self.decisions.track_deadline(key, new)
        if not is_active(new) and has_admission(new) and not is_evicted(new) \
                and self.ctx.may_write and self.cluster.evict(key, self.ctx.clock()):
            reason, message = "Deactivated", "The workload is deactivated"
            target = condition(new, DEACTIVATION_TARGET)
            if target is not None and target.get("status") == "True":
                reason = f"{DEACTIVATED_DUE_TO}{target.get('reason', '')}"
                message = f"The workload is deactivated due to {target.get('message', '')}"
            self.writes.spawn(self.decisions.evict(key, reason, message, None, None))
        if is_active(new) and is_true(new, DEACTIVATION_TARGET) and self.ctx.may_write:
            # Asked for by another controller (Kueue's MultiKueue manager on a worker's copy:
            # EvictedOnManagerCluster): Kueue's workload controller turns the condition into
            # spec.active false, whose event evicts the Workload (above).
            target = condition(new, DEACTIVATION_TARGET) or {}
            self.writes.spawn(self.decisions.deactivate(
                key, str(target.get("reason") or ""), str(target.get("message") or ""),
                still=_deactivation_asked))
        self.lifecycle.observe(new)

    def _hold_deleted(self, key: WorkloadKey, wl: Obj) -> bool:
        """Keep deleted ``wl``'s quota in the core while pods of its owner still hold
        resources (module doc); True when held."""
        if self.ctx.settings.jobs.deleted_quota_release != "WhenPodsGone" \
                or self.pods_holding is None or not has_admission(wl) or is_finished(wl):
            return False
        meta = wl.get("metadata") or {}
        uid = controller_uid(wl) or str((meta.get("labels") or {}).get(JOB_UID_LABEL) or "")
        if not self.pods_holding(wl, uid):  # uid "": a pod group's, owned by its pods
            return False
        if not self.cluster.hold_deleted(key, self.ctx.clock()):
            return False  # it held no quota (pending, or only assumed): forgotten
        self.held.setdefault(str(meta.get("namespace", "")), {})[key] = (wl, uid)
        log.info("Workload %s deleted while pods of its owner still hold resources: its "
                 "quota is held until they are gone", key)
        return True

    def _forget_held(self, key: WorkloadKey) -> None:
        ns = key.split("/", 1)[0]
        held = self.held.get(ns)
        if held is not None and held.pop(key, None) is not None and not held:
            del self.held[ns]

    def on_pod(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """A pod changed: in a namespace with held deleted Workloads (``_hold_deleted``),
        release those none of whose owner's pods holds resources any more, and tell the
        handlers in ``on_release`` (the queue status, the ClusterQueue finalizer)."""
        pod = new or old
        if not self.held or pod is None:
            return
        ns = str((pod.get("metadata") or {}).get("namespace", ""))
        held = self.held.get(ns)
        if not held or self.pods_holding is None:
            return
        for key, (wl, uid) in list(held.items()):
            if not self.pods_holding(wl, uid):
                self._forget_held(key)
                self.cluster.release_deleted(key)
                for handler in self.on_release:
                    handler(DELETED, wl, None)
                log.info("Workload %s (deleted): no pod of its owner holds resources any "
                         "more, its quota is released", key)
                self.ctx.wake()

    def _ordered_by_creation(self, reason: str | None) -> bool:
        """Whether a pending Workload last evicted for ``reason`` (its Evicted condition's)
        is ordered in its queue by its creation time, not its eviction time (Kueue v0.17.1
        ``GetQueueOrderTimestamp``): after a PodsReady timeout as
        ``waitForPodsReady.requeuingStrategy.timestamp`` says; never after an admission
        check's; after any other eviction (preemption, a stop policy) as
        ``scheduling.preempted_queue_order`` says."""
        settings = self.ctx.settings
        if reason == "PodsReadyTimeout":
            return settings.wait_for_pods_ready.requeuing_strategy.timestamp == "Creation"
        if reason == "AdmissionCheck":
            return False
        return settings.scheduling.preempted_queue_order == "Creation"

    def _overheads(self, wl: Obj) -> dict[str, Any]:
        """RuntimeClass name -> ``overhead.podFixed`` of the RuntimeClasses whose overhead
        Kueue adds to Workload ``wl``'s pods (``runtime_class_names``); one that does not
        exist is absent."""
        names = runtime_class_names(wl)
        if not names or RTC not in self.ctx.informers.informers:
            return {}
        store = self.ctx.store(RTC)
        return {n: (rc.get("overhead") or {}).get("podFixed")
                for n in names if (rc := store.get(n)) is not None}

    def on_limit_range(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """A LimitRange changed: re-read the pending Workloads of its namespace (their
        counted requests and their check change; Kueue's workload controller re-adjusts
        those without a quota reservation). An admitted one keeps its admission's usage."""
        obj = new or old
        if obj is None:
            return
        for wl in in_namespace(self.ctx, WL, obj["metadata"].get("namespace", "")):
            if not has_admission(wl):
                self.on_workload("MODIFIED", wl, wl)

    def on_runtime_class(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """A RuntimeClass changed: re-read the pending Workloads whose pods name it without
        an overhead of their own (Kueue re-adjusts them too)."""
        obj = new or old
        if obj is None:
            return
        name = obj["metadata"]["name"]
        for wl in self.ctx.store(WL).list():
            if not has_admission(wl) and name in runtime_class_names(wl):
                self.on_workload("MODIFIED", wl, wl)

    def _claim_template(self, namespace: str, name: str) -> Obj | None:
        if RCT not in self.ctx.informers.informers:
            return None
        return self.ctx.store(RCT).get(f"{namespace}/{name}")

    def on_claim_template(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """A ResourceClaimTemplate changed: re-read the pending Workloads of its namespace
        whose pods name it (their device counts or admissibility may change)."""
        obj = new or old
        if obj is None:
            return
        ns, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        for wl in self.ctx.store(WL).list():
            if wl["metadata"].get("namespace") == ns and not has_admission(wl) \
                    and name in claim_template_names(wl):
                self.on_workload("MODIFIED", wl, wl)
