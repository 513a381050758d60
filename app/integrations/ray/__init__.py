"""KubeRay's kinds (``ray.io/v1``): RayJob and RayCluster."""

from app.integrations.ray.ray import RAYCLUSTER, RAYJOB

KINDS = (RAYJOB, RAYCLUSTER)

__all__ = ["KINDS"]
