"""Wire model of the Kueue v1beta2 WorkloadPriorityClass (cluster-scoped, no spec).

Shape (``manifests/crds/kueue.x-k8s.io_workloadpriorityclasses.yaml``): top-level ``value``
(int32, required) and ``description`` (<= 2048 characters). Jobs reference a class with the
label ``kueue.x-k8s.io/priority-class``.
"""

from __future__ import annotations

from app.models.common import KUEUE_API_VERSION, KubeObject


class WorkloadPriorityClass(KubeObject):
    """``kueue.x-k8s.io/v1beta2`` WorkloadPriorityClass: ``value`` is the priority."""

    api_version: str = KUEUE_API_VERSION
    kind: str = "WorkloadPriorityClass"
    value: int
    description: str | None = None
