"""Wire model of the Kueue v1beta2 Cohort (cluster-scoped, status subresource).

Shape (``manifests/crds/kueue.x-k8s.io_cohorts.yaml``): ``spec.parentName``,
``spec.resourceGroups[]`` (the ClusterQueue struct: the cohort's own quota pool),
``spec.fairSharing.weight``; status with conditions, per-flavor subtree quota and usage
(``subtreeQuota``, ``total``, ``borrowed``; a pykueue addition) and
``fairSharing.weightedShare``.
"""

from __future__ import annotations

from app.models.clusterqueue import FairSharing, FairSharingStatus, ResourceGroup
from app.models.common import KUEUE_API_VERSION, Condition, KubeObject, Quantity, WireModel


class CohortSpec(WireModel):
    """Parent, own quota and fair-sharing weight of a cohort."""

    parent_name: str | None = None
    resource_groups: list[ResourceGroup] | None = None
    fair_sharing: FairSharing | None = None


class CohortResourceUsage(WireModel):
    """Subtree quota and usage of one resource in a flavor (quantities)."""

    name: str
    subtree_quota: Quantity | None = None
    total: Quantity | None = None
    borrowed: Quantity | None = None


class CohortFlavorUsage(WireModel):
    """Subtree quota and usage of one flavor."""

    name: str
    resources: list[CohortResourceUsage]


class CohortStatus(WireModel):
    """Status: condition ``Active``, per-flavor subtree usage, fair sharing share."""

    conditions: list[Condition] | None = None
    flavors_usage: list[CohortFlavorUsage] | None = None
    fair_sharing: FairSharingStatus | None = None


class Cohort(KubeObject):
    """``kueue.x-k8s.io/v1beta2`` Cohort."""

    api_version: str = KUEUE_API_VERSION
    kind: str = "Cohort"
    spec: CohortSpec | None = None
    status: CohortStatus | None = None
