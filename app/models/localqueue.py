"""Wire model of the Kueue v1beta2 LocalQueue (namespaced, status subresource).

Shape (``manifests/crds/kueue.x-k8s.io_localqueues.yaml``): ``spec.clusterQueue`` (immutable),
``spec.stopPolicy``, ``spec.fairSharing.weight``; status with conditions, workload counters and
per-flavor reservation and usage (``total`` only, no ``borrowed``).
"""

from __future__ import annotations

from typing import Literal

from app.models.common import KUEUE_API_VERSION, Condition, KubeObject, Quantity, WireModel


class LocalQueueFairSharing(WireModel):
    """Admission Fair Sharing weight (quantity, default 1)."""

    weight: Quantity | None = None


class LocalQueueSpec(WireModel):
    """The ClusterQueue this queue feeds and its stop policy."""

    cluster_queue: str | None = None
    stop_policy: Literal["None", "Hold", "HoldAndDrain"] = "None"
    fair_sharing: LocalQueueFairSharing | None = None


class LocalQueueResourceUsage(WireModel):
    """Usage of one resource (quantity)."""

    name: str
    total: Quantity | None = None


class LocalQueueFlavorUsage(WireModel):
    """Usage of one flavor by the queue's workloads."""

    name: str
    resources: list[LocalQueueResourceUsage]


class AdmissionFairSharingStatus(WireModel):
    """Decayed usage of the queue."""

    consumed_resources: dict[str, Quantity] | None = None
    last_update: str | None = None


class LocalQueueFairSharingStatus(WireModel):
    """Fair sharing state of the queue."""

    weighted_share: int | None = None
    admission_fair_sharing_status: AdmissionFairSharingStatus | None = None


class LocalQueueStatus(WireModel):
    """Status written by pykueue: condition ``Active``, counters, reservation and usage."""

    conditions: list[Condition] | None = None
    pending_workloads: int | None = None
    reserving_workloads: int | None = None
    admitted_workloads: int | None = None
    flavors_reservation: list[LocalQueueFlavorUsage] | None = None
    flavors_usage: list[LocalQueueFlavorUsage] | None = None
    fair_sharing: LocalQueueFairSharingStatus | None = None


class LocalQueue(KubeObject):
    """``kueue.x-k8s.io/v1beta2`` LocalQueue."""

    api_version: str = KUEUE_API_VERSION
    kind: str = "LocalQueue"
    spec: LocalQueueSpec | None = None
    status: LocalQueueStatus | None = None
