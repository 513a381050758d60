"""Owners whose pods pykueue queues as Pods (Deployment, StatefulSet): their queue goes onto
their pod template (Kueue ``deployment_webhook.go`` / ``statefulset_webhook.go``), pure (no
I/O); ``owner_routes`` gives such an owner its two webhook routes.

A queued owner (label ``kueue.x-k8s.io/queue-name``, non-empty) has that label, the label
``kueue.x-k8s.io/managed: "true"``, its ``kueue.x-k8s.io/priority-class`` label (if any) and
the annotation ``kueue.x-k8s.io/pod-suspending-parent: <parent>`` set on its pod template, at
CREATE and UPDATE; the owner's label wins over a different one already on the template (Kueue
overwrites it the same way). Its pods are then queued by the Pod webhook.

The queue name may change only while no replica is ready (``status.readyReplicas`` 0), since
the change moves every pod to the new queue, and may not be removed (the pod template keeps
the queue). Pykueue's own identities are exempt.

A StatefulSet's pods form one pod group (applied by the Pod webhook): ``parent_statefulset``
finds the StatefulSet that queued a pod (its suspending-parent annotation and controller
reference), ``group_name`` names its group ``statefulset-<name>`` (cut and hashed past 63
characters, a label value's limit), ``group_patch`` makes the pod a fast-admission serving
member of a group of ``spec.replicas`` pods.

Malformed objects raise ``UnreadableObjectError`` naming the field.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from app.integrations.webhook_toolkit import (
    ALLOW,
    JsonPatchOp,
    UnreadableObjectError,
    Verdict,
    WebhookEnv,
    WebhookPolicy,
    WebhookRoute,
    escape_pointer_token,
    patched,
    read_labels,
    read_queue_name,
    refused,
    review_of,
    reviewed_objects,
)
from app.wire.names import (
    FAST_ADMISSION_ANNOTATION,
    GROUP_LABEL,
    MANAGED_LABEL,
    PRIORITY_CLASS_LABEL,
    SERVING_ANNOTATION,
    SUSPENDING_PARENT,
    TOTAL_COUNT_ANNOTATION,
)

if TYPE_CHECKING:
    from app.models.admissionreview import AdmissionRequest


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


# ------------------------------------------------------------------ a StatefulSet's pods

GROUP_NAME_MAX = 63  # it is a label value (kueue.x-k8s.io/pod-group-name)


def group_name(statefulset: str) -> str:
    """The pod group (and Workload) name of StatefulSet ``statefulset``:
    ``statefulset-<name>``, or when that exceeds a label value's 63 characters (a name of
    52, which Kubernetes allows) ``statefulset-<name cut>-<8 hex of its sha256>``, so that
    its pods are not refused for the label pykueue gives them."""
    name = f"statefulset-{statefulset}"
    if len(name) <= GROUP_NAME_MAX:
        return name
    digest = hashlib.sha256(statefulset.encode()).hexdigest()[:8]
    return f"{name[:GROUP_NAME_MAX - 9].rstrip('.-')}-{digest}"


def parent_statefulset(pod: Mapping[str, Any]) -> str | None:
    """The name of the StatefulSet that controls ``pod`` and queued it (its template carries
    the suspending-parent annotation ``statefulset``), or None."""
    meta = pod.get("metadata") or {}
    if (meta.get("annotations") or {}).get(SUSPENDING_PARENT) != "statefulset":
        return None
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("kind") == \
                "StatefulSet" and str(ref.get("apiVersion", "")).startswith("apps/"):
            return str(ref.get("name", "")) or None
    return None


def group_patch(pod: Mapping[str, Any], count: int) -> list[JsonPatchOp]:
    """The JSONPatch making a StatefulSet's pod a member of its group of ``count`` pods."""
    sts = parent_statefulset(pod)
    if sts is None:
        return []
    meta = pod.get("metadata") or {}
    want = {TOTAL_COUNT_ANNOTATION: str(count), FAST_ADMISSION_ANNOTATION: "true",
            SERVING_ANNOTATION: "true"}
    patch: list[JsonPatchOp] = []
    if (meta.get("labels") or {}).get(GROUP_LABEL) != group_name(sts):
        patch.append({"op": "add", "path": f"/metadata/labels/{escape_pointer_token(GROUP_LABEL)}",
                      "value": group_name(sts)})
    have = meta.get("annotations") or {}
    for k, v in want.items():
        if have.get(k) != v:
            patch.append({"op": "add",
                          "path": f"/metadata/annotations/{escape_pointer_token(k)}", "value": v})
    return patch


# ----------------------------------------------------------------------------------------------
# Routes of an owner (served by ``app.api.webhook``)


def owner_routes(kind: str, mutate: Callable[..., list[JsonPatchOp]],
                 validate: Callable[..., list[str]]) -> tuple[WebhookRoute, WebhookRoute]:
    """The mutating and validating routes of ``apps/v1`` owner ``kind`` of queued Pods
    (Deployment, StatefulSet: ``/mutate-apps-v1-<kind lower-cased>``, ``/validate-...``,
    framework ``<kind lower-cased>``): ``mutate(obj, operation, policy,
    manage_unlabelled=...)`` on CREATE/UPDATE, ``validate(old, new, username, policy)`` on
    UPDATE."""
    def mutation(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
        if req.operation not in ("CREATE", "UPDATE") or req.sub_resource \
                or not review_of(req, "apps", kind):
            return ALLOW
        _, obj = reviewed_objects(req)
        return patched(mutate(obj, req.operation, env.policy,
                              manage_unlabelled=env.manages_unlabelled_in(req.namespace)))

    def validation(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
        if req.operation != "UPDATE" or req.sub_resource or not review_of(req, "apps", kind):
            return ALLOW
        old, obj = reviewed_objects(req)
        assert old is not None
        return refused(validate(old, obj, req.user_info.username, env.policy))

    name = kind.lower()
    return (WebhookRoute(f"/mutate-apps-v1-{name}", name, mutation),
            WebhookRoute(f"/validate-apps-v1-{name}", name, validation))
