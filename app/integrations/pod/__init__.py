"""Kueue's pod integration (framework ``pod``): plain Pods (``pod.KIND``) and pod groups
(``group.KIND``), both in ``KINDS``, and their webhook routes (``ROUTES``,
``webhook_rules``)."""

from app.integrations.pod.group import KIND as GROUP_KIND
from app.integrations.pod.pod import KIND
from app.integrations.pod.webhook_rules import ROUTES

KINDS = (KIND, GROUP_KIND)

__all__ = ["GROUP_KIND", "KIND", "KINDS", "ROUTES"]
