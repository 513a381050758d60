"""Plain Pods (``KIND``) and their admission rules (``rules``)."""

from app.integrations.pod.pod import KIND

__all__ = ["KIND"]
