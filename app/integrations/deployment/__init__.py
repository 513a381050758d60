"""apps/v1 Deployment: its pods are queued as plain Pods; no kind of its own (``KINDS``
empty), webhook routes ``ROUTES`` (``webhook_rules``)."""

from app.integrations.deployment.webhook_rules import ROUTES

KINDS = ()

__all__ = ["KINDS", "ROUTES"]
