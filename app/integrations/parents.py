"""Owners whose pods pykueue queues as Pods (Deployment, StatefulSet): their queue goes onto
their pod template (Kueue ``deployment_webhook.go`` / ``statefulset_webhook.go``), pure.

A queued owner (label ``kueue.x-k8s.io/queue-name``, non-empty) has that label, the label
``kueue.x-k8s.io/managed: "true"``, its ``kueue.x-k8s.io/priority-class`` label (if any) and
the annotation ``kueue.x-k8s.io/pod-suspending-parent: <parent>`` set on its pod template, at
CREATE and UPDATE; the owner's label wins over a different one already on the template (Kueue
overwrites it the same way). Its pods are then queued by the Pod webhook.

The queue name may change only while no replica is ready (``status.readyReplicas`` 0), since
the change moves every pod to the new queue, and may not be removed (the pod template keeps
the queue). Pykueue's own identities are exempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.integrations.webhook import (
    JsonPatchOp,
    UnreadableObjectError,
    WebhookPolicy,
    escape_pointer_token,
    read_labels,
    read_queue_name,
)
from app.wire.names import MANAGED_LABEL, PRIORITY_CLASS_LABEL, SUSPENDING_PARENT


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UnreadableObjectError(where, "expected an object")
    return value


def _template_meta(dep: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool, bool]:
    """(template metadata, template present, metadata present). Raises
    ``UnreadableObjectError``."""
    spec = _obj(dep.get("spec"), "spec")
    tpl = _obj(spec.get("template"), "spec.template")
    meta = _obj(tpl.get("metadata"), "spec.template.metadata")
    _obj(meta.get("labels"), "spec.template.metadata.labels")
    _obj(meta.get("annotations"), "spec.template.metadata.annotations")
    return meta, "template" in spec, "metadata" in tpl


def queue_template_patch(dep: Mapping[str, Any], operation: str, policy: WebhookPolicy,
                         parent: str, *, manage_unlabelled: bool = False) -> list[JsonPatchOp]:
    """The JSONPatch that puts the queue on a queued owner's pod template (module doc), with
    ``parent`` (``deployment``, ``statefulset``) as the suspending parent; ``[]`` when it is
    there already or the owner is not queued. ``manage_unlabelled``
    (``jobs.manage_jobs_without_queue_name`` in a managed namespace): an owner without a
    queue name gets the same minus the queue label, as Kueue's ``WorkloadShouldBeSuspended``
    (its pods then wait for one). Raises ``UnreadableObjectError``."""
    if operation not in ("CREATE", "UPDATE"):
        return []
    queue = read_queue_name(dep, policy.queue_name_label)
    if not queue and not manage_unlabelled:
        return []
    want_labels = {MANAGED_LABEL: "true"}
    if queue:
        want_labels[policy.queue_name_label] = queue
    prio = read_labels(dep).get(PRIORITY_CLASS_LABEL)
    if prio:
        want_labels[PRIORITY_CLASS_LABEL] = prio
    want_annotations = {SUSPENDING_PARENT: parent}
    meta, has_template, has_meta = _template_meta(dep)
    if not has_template:
        return []  # the API server refuses a Deployment without a template anyway
    patch: list[JsonPatchOp] = []
    base = "/spec/template/metadata"
    if not has_meta:
        return [{"op": "add", "path": base,
                 "value": {"labels": want_labels, "annotations": want_annotations}}]
    for field, want in (("labels", want_labels), ("annotations", want_annotations)):
        have = meta.get(field)
        if have is None:
            patch.append({"op": "add", "path": f"{base}/{field}", "value": want})
            continue
        for k, v in want.items():
            if have.get(k) != v:
                patch.append({"op": "add", "path": f"{base}/{field}/{escape_pointer_token(k)}",
                              "value": v})
    return patch


def validate_queue_change(old: Mapping[str, Any], new: Mapping[str, Any], username: str,
                          policy: WebhookPolicy, what: str) -> list[str]:
    """Errors (naming the field) for a queue-name change of an owner (``what``: its kind, for
    the messages); ``[]`` to allow. Raises ``UnreadableObjectError``."""
    if username in policy.controller_usernames:
        return []
    old_q = read_queue_name(old, policy.queue_name_label)
    new_q = read_queue_name(new, policy.queue_name_label)
    if old_q == new_q or not old_q:
        return []
    ready = _obj(old.get("status"), "status").get("readyReplicas") or 0
    where = f"metadata.labels[{policy.queue_name_label}]"
    if not new_q:
        return [f"{where}: cannot be removed from a queued {what} (was {old_q!r}); its pods "
                f"keep the queue; delete and re-create the {what} without it"]
    if ready:
        return [f"{where}: can change only while no replica is ready ({ready} ready): the "
                f"change moves every pod from {old_q!r} to {new_q!r}"]
    return []
