"""Prometheus metrics of the queues, named as Kueue's (``pkg/metrics``, reference 5.1).

Two halves, both on the app's own ``CollectorRegistry`` (``app.state.metrics_registry``,
served at ``/metrics`` by ``app.api.health``):

- ``QueueCollector``: gauges computed from the admission core at scrape time (no state of its
  own, so they can never drift from the core): ``kueue_pending_workloads{cluster_queue,
  status=active|inadmissible}``, ``kueue_reserving_active_workloads``,
  ``kueue_admitted_active_workloads``, ``kueue_cluster_queue_status{status=pending|active|
  terminating}``, the ``kueue_local_queue_*`` twins, and per ClusterQueue flavor-resource
  ``kueue_cluster_queue_nominal_quota``, ``_borrowing_limit``, ``_lending_limit``,
  ``_resource_reservation`` (admitted + being admitted), ``_resource_usage`` (admitted), plus
  pykueue's ``pykueue_cluster_queue_resource_borrowed`` and ``_lent`` (Kueue has none), and
  per LocalQueue flavor-resource ``kueue_local_queue_resource_reservation`` and ``_usage``
  (Kueue's LocalQueueMetrics).
- ``MetricsRecorder``: counters and histograms the reconciler increments as things happen:
  ``kueue_quota_reserved_workloads_total``, ``kueue_admitted_workloads_total``,
  ``kueue_quota_reserved_wait_time_seconds``, ``kueue_admission_wait_time_seconds``,
  ``kueue_evicted_workloads_total{reason,underlying_cause}``,
  ``kueue_preempted_workloads_total{preempting_cluster_queue,reason}``,
  ``kueue_finished_workloads_total``, ``kueue_admission_attempts_total{result}``,
  ``kueue_admission_attempt_duration_seconds`` and ``kueue_local_queue_*`` twins.

Every series carries ``replica_role`` (``leader``, ``follower`` or ``standalone`` when leader
election is off), as Kueue's. Resource amounts are in the base unit Prometheus expects: CPU
in cores (pykueue's milli-CPU / 1000), memory in bytes, GPUs and pods as counts. An unset
borrowingLimit or lendingLimit is reported as +Inf (Kueue does the same).

Wait-time histograms use Kueue's buckets: 1, 2.5, 5, 10, ... 10240 seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from app.controllers.cluster_view import ClusterView
from app.core.quantity import is_milli
from app.core.quota_state import QuotaState
from app.core.types import FlavorResource, WorkloadKey

STANDALONE, LEADER, FOLLOWER = "standalone", "leader", "follower"

# Kueue generateExponentialBuckets(14): 1, then 2.5 * 2^k.
WAIT_BUCKETS: tuple[float, ...] = (1.0, *(2.5 * 2 ** k for k in range(13)))
# Admission attempt latency: a cycle takes micro- to milliseconds.
ATTEMPT_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

CQ_STATUSES = ("pending", "active", "terminating")
LQ_ACTIVE = ("True", "False", "Unknown")

RoleFn = Callable[[], str]


def replica_role(leader_election: bool, is_leader: Callable[[], bool]) -> RoleFn:
    """A ``replica_role`` label function: ``standalone`` without leader election, else
    ``leader`` / ``follower`` as ``is_leader()`` says at the time of the sample."""
    if not leader_election:
        return lambda: STANDALONE
    return lambda: LEADER if is_leader() else FOLLOWER


def resource_value(amount: int, resource: str) -> float:
    """pykueue's integer amount in Prometheus base units (CPU cores, bytes, counts)."""
    return amount / 1000 if is_milli(resource) else float(amount)


def _limit_value(amount: int | None, resource: str) -> float:
    return math.inf if amount is None else resource_value(amount, resource)


# ------------------------------------------------------------------------------ gauges


