"""apps/v1 StatefulSet (Kueue ``pkg/controller/jobs/statefulset``, kueue-integrations.md 3.2),
pure admission rules (no I/O) and its routes (``ROUTES``: ``/mutate-apps-v1-statefulset``,
``/validate-apps-v1-statefulset``, ``/validate-apps-v1-statefulset-scale``).

A queued StatefulSet's pod template gets the queue (``app.integrations.parents``, parent
``statefulset``). Each of its pods is then created by the StatefulSet controller, and the Pod
webhook makes it a member of the pod group ``statefulset-<name>`` sized by ``spec.replicas``
(``app.integrations.parents.group_patch``), with fast admission (the group's Workload is
built from its first pod with the full count, since the StatefulSet creates its pods one by
one and waits for each) and serving (the group never finishes). So the StatefulSet is
admitted whole: all replicas' quota or none, its pods ungated as they come.

Scaling follows Kueue: ``spec.replicas`` may go N -> 0 and 0 -> N, not N -> M with both above
0 (the admitted group has a fixed size), and not 0 -> N while pods of the last size remain;
the pods' shape (``role_hash`` of the template) cannot change while queued, as in Kueue. The
same replicas rule holds for the ``scale`` subresource (``validate_statefulset_scale``), which
Kueue's webhook does not see. Malformed objects raise ``UnreadableObjectError`` naming the
field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.integrations.parents import owner_routes, queue_template_patch, validate_queue_change
from app.integrations.podsets import role_hash
from app.integrations.webhook_toolkit import (
    ALLOW,
    JsonPatchOp,
    UnreadableObjectError,
    Verdict,
    WebhookEnv,
    WebhookPolicy,
    WebhookRoute,
    read_queue_name,
    refused,
    reviewed_objects,
)

if TYPE_CHECKING:
    from app.models.admissionreview import AdmissionRequest


def replicas(sts: Mapping[str, Any]) -> int:
    """``spec.replicas`` (default 1). Raises ``UnreadableObjectError``."""
    spec = sts.get("spec") or {}
    value = spec.get("replicas", 1) if isinstance(spec, Mapping) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise UnreadableObjectError("spec.replicas", "expected a non-negative integer")
    return value


def mutate_statefulset(sts: Mapping[str, Any], operation: str, policy: WebhookPolicy, *,
                       manage_unlabelled: bool = False) -> list[JsonPatchOp]:
    """The queue onto a queued StatefulSet's pod template (``queue_template_patch``)."""
    return queue_template_patch(sts, operation, policy, "statefulset",
                                manage_unlabelled=manage_unlabelled)


def validate_statefulset_update(old: Mapping[str, Any], new: Mapping[str, Any], username: str,
                                policy: WebhookPolicy) -> list[str]:
    """Queue-name changes and scaling of a queued StatefulSet (module doc); ``[]`` to allow.
    Raises ``UnreadableObjectError``."""
    errors = validate_queue_change(old, new, username, policy, "StatefulSet")
    if username in policy.controller_usernames or not read_queue_name(new, policy.queue_name_label):
        return errors
    if _shape(old) != _shape(new):
        errors.append("spec.template.spec: the pods' shape (requests, ports, nodeSelector, "
                      "affinity, tolerations, priority, ...) cannot change while the "
                      "StatefulSet is queued: its group was admitted for the old one")
    errors += _scaling_errors(replicas(old), replicas(new),
                              (old.get("status") or {}).get("replicas") or 0)
    return errors


def _scaling_errors(before: int, after: int, current: object) -> list[str]:
    """Kueue v0.17.1's replicas rule for a queued StatefulSet (``ValidateUpdate``): N -> 0
    and 0 -> N only, and 0 -> N only once no pod of the last size is left (``current``:
    ``status.replicas``)."""
    if before and after and before != after:
        return [f"spec.replicas: a queued StatefulSet is admitted as one group of {before} "
                f"pods: scale it to 0 first, then to {after}"]
    if not before and after and current:
        return [f"spec.replicas: scaling down is still in progress ({current} pods left): "
                "wait until they are gone"]
    return []


def scale_replicas(scale: Mapping[str, Any], part: str) -> int:
    """``<part>.replicas`` of an autoscaling/v1 Scale (``part``: ``spec`` or ``status``;
    absent = 0, as the API omits a zero). Raises ``UnreadableObjectError``."""
    section = scale.get(part) or {}
    value = section.get("replicas", 0) if isinstance(section, Mapping) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise UnreadableObjectError(f"{part}.replicas", "expected a non-negative integer")
    return value


def validate_statefulset_scale(old: Mapping[str, Any], new: Mapping[str, Any],
                               statefulset: Mapping[str, Any] | None, username: str,
                               policy: WebhookPolicy) -> list[str]:
    """An UPDATE of StatefulSet ``statefulsets/scale`` (``kubectl scale``, an autoscaler):
    ``old``/``new`` the Scale objects, ``statefulset`` the StatefulSet as pykueue's store holds
    it (None: not queued, or not known yet: allowed, and the reconciler's mismatch rule still
    keeps the group within its admission). A queued one gets the same replicas rule as an
    update of ``spec.replicas`` (``_scaling_errors``). Kueue v0.17.1 registers its webhook
    on ``statefulsets`` only, so there a scale bypasses the rule; pykueue closes that gap
    rather than follow a scale the admitted group cannot take. ``[]`` to allow. Raises
    ``UnreadableObjectError``."""
    if statefulset is None or username in policy.controller_usernames \
            or not read_queue_name(statefulset, policy.queue_name_label):
        return []
    return _scaling_errors(scale_replicas(old, "spec"), scale_replicas(new, "spec"),
                           scale_replicas(old, "status"))


def _shape(sts: Mapping[str, Any]) -> str:
    """The role hash of the StatefulSet's pod template (what its group was admitted for)."""
    tpl = (sts.get("spec") or {}).get("template") or {}
    return role_hash({"spec": tpl.get("spec") or {}})


# ----------------------------------------------------------------------------------------------
# Routes (served by ``app.api.webhook``)


def _scale(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
    resource = req.resource
    if req.operation != "UPDATE" or req.sub_resource != "scale" or resource is None \
            or (resource.group, resource.resource) != ("apps", "statefulsets"):
        return ALLOW
    old, new = reviewed_objects(req, lambda o: scale_replicas(o, "spec"),
                        lambda o: scale_replicas(o, "status"))
    assert old is not None
    sts = env.ask("queued_statefulset", req.namespace, req.name)
    return refused(validate_statefulset_scale(
        old, new, sts if isinstance(sts, dict) else None, req.user_info.username,
        env.policy))



ROUTES = (WebhookRoute("/validate-apps-v1-statefulset-scale", "statefulset", _scale),
          *owner_routes("StatefulSet", mutate_statefulset, validate_statefulset_update))
