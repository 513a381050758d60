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

Owners whose pods form pod groups (the Pod webhook applies the membership) are declared as
``GroupParent``s: the suspending-parent annotation their pods carry, how to find the owner of
such a pod, and the ``Membership`` (group, total count, role, fast admission) of its pod. A
kind's folder exposes its ``GROUP_PARENTS`` (``app.integrations`` collects them); the Pod
webhook reads them from its ``WebhookEnv``, so no kind imports another. A StatefulSet's pods
(``STATEFULSET_GROUPS``) form one group: ``parent_statefulset`` finds the StatefulSet that
queued a pod (its suspending-parent annotation and controller reference), ``group_name``
names its group ``statefulset-<name>`` (cut and hashed past 63 characters, a label value's
limit), and the pod is a fast-admission serving member of a group of ``spec.replicas`` pods.
``group_patch`` writes a membership onto a pod.

Malformed objects raise ``UnreadableObjectError`` naming the field.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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
    ROLE_HASH_ANNOTATION,
    SERVING_ANNOTATION,
    SUSPENDING_PARENT,
    TOTAL_COUNT_ANNOTATION,
)
from app.wire.owners import controller_of_object

if TYPE_CHECKING:
    from app.models.admissionreview import AdmissionRequest


def object_at(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` as an object (``{}`` when absent). Raises ``UnreadableObjectError`` naming
    ``where`` for any other type."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UnreadableObjectError(where, "expected an object")
    return value


def _template_meta(dep: Mapping[str, Any], path: tuple[str, ...] = ("spec", "template")
                   ) -> tuple[Mapping[str, Any], bool, bool]:
    """(template metadata, template present, metadata present) of the pod template at
    ``path``. Raises ``UnreadableObjectError``."""
    node: Mapping[str, Any] = dep
    for i, part in enumerate(path[:-1]):
        node = object_at(node.get(part), ".".join(path[:i + 1]))
    where = ".".join(path)
    tpl = object_at(node.get(path[-1]), where)
    meta = object_at(tpl.get("metadata"), f"{where}.metadata")
    object_at(meta.get("labels"), f"{where}.metadata.labels")
    object_at(meta.get("annotations"), f"{where}.metadata.annotations")
    return meta, path[-1] in node, "metadata" in tpl


def queue_template_patch(dep: Mapping[str, Any], operation: str, policy: WebhookPolicy,
                         parent: str, *, manage_unlabelled: bool = False,
                         template: tuple[str, ...] = ("spec", "template"),
                         annotations: Mapping[str, str] | None = None) -> list[JsonPatchOp]:
    """The JSONPatch that puts the queue on a queued owner's pod template (module doc), with
    ``parent`` (``deployment``, ``statefulset``) as the suspending parent; ``[]`` when it is
    there already or the owner is not queued. ``manage_unlabelled``
    (``jobs.manage_jobs_without_queue_name`` in a managed namespace): an owner without a
    queue name gets the same minus the queue label, as Kueue's ``WorkloadShouldBeSuspended``
    (its pods then wait for one). ``template``: the path of the pod template (an owner with
    several, a LeaderWorkerSet, asks once per template); ``annotations``: more annotations to
    put there. A template that already names another suspending parent (an object another
    kind made and queues, e.g. a LeaderWorkerSet's StatefulSets) is left alone, as Kueue's
    StatefulSet webhook does. Raises ``UnreadableObjectError``."""
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
    want_annotations = {SUSPENDING_PARENT: parent, **(annotations or {})}
    meta, has_template, has_meta = _template_meta(dep, template)
    if not has_template:
        return []  # the API server refuses a Deployment without a template anyway
    if (meta.get("annotations") or {}).get(SUSPENDING_PARENT) not in (None, parent):
        return []
    patch: list[JsonPatchOp] = []
    base = "/" + "/".join((*template, "metadata"))
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
    ready = object_at(old.get("status"), "status").get("readyReplicas") or 0
    where = f"metadata.labels[{policy.queue_name_label}]"
    if not new_q:
        return [f"{where}: cannot be removed from a queued {what} (was {old_q!r}); its pods "
                f"keep the queue; delete and re-create the {what} without it"]
    if ready:
        return [f"{where}: can change only while no replica is ready ({ready} ready): the "
                f"change moves every pod from {old_q!r} to {new_q!r}"]
    return []


# ------------------------------------------------------------------ owners of pod groups

GROUP_NAME_MAX = 63  # it is a label value (kueue.x-k8s.io/pod-group-name)


@dataclass(frozen=True, slots=True)
class Membership:
    """A pod's place in its owner's pod group: ``group`` (the group's and its Workload's
    name), ``total`` (the group's pod count), ``role`` (its podSet name; None: the role hash
    the Pod webhook computes from the pod's shape), ``fast_admission`` (the Workload is
    built from the first pod with the whole count: an owner that creates its pods one by
    one). Every such group is a serving group (it never finishes)."""

    group: str
    total: int
    role: str | None = None
    fast_admission: bool = False


Ask = Callable[..., Any]  # ``WebhookEnv.ask``: a question to the reconciler's stores


@dataclass(frozen=True, slots=True)
class GroupParent:
    """An owner kind whose pods form pod groups: ``kind`` (for messages), ``framework`` (the
    ``integrations.frameworks`` name that enables it), ``annotation`` (the suspending-parent
    value its pod templates carry), ``owner(pod)`` (the owner's name, None: not such a pod)
    and ``membership(pod, owner, ask)`` (None: unknown yet; the pod is then refused and its
    owner's controller creates it again)."""

    kind: str
    framework: str
    annotation: str
    owner: Callable[[Mapping[str, Any]], str | None]
    membership: Callable[[Mapping[str, Any], str, Ask], Membership | None]


def group_name(owner: str, prefix: str = "statefulset") -> str:
    """The pod group (and Workload) name ``<prefix>-<owner>`` (``statefulset-<name>``), or
    when that exceeds a label value's 63 characters ``<prefix>-<owner cut>-<8 hex of its
    sha256>``, so that its pods are not refused for the label pykueue gives them."""
    name = f"{prefix}-{owner}"
    if len(name) <= GROUP_NAME_MAX:
        return name
    digest = hashlib.sha256(owner.encode()).hexdigest()[:8]
    return f"{name[:GROUP_NAME_MAX - 9].rstrip('.-')}-{digest}"


def controller_of(pod: Mapping[str, Any], kind: str, api_group: str) -> str | None:
    """The name of ``pod``'s controller when it is an ``api_group``/``kind`` object, else
    None."""
    ref = controller_of_object(pod)
    if ref is None or ref.kind != kind or ref.group != api_group:
        return None
    return ref.name or None


def parent_statefulset(pod: Mapping[str, Any]) -> str | None:
    """The name of the StatefulSet that controls ``pod`` and queued it (its template carries
    the suspending-parent annotation ``statefulset``), or None."""
    meta = pod.get("metadata") or {}
    if (meta.get("annotations") or {}).get(SUSPENDING_PARENT) != "statefulset":
        return None
    return controller_of(pod, "StatefulSet", "apps")


def _statefulset_membership(pod: Mapping[str, Any], sts: str, ask: Ask) -> Membership | None:
    """A queued StatefulSet's pod: group ``statefulset-<name>`` of ``spec.replicas`` pods
    (asked of the stores: ``statefulset_replicas``), fast admission."""
    count = ask("statefulset_replicas", str((pod.get("metadata") or {}).get("namespace", "")),
                sts)
    if not isinstance(count, int) or isinstance(count, bool):
        return None
    return Membership(group_name(sts), count, fast_admission=True)


STATEFULSET_GROUPS = GroupParent("StatefulSet", "statefulset", "statefulset",
                                 parent_statefulset, _statefulset_membership)


def group_parent(pod: Mapping[str, Any], parents: Iterable[GroupParent]
                 ) -> tuple[GroupParent, str] | None:
    """(the parent kind, the owner's name) of a pod an owner of pod groups queued, or None."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(SUSPENDING_PARENT)
    for parent in parents:
        if value == parent.annotation:
            owner = parent.owner(pod)
            if owner is not None:
                return parent, owner
    return None


def group_patch(pod: Mapping[str, Any], member: Membership) -> list[JsonPatchOp]:
    """The JSONPatch making ``pod`` a serving member of ``member``'s group (its label, total
    count, serving and fast-admission flags, its role when the owner names it)."""
    meta = pod.get("metadata") or {}
    want = {TOTAL_COUNT_ANNOTATION: str(member.total), SERVING_ANNOTATION: "true"}
    if member.fast_admission:
        want[FAST_ADMISSION_ANNOTATION] = "true"
    if member.role is not None:
        want[ROLE_HASH_ANNOTATION] = member.role
    patch: list[JsonPatchOp] = []
    if (meta.get("labels") or {}).get(GROUP_LABEL) != member.group:
        patch.append({"op": "add", "path": f"/metadata/labels/{escape_pointer_token(GROUP_LABEL)}",
                      "value": member.group})
    have = meta.get("annotations") or {}
    for k, v in want.items():
        if have.get(k) != v:
            patch.append({"op": "add",
                          "path": f"/metadata/annotations/{escape_pointer_token(k)}", "value": v})
    return patch


# ----------------------------------------------------------------------------------------------
# Routes of an owner (served by ``app.api.webhook``)


def owner_routes(kind: str, mutate: Callable[..., list[JsonPatchOp]],
                 validate: Callable[..., list[str]], *, group: str = "apps",
                 version: str = "v1", framework: str | None = None,
                 unlabelled_validation: bool = False) -> tuple[WebhookRoute, WebhookRoute]:
    """The mutating and validating routes of owner ``kind`` of queued Pods (API ``group``
    and ``version``; Deployment, StatefulSet: ``/mutate-apps-v1-<kind lower-cased>``,
    ``/validate-...``; dots of the group become dashes, as in Kueue's paths), framework
    ``framework`` (default ``<kind lower-cased>``): ``mutate(obj, operation, policy,
    manage_unlabelled=...)`` on CREATE/UPDATE, ``validate(old, new, username, policy)`` on
    UPDATE (with ``unlabelled_validation`` also ``manage_unlabelled=...``)."""
    def mutation(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
        if req.operation not in ("CREATE", "UPDATE") or req.sub_resource \
                or not review_of(req, group, kind):
            return ALLOW
        _, obj = reviewed_objects(req)
        return patched(mutate(obj, req.operation, env.policy,
                              manage_unlabelled=env.manages_unlabelled_in(req.namespace)))

    def validation(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
        if req.operation != "UPDATE" or req.sub_resource or not review_of(req, group, kind):
            return ALLOW
        old, obj = reviewed_objects(req)
        assert old is not None
        extra = {"manage_unlabelled": env.manages_unlabelled_in(req.namespace)} \
            if unlabelled_validation else {}
        return refused(validate(old, obj, req.user_info.username, env.policy, **extra))

    name = kind.lower()
    prefix = f"{group.replace('.', '-')}-{version}-{name}"
    return (WebhookRoute(f"/mutate-{prefix}", framework or name, mutation),
            WebhookRoute(f"/validate-{prefix}", framework or name, validation))
