"""Wire model of the Kueue v1beta2 Workload (namespaced, status subresource).

Shape (``manifests/crds/kueue.x-k8s.io_workloads.yaml``): ``spec.podSets[]`` (``name``,
``template`` pod template, ``count``, ``minCount``), ``queueName``, ``priorityClassRef``,
``priority``, ``active``, ``maximumExecutionTimeSeconds``; status with conditions
(QuotaReserved, Admitted, Evicted, Preempted, Requeued, Finished, ...), ``admission``
(``clusterQueue``, ``podSetAssignments[]`` with ``flavors`` per resource, ``resourceUsage``
for all pods, ``count``), ``requeueState``, ``reclaimablePods``, ``admissionChecks``,
``resourceRequests``, ``accumulatedPastExecutionTimeSeconds``, ``schedulingStats``.

The domain view the admission core uses is ``app.core.workload.Workload``; the controllers
convert between the two.
"""

from __future__ import annotations

from typing import Any, Literal

from app.models.common import (
    KUEUE_API_VERSION,
    Condition,
    KubeObject,
    PodTemplateSpec,
    Quantity,
    WireModel,
)


class PodSet(WireModel):
    """A group of identical pods: ``count`` pods from ``template`` (defaults: ``main``, 1)."""

    name: str = "main"
    template: PodTemplateSpec
    count: int = 1
    min_count: int | None = None


class PriorityClassRef(WireModel):
    """Where the priority came from: ``kueue.x-k8s.io``/``WorkloadPriorityClass`` or
    ``scheduling.k8s.io``/``PriorityClass``."""

    group: Literal["kueue.x-k8s.io", "scheduling.k8s.io"]
    kind: Literal["WorkloadPriorityClass", "PriorityClass"]
    name: str


class WorkloadSpec(WireModel):
    """What the workload needs and where it queues."""

    pod_sets: list[PodSet]
    queue_name: str | None = None
    priority_class_ref: PriorityClassRef | None = None
    priority: int | None = None
    active: bool = True
    maximum_execution_time_seconds: int | None = None


class PodSetAssignment(WireModel):
    """Admission of one podSet: flavor per resource, usage of all admitted pods, pod count."""

    name: str = "main"
    flavors: dict[str, str] | None = None
    resource_usage: dict[str, Quantity] | None = None
    count: int | None = None


class Admission(WireModel):
    """``status.admission``: the ClusterQueue and one assignment per podSet."""

    cluster_queue: str
    pod_set_assignments: list[PodSetAssignment]


class RequeueState(WireModel):
    """Backoff after evictions."""

    count: int | None = None
    requeue_at: str | None = None


class ReclaimablePod(WireModel):
    """Finished pods of a podSet that no longer need quota."""

    name: str
    count: int


class AdmissionCheckState(WireModel):
    """State of one admission check; ``podSetUpdates`` kept as raw JSON."""

    name: str
    state: Literal["Pending", "Ready", "Retry", "Rejected"]
    last_transition_time: str
    message: str | None = None
    pod_set_updates: list[dict[str, Any]] | None = None


class PodSetRequest(WireModel):
    """Per-pod requests of one podSet as admission sees them."""

    name: str
    resources: dict[str, Quantity] | None = None


class EvictionCount(WireModel):
    """Evictions for one reason."""

    reason: str
    count: int
    underlying_cause: str | None = None


class SchedulingStats(WireModel):
    """Scheduling counters."""

    evictions: list[EvictionCount] | None = None


class WorkloadStatus(WireModel):
    """Status written by pykueue (conditions, admission) and kept across restarts."""

    conditions: list[Condition] | None = None
    admission: Admission | None = None
    requeue_state: RequeueState | None = None
    reclaimable_pods: list[ReclaimablePod] | None = None
    admission_checks: list[AdmissionCheckState] | None = None
    resource_requests: list[PodSetRequest] | None = None
    accumulated_past_execution_time_seconds: int | None = None
    scheduling_stats: SchedulingStats | None = None


class Workload(KubeObject):
    """``kueue.x-k8s.io/v1beta2`` Workload."""

    api_version: str = KUEUE_API_VERSION
    kind: str = "Workload"
    spec: WorkloadSpec | None = None
    status: WorkloadStatus | None = None
