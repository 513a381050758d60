"""leaderworkerset.x-k8s.io/v1 LeaderWorkerSet: each replica group's pods are one pod group
(a Workload per group, admitted whole as a serving group); no kind of its own (``KINDS``
empty: the groups are the ``pod`` integration's), webhook routes ``ROUTES`` and the
pod-group owner ``GROUP_PARENTS`` (``webhook_rules``)."""

from app.integrations.leaderworkerset.webhook_rules import GROUP_PARENTS, ROUTES

KINDS = ()

__all__ = ["GROUP_PARENTS", "KINDS", "ROUTES"]
