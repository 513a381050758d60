"""apps/v1 StatefulSet: its pods are one pod group sized by ``spec.replicas``; no kind of its
own (``KINDS`` empty), webhook routes ``ROUTES`` (``webhook_rules``), its pods' group
owner ``GROUP_PARENTS``."""

from app.integrations.parents import STATEFULSET_GROUPS
from app.integrations.statefulset.webhook_rules import ROUTES

KINDS = ()
GROUP_PARENTS = (STATEFULSET_GROUPS,)

__all__ = ["GROUP_PARENTS", "KINDS", "ROUTES"]
