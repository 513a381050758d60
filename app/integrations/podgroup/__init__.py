"""Pod groups (``KIND``): Pods that are admitted together or not at all."""

from app.integrations.podgroup.group import KIND

__all__ = ["KIND"]
