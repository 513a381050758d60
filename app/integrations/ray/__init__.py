"""KubeRay's kinds (``ray.io/v1``): RayJob, RayCluster and RayService (``KINDS``), and their webhook
routes (``ROUTES``, from each kind's ``rules``)."""

from app.integrations.ray.ray import RAYCLUSTER, RAYJOB, RAYSERVICE

KINDS = (RAYJOB, RAYCLUSTER, RAYSERVICE)

ROUTES = tuple(r for k in KINDS for r in k.rules.routes())

__all__ = ["KINDS", "ROUTES"]
