"""jobset.x-k8s.io/v1alpha2 JobSet (``KIND``)."""

from app.integrations.jobset.jobset import KIND

__all__ = ["KIND"]
