"""KubeRay's kinds (``ray.io/v1``): RayJob and RayCluster (``KINDS``), and their webhook
routes (``ROUTES``, from each kind's ``rules``)."""

from app.integrations.ray.ray import RAYCLUSTER, RAYJOB

KINDS = (RAYJOB, RAYCLUSTER)

ROUTES = tuple(r for k in KINDS for r in k.rules.routes())

__all__ = ["KINDS", "ROUTES"]
