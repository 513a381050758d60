"""apps/v1 StatefulSet: its pods are one pod group sized by ``spec.replicas``; no kind of its
own (``KINDS`` empty), webhook routes ``ROUTES`` (``webhook_rules``)."""

from app.integrations.statefulset.webhook_rules import ROUTES

KINDS = ()

__all__ = ["KINDS", "ROUTES"]