class QueueCollector(Collector):
    """Gauges from the admission core at scrape time (see the module doc).

    ``source`` returns the live ``Scheduler`` or None (nothing to report yet, e.g. before the
    reconciler starts). Scrapes must run on the event loop that feeds the core (``/metrics``
    is an ``async`` handler, so they do).
    """

    def __init__(self, source: Callable[[], QuotaState | None],
                 role: RoleFn = lambda: STANDALONE,
                 awaiting_checks: Callable[[], Collection[WorkloadKey]] = frozenset) -> None:
        self.source = source
        self.role = role
        # Workloads holding quota whose admission checks are not all Ready: reserving, not
        # admitted (Kueue counts them in reserving_active_workloads only).
        self.awaiting_checks = awaiting_checks

    def describe(self) -> Iterable[Any]:
        return []  # dynamic: do not collect at registration

    def collect(self) -> Iterable[Any]:
        cluster = self.source()
        role = self.role()
        cq_labels = ["cluster_queue", "replica_role"]
        lq_labels = ["name", "namespace", "replica_role"]
        fr_labels = ["cohort", "cluster_queue", "flavor", "resource", "replica_role"]
        lq_fr_labels = ["name", "namespace", "flavor", "resource", "replica_role"]
        g = {
            "pending": GaugeMetricFamily(
                "kueue_pending_workloads",
                "The number of pending workloads, per 'cluster_queue' and 'status' (active: in "
                "the admission queue; inadmissible: waiting for a change in the cohort)",
                labels=["cluster_queue", "status", "replica_role"]),
            "reserving": GaugeMetricFamily(
                "kueue_reserving_active_workloads",
                "The number of Workloads that are reserving quota, per 'cluster_queue'",
                labels=cq_labels),
            "admitted": GaugeMetricFamily(
                "kueue_admitted_active_workloads",
                "The number of admitted Workloads that are active (unsuspended and not "
                "finished), per 'cluster_queue'", labels=cq_labels),
            "cq_status": GaugeMetricFamily(
                "kueue_cluster_queue_status",
                "Reports 'cluster_queue' with its 'status' (pending, active or terminating); "
                "1 for exactly one status", labels=["cluster_queue", "status", "replica_role"]),
            "lq_pending": GaugeMetricFamily(
                "kueue_local_queue_pending_workloads",
                "The number of pending workloads, per 'local_queue' and 'status'",
                labels=["name", "namespace", "status", "replica_role"]),
            "lq_reserving": GaugeMetricFamily(
                "kueue_local_queue_reserving_active_workloads",
                "The number of Workloads that are reserving quota, per 'localQueue'",
                labels=lq_labels),
            "lq_admitted": GaugeMetricFamily(
                "kueue_local_queue_admitted_active_workloads",
                "The number of admitted Workloads that are active, per 'localQueue'",
                labels=lq_labels),
            "lq_status": GaugeMetricFamily(
                "kueue_local_queue_status",
                "Reports 'localQueue' with its 'active' status (True, False or Unknown); 1 for "
                "exactly one", labels=["name", "namespace", "active", "replica_role"]),
            "nominal": GaugeMetricFamily(
                "kueue_cluster_queue_nominal_quota",
                "Reports the cluster_queue's resource nominal quota within all the flavors",
                labels=fr_labels),
            "borrowing": GaugeMetricFamily(
                "kueue_cluster_queue_borrowing_limit",
                "Reports the cluster_queue's resource borrowing limit within all the flavors "
                "(+Inf: unlimited)", labels=fr_labels),
            "lending": GaugeMetricFamily(
                "kueue_cluster_queue_lending_limit",
                "Reports the cluster_queue's resource lending limit within all the flavors "
                "(+Inf: no limit)", labels=fr_labels),
            "reservation": GaugeMetricFamily(
                "kueue_cluster_queue_resource_reservation",
                "Reports the cluster_queue's total resource reservation within all the "
                "flavors", labels=fr_labels),
            "usage": GaugeMetricFamily(
                "kueue_cluster_queue_resource_usage",
                "Reports the cluster_queue's total resource usage within all the flavors",
                labels=fr_labels),
            "lq_reservation": GaugeMetricFamily(
                "kueue_local_queue_resource_reservation",
                "Reports the localQueue's total resource reservation within all the flavors",
                labels=lq_fr_labels),
            "lq_usage": GaugeMetricFamily(
                "kueue_local_queue_resource_usage",
                "Reports the localQueue's total resource usage within all the flavors",
                labels=lq_fr_labels),
            "borrowed": GaugeMetricFamily(
                "pykueue_cluster_queue_resource_borrowed",
                "Quota the cluster_queue uses above its nominal quota (borrowed from its "
                "cohort), per flavor and resource", labels=fr_labels),
            "lent": GaugeMetricFamily(
                "pykueue_cluster_queue_resource_lent",
                "Of the cluster_queue's unused quota, what other cohort members use, per "
                "flavor and resource", labels=fr_labels),
        }
        if cluster is not None:
            self._fill(ClusterView(cluster, awaiting_checks=self.awaiting_checks()), role, g)
        return list(g.values())

    @staticmethod
    def _fill(view: ClusterView, role: str, g: dict[str, GaugeMetricFamily]) -> None:
        for v in view.cluster_queues():
            name = str(v.name)
            g["pending"].add_metric([name, "active", role], v.pending_active)
            g["pending"].add_metric([name, "inadmissible", role], v.pending_inadmissible)
            g["reserving"].add_metric([name, role], v.reserving)
            g["admitted"].add_metric([name, role], v.admitted)
            current = ("active" if v.status.active else
                       "terminating" if v.status.reason == "Terminating" else "pending")
            for s in CQ_STATUSES:
                g["cq_status"].add_metric([name, s, role], 1.0 if s == current else 0.0)
            cohort = v.status.cohort or ""
            for r in v.resources:
                labels = [cohort, name, r.flavor, r.resource, role]
                res = r.resource
                g["nominal"].add_metric(labels, resource_value(r.nominal, res))
                g["borrowing"].add_metric(labels, _limit_value(r.borrowing_limit, res))
                g["lending"].add_metric(labels, _limit_value(r.lending_limit, res))
                g["reservation"].add_metric(labels, resource_value(r.usage, res))
                used = v.admitted_usage.get(FlavorResource(r.flavor, r.resource), 0)
                g["usage"].add_metric(labels, resource_value(used, res))
                g["borrowed"].add_metric(labels, resource_value(r.borrowed, res))
                g["lent"].add_metric(labels, resource_value(r.lent, res))
        for lq in view.local_queues():
            labels = [lq.name, lq.namespace, role]
            active = lq.pending - lq.pending_inadmissible
            g["lq_pending"].add_metric([lq.name, lq.namespace, "active", role], active)
            g["lq_pending"].add_metric([lq.name, lq.namespace, "inadmissible", role],
                                       lq.pending_inadmissible)
            g["lq_reserving"].add_metric(labels, lq.reserving)
            g["lq_admitted"].add_metric(labels, lq.admitted)
            current = "True" if lq.active else "False"
            for s in LQ_ACTIVE:
                g["lq_status"].add_metric([lq.name, lq.namespace, s, role],
                                          1.0 if s == current else 0.0)
            for fr in sorted(set(lq.usage) | set(lq.admitted_usage)):
                labels = [lq.name, lq.namespace, fr.flavor, fr.resource, role]
                g["lq_reservation"].add_metric(labels, resource_value(lq.usage.get(fr, 0),
                                                                      fr.resource))
                g["lq_usage"].add_metric(labels, resource_value(lq.admitted_usage.get(fr, 0),
                                                                fr.resource))


