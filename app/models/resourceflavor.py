"""Wire model of the Kueue v1beta2 ResourceFlavor (cluster-scoped, no status).

Shape (``manifests/crds/kueue.x-k8s.io_resourceflavors.yaml``): ``spec.nodeLabels`` (<= 8),
``spec.nodeTaints`` (<= 8), ``spec.tolerations`` (<= 8), ``spec.topologyName``. An empty spec
is valid: the flavor then matches every node.
"""

from __future__ import annotations

from app.models.common import KUEUE_API_VERSION, KubeObject, Taint, Toleration, WireModel


class ResourceFlavorSpec(WireModel):
    """Nodes of the flavor (``node_labels``, ``node_taints``) and what admitted pods get
    (``node_labels`` as nodeSelector, ``tolerations``)."""

    node_labels: dict[str, str] | None = None
    node_taints: list[Taint] | None = None
    tolerations: list[Toleration] | None = None
    topology_name: str | None = None


class ResourceFlavor(KubeObject):
    """``kueue.x-k8s.io/v1beta2`` ResourceFlavor."""

    api_version: str = KUEUE_API_VERSION
    kind: str = "ResourceFlavor"
    spec: ResourceFlavorSpec | None = None
