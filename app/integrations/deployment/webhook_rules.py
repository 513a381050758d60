"""apps/v1 Deployment (Kueue ``pkg/controller/jobs/deployment``, kueue-integrations.md 3.1).

Its pod template gets the queue (``app.integrations.parents``), so every pod is a plain Pod
(``app.integrations.pod``): each is gated at creation and admitted as its own Workload.
Scaling up queues the new pods; scaling down (or a rollout) deletes pods, whose Workloads go
with them and free their quota. No gang semantics, as in Kueue.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.integrations.parents import owner_routes, queue_template_patch, validate_queue_change
from app.integrations.webhook_toolkit import JsonPatchOp, WebhookPolicy
from app.wire.names import SUSPENDING_PARENT

__all__ = ["SUSPENDING_PARENT", "mutate_deployment", "validate_deployment_update"]


def mutate_deployment(dep: Mapping[str, Any], operation: str, policy: WebhookPolicy, *,
                      manage_unlabelled: bool = False) -> list[JsonPatchOp]:
    """The queue onto a queued Deployment's pod template (``queue_template_patch``)."""
    return queue_template_patch(dep, operation, policy, "deployment",
                                manage_unlabelled=manage_unlabelled)


def validate_deployment_update(old: Mapping[str, Any], new: Mapping[str, Any], username: str,
                               policy: WebhookPolicy) -> list[str]:
    """Queue-name changes of a Deployment (``validate_queue_change``)."""
    return validate_queue_change(old, new, username, policy, "Deployment")


# Served by ``app.api.webhook``.
ROUTES = owner_routes("Deployment", mutate_deployment, validate_deployment_update)