# ------------------------------------------------------------------------------ counters


class MetricsRecorder:
    """Counters and histograms the reconciler increments (see the module doc).

    Where the reconciler calls it (``app.controllers.scheduling_loop``, ``decision_writer``,
    ``informer_feed``):

    - ``admitted(...)`` once the admission status write succeeded (``admit``), with the
      wait since creation or last requeue (Workload ``queue_order_time``) in seconds;
    - ``evicted(...)`` once an eviction write succeeded (``evict``), reason ``Preempted``,
      ``Deactivated``, ...; and ``preempted(...)`` too when it was a preemption victim;
    - ``finished(...)`` when a Workload holding quota finishes;
    - ``admission_attempt(...)`` after each scheduling cycle that evaluated Workloads.

    Labels that Kueue has and pykueue does not know yet are passed as ``""``.
    """

    def __init__(self, registry: CollectorRegistry, role: RoleFn = lambda: STANDALONE) -> None:
        self.role = role
        r = registry

        def twins(cls: Any, name: str, doc: str, **kw: Any) -> tuple[Any, Any]:
            """``kueue_<name>`` per ClusterQueue and its ``kueue_local_queue_<name>`` twin."""
            return (cls(f"kueue_{name}", f"{doc}, per 'cluster_queue'",
                        ["cluster_queue", "priority_class", "replica_role"], registry=r, **kw),
                    cls(f"kueue_local_queue_{name}", f"{doc}, per 'local_queue'",
                        ["name", "namespace", "priority_class", "replica_role"], registry=r,
                        **kw))

        self.quota_reserved_total, self.lq_quota_reserved_total = twins(
            Counter, "quota_reserved_workloads", "The total number of quota reserved workloads")
        self.quota_reserved_wait, self.lq_quota_reserved_wait = twins(
            Histogram, "quota_reserved_wait_time_seconds", "The time between a workload was "
            "created or requeued until it got quota reservation", buckets=WAIT_BUCKETS)
        self.admitted_total, self.lq_admitted_total = twins(
            Counter, "admitted_workloads", "The total number of admitted workloads")
        self.admission_wait, self.lq_admission_wait = twins(
            Histogram, "admission_wait_time_seconds", "The time between a workload was "
            "created or requeued until admission", buckets=WAIT_BUCKETS)
        self.finished_total, self.lq_finished_total = twins(
            Counter, "finished_workloads", "The total number of finished workloads")
        self.evicted_total = Counter(
            "kueue_evicted_workloads", "The number of evicted workloads per 'cluster_queue' "
            "and 'reason' (Preempted, PodsReadyTimeout, AdmissionCheck, ClusterQueueStopped, "
            "LocalQueueStopped, Deactivated, ...)",
            ["cluster_queue", "reason", "underlying_cause", "priority_class", "replica_role"],
            registry=r)
        self.lq_evicted_total = Counter(
            "kueue_local_queue_evicted_workloads", "The number of evicted workloads per "
            "'local_queue'", ["name", "namespace", "reason", "underlying_cause",
                              "priority_class", "replica_role"], registry=r)
        self.preempted_total = Counter(
            "kueue_preempted_workloads", "The number of preempted workloads per "
            "'preempting_cluster_queue' and 'reason' (InClusterQueue, InCohortReclamation, "
            "InCohortReclaimWhileBorrowing, InCohortFairSharing)",
            ["preempting_cluster_queue", "reason", "replica_role"], registry=r)
        self.attempts_total = Counter(
            "kueue_admission_attempts", "The total number of attempts to admit workloads "
            "('result': success when at least one workload was admitted, else inadmissible)",
            ["result", "replica_role"], registry=r)
        self.attempt_duration = Histogram(
            "kueue_admission_attempt_duration_seconds", "The latency of an admission "
            "attempt, by 'result'", ["result", "replica_role"], buckets=ATTEMPT_BUCKETS,
            registry=r)

    def admitted(self, cluster_queue: str, wait_seconds: float, *, namespace: str = "",
                 local_queue: str = "", priority_class: str = "") -> None:
        """A Workload got quota and was admitted (pykueue has no admission checks, so both
        happen at once): counts it and observes ``wait_seconds`` (creation or last requeue ->
        admission; negative values count as 0)."""
        role = self.role()
        wait = max(0.0, wait_seconds)
        cq = (cluster_queue, priority_class, role)
        self.quota_reserved_total.labels(*cq).inc()
        self.quota_reserved_wait.labels(*cq).observe(wait)
        self.admitted_total.labels(*cq).inc()
        self.admission_wait.labels(*cq).observe(wait)
        if local_queue:
            lq = (local_queue, namespace, priority_class, role)
            self.lq_quota_reserved_total.labels(*lq).inc()
            self.lq_quota_reserved_wait.labels(*lq).observe(wait)
            self.lq_admitted_total.labels(*lq).inc()
            self.lq_admission_wait.labels(*lq).observe(wait)

    def evicted(self, cluster_queue: str, reason: str, *, underlying_cause: str = "",
                priority_class: str = "", namespace: str = "", local_queue: str = "") -> None:
        """A Workload admitted in ``cluster_queue`` was evicted for ``reason`` (Kueue
        Evicted condition reason: ``Preempted``, ``Deactivated``, ...)."""
        role = self.role()
        self.evicted_total.labels(cluster_queue, reason, underlying_cause, priority_class,
                                  role).inc()
        if local_queue:
            self.lq_evicted_total.labels(local_queue, namespace, reason, underlying_cause,
                                         priority_class, role).inc()

    def preempted(self, preempting_cluster_queue: str, reason: str) -> None:
        """A Workload was preempted for a Workload of ``preempting_cluster_queue``;
        ``reason``: the Preempted condition reason (``InClusterQueue``, ...). Call
        ``evicted(victim_cq, "Preempted")`` for the victim as well."""
        self.preempted_total.labels(preempting_cluster_queue, reason, self.role()).inc()

    def finished(self, cluster_queue: str, *, priority_class: str = "", namespace: str = "",
                 local_queue: str = "") -> None:
        """A Workload admitted in ``cluster_queue`` finished."""
        role = self.role()
        self.finished_total.labels(cluster_queue, priority_class, role).inc()
        if local_queue:
            self.lq_finished_total.labels(local_queue, namespace, priority_class, role).inc()

    def admission_attempt(self, admitted_any: bool, seconds: float) -> None:
        """One scheduling cycle that evaluated Workloads: ``admitted_any`` gives the
        ``result`` label (success / inadmissible); ``seconds`` its duration."""
        result = "success" if admitted_any else "inadmissible"
        role = self.role()
        self.attempts_total.labels(result, role).inc()
        self.attempt_duration.labels(result, role).observe(max(0.0, seconds))


def install(registry: CollectorRegistry, source: Callable[[], QuotaState | None],
            role: RoleFn = lambda: STANDALONE,
            awaiting_checks: Callable[[], Collection[WorkloadKey]] = frozenset,
            ) -> MetricsRecorder:
    """Register ``QueueCollector(source, role, awaiting_checks)`` on ``registry`` and return a
    ``MetricsRecorder`` on it (call once per registry: names can be registered only once)."""
    registry.register(QueueCollector(source, role, awaiting_checks))
    return MetricsRecorder(registry, role)
