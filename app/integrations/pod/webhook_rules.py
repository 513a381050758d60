"""Admission rules for plain Pods (Kueue ``pkg/controller/jobs/pod/pod_webhook.go``,
kueue-integrations.md 2.1-2.2), pure: no I/O; routes ``/mutate--v1-pod`` (CREATE) and
``/validate--v1-pod`` (CREATE, UPDATE) in ``ROUTES``. Malformed objects raise
``UnreadableObjectError`` naming the field.

A Pod labelled ``kueue.x-k8s.io/queue-name`` (non-empty) and not controlled by an object of
a job kind pykueue manages (a Job's pods are that Job's business), nor by a pod of a queued
object whose pods make pods (a Spark executor, its driver's: ``_owner_kinds``, as Kueue's
ancestor walk), is *managed*: at CREATE it
gets the label ``kueue.x-k8s.io/managed: "true"`` and the scheduling gate
``kueue.x-k8s.io/admission``, so kube-scheduler does not place it until pykueue admits its
Workload and removes the gate.

With ``jobs.manage_jobs_without_queue_name`` (Kueue ``manageJobsWithoutQueueName``) a Pod
*without* the queue label is managed the same way when its namespace matches
``managed_jobs_namespace_selector`` and no managed job kind controls it (Kueue's pod webhook
``Default``: kube-system and pykueue-system are outside the default selector; a Job's,
JobSet's, ... pods are their owner's business). Its Workload has no queue name and waits
("LocalQueue  doesn't exist") until the Pod is labelled. Nothing else is exempt, as in Kueue:
a DaemonSet's or a ReplicaSet's pods in a managed namespace are gated too. A Pod created
with ``spec.nodeName`` (which skips kube-scheduler) gets the gate too, and the API server
refuses a gated Pod that names its node: so it is never created.

Validation (CREATE and UPDATE), for managed Pods:
- ``kueue.x-k8s.io/managed`` may only be ``"true"``;
- a queued Pod must be created with the gate (the mutating webhook adds it; a Pod without it
  means the MutatingWebhookConfiguration is missing);
- only pykueue's identities may remove the gate (Kueue leaves this to RBAC; a tenant who may
  edit Pods in a namespace could otherwise run a Pod that was never admitted);
- a pod group (label ``kueue.x-k8s.io/pod-group-name`` with the annotation
  ``kueue.x-k8s.io/pod-group-total-count``, an integer of at least 1) has both or neither,
  a DNS-1123 group name, and keeps its group, count and role hash (``role_hash``, computed
  here at CREATE: never taken from the user) for life;
- the queue name may change only while the Pod is gated, cannot be removed from a gated Pod
  (nothing would lift the gate), and cannot be added to a Pod that already runs (it was never
  admitted).

At CREATE, a Pod whose controller is an object of a managed job kind (left ungated, as in
Kueue) is held to what the queued object above it was admitted for: its DRA claims, its
podSet label and how many pods of its podSet run (the route asks the reconciler's stores:
``app.controllers.pod_create_check``; beyond Kueue v0.17.1, which leaves such pods to their
owner).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.integrations.parents import (
    STATEFULSET_GROUPS,
    Ask,
    GroupParent,
    group_parent,
    group_patch,
)
from app.integrations.podsets import role_hash
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
    ADMISSION_GATE,
    FAST_ADMISSION_ANNOTATION,
    GROUP_LABEL,
    MANAGED_LABEL,
    ROLE_HASH_ANNOTATION,
    SERVING_ANNOTATION,
    TOTAL_COUNT_ANNOTATION,
)
from app.wire.owners import controller_of_object

if TYPE_CHECKING:
    from app.models.admissionreview import AdmissionRequest

__all__ = ["ADMISSION_GATE", "GROUP_LABEL", "MANAGED_LABEL", "ROLE_HASH_ANNOTATION",
           "TOTAL_COUNT_ANNOTATION", "group_of", "is_gated", "is_managed", "mutate_pod",
           "role_hash", "scheduling_gates", "validate_pod"]

_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata") or {}
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    if ann is None:
        return {}
    if not isinstance(ann, Mapping):
        raise UnreadableObjectError("metadata.annotations", "expected an object")
    return ann


def group_of(pod: Mapping[str, Any]) -> str:
    """The Pod's group name (``kueue.x-k8s.io/pod-group-name``), ``""`` for a single Pod."""
    return str(read_labels(pod).get(GROUP_LABEL, ""))


MAX_GROUP_COUNT = 100_000  # far above any real group; bounds the integer the rules parse


def group_total(pod: Mapping[str, Any]) -> int | None:
    """The Pod's ``pod-group-total-count`` as an integer in [1, MAX_GROUP_COUNT], None when
    absent or not such an integer (short strings only: never a huge int parse)."""
    total = _annotations(pod).get(TOTAL_COUNT_ANNOTATION)
    if not (isinstance(total, str) and 0 < len(total) <= 6 and total.isascii()
            and total.isdigit()):
        return None
    value = int(total)
    return value if 1 <= value <= MAX_GROUP_COUNT else None


def _group_errors(pod: Mapping[str, Any]) -> list[str]:
    group = group_of(pod)
    total = _annotations(pod).get(TOTAL_COUNT_ANNOTATION)
    if not group and total is None:
        return []
    where_g = f"metadata.labels[{GROUP_LABEL}]"
    where_t = f"metadata.annotations[{TOTAL_COUNT_ANNOTATION}]"
    if not group:
        return [f"{where_t}: set without the label {GROUP_LABEL}"]
    errors = []
    if len(group) > 253 or not _DNS1123.fullmatch(group):
        errors.append(f"{where_g}: {group!r} is not a DNS-1123 subdomain")
    if total is None:
        errors.append(f"{where_t}: required with the label {GROUP_LABEL}")
    elif group_total(pod) is None:
        shown = total if not isinstance(total, str) or len(total) <= 20 else total[:20] + "..."
        errors.append(f"{where_t}: must be an integer from 1 to {MAX_GROUP_COUNT}, got {shown!r}")
    return errors


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise UnreadableObjectError("spec", "expected an object")
    return spec


def scheduling_gates(pod: Mapping[str, Any]) -> list[str]:
    """Names in ``spec.schedulingGates``. Raises ``UnreadableObjectError``."""
    gates = _spec(pod).get("schedulingGates") or []
    if not isinstance(gates, Sequence) or isinstance(gates, str):
        raise UnreadableObjectError("spec.schedulingGates", "expected a list")
    out = []
    for i, g in enumerate(gates):
        if not isinstance(g, Mapping) or not isinstance(g.get("name"), str):
            raise UnreadableObjectError(f"spec.schedulingGates[{i}]", "expected {name: string}")
        out.append(g["name"])
    return out


def is_gated(pod: Mapping[str, Any]) -> bool:
    """True while the Pod carries pykueue's admission gate."""
    return ADMISSION_GATE in scheduling_gates(pod)


def controlled_by(pod: Mapping[str, Any], managed_kinds: frozenset[tuple[str, str]]) -> bool:
    """True when the Pod's controller ownerReference is an object of one of
    ``managed_kinds`` ((api group, kind), e.g. ``("batch", "Job")``)."""
    ref = controller_of_object(pod)
    return ref is not None and (ref.group, ref.kind) in managed_kinds


def is_managed(pod: Mapping[str, Any], policy: WebhookPolicy,
               managed_kinds: frozenset[tuple[str, str]], *,
               manage_unlabelled: bool = False) -> bool:
    """A queued Pod that no managed job kind controls; with ``manage_unlabelled`` (the
    setting is on and the Pod's namespace is managed) also one without a queue name
    (module doc)."""
    if controlled_by(pod, managed_kinds):
        return False
    return manage_unlabelled or bool(read_queue_name(pod, policy.queue_name_label))


DEFAULT_GROUP_PARENTS: tuple[GroupParent, ...] = (STATEFULSET_GROUPS,)


def mutate_pod(pod: Mapping[str, Any], operation: str, policy: WebhookPolicy,
               managed_kinds: frozenset[tuple[str, str]], ask: Ask | None = None,
               *, manage_unlabelled: bool = False,
               parents: Sequence[GroupParent] = DEFAULT_GROUP_PARENTS) -> list[JsonPatchOp]:
    """The JSONPatch for a Pod under admission: on CREATE of a managed Pod, the managed label
    and the admission gate (each only when missing: idempotent); for a member of a pod group
    the role hash (unless its owner names the role); for a pod of an owner of pod groups
    (``parents``, ``app.integrations.parents.GroupParent``) its group membership, which the
    owner's rule may ask of the stores with ``ask(method, *args)`` (None: unknown, no
    membership). ``manage_unlabelled``: a Pod without a queue name is managed too
    (``is_managed``). Raises ``UnreadableObjectError``. Rule: Kueue pod webhook ``Default``."""
    if operation != "CREATE" or not is_managed(pod, policy, managed_kinds,
                                               manage_unlabelled=manage_unlabelled):
        return []
    patch: list[JsonPatchOp] = []
    found = group_parent(pod, parents)
    member = found[0].membership(pod, found[1], ask) if found and ask is not None else None
    if member is not None:
        patch += group_patch(pod, member)
    labels = read_labels(pod)
    if not (pod.get("metadata") or {}).get("labels") and not any(
            op["path"].startswith("/metadata/labels/") for op in patch):
        # An unlabelled Pod (jobs.manage_jobs_without_queue_name) may have no labels at all.
        patch.append({"op": "add", "path": "/metadata/labels", "value": {MANAGED_LABEL: "true"}})
    elif labels.get(MANAGED_LABEL) != "true":
        patch.append({"op": "add",
                      "path": f"/metadata/labels/{escape_pointer_token(MANAGED_LABEL)}",
                      "value": "true"})
    named_role = member is not None and member.role is not None
    if not named_role and (group_of(pod) or any(
            op["path"].endswith(escape_pointer_token(GROUP_LABEL)) for op in patch)):
        ann = _annotations(pod)
        want = role_hash(pod)
        if ann.get(ROLE_HASH_ANNOTATION) != want:
            if "annotations" not in (pod.get("metadata") or {}):
                patch.append({"op": "add", "path": "/metadata/annotations",
                              "value": {ROLE_HASH_ANNOTATION: want}})
            else:
                patch.append({"op": "add", "path": "/metadata/annotations/"
                              f"{escape_pointer_token(ROLE_HASH_ANNOTATION)}", "value": want})
    gates = scheduling_gates(pod)
    if ADMISSION_GATE not in gates:
        if "spec" not in pod:
            patch.append({"op": "add", "path": "/spec",
                          "value": {"schedulingGates": [{"name": ADMISSION_GATE}]}})
        elif not _spec(pod).get("schedulingGates"):
            patch.append({"op": "add", "path": "/spec/schedulingGates",
                          "value": [{"name": ADMISSION_GATE}]})
        else:
            patch.append({"op": "add", "path": "/spec/schedulingGates/-",
                          "value": {"name": ADMISSION_GATE}})
    return patch


def validate_pod(old: Mapping[str, Any] | None, new: Mapping[str, Any], username: str,
                 policy: WebhookPolicy,
                 managed_kinds: frozenset[tuple[str, str]], *,
                 manage_unlabelled: bool = False,
                 parents: Sequence[GroupParent] = DEFAULT_GROUP_PARENTS) -> list[str]:
    """Errors (each naming a field) for creating (``old`` None) or updating a Pod; ``[]`` to
    allow. ``manage_unlabelled``, ``parents``: as ``mutate_pod``'s (an unlabelled Pod of a
    managed namespace must be created gated). Raises ``UnreadableObjectError``."""
    ours = username in policy.controller_usernames
    label = f"metadata.labels[{policy.queue_name_label}]"
    errors: list[str] = []
    managed = read_labels(new).get(MANAGED_LABEL)
    if managed is not None and managed != "true":
        errors.append(f"metadata.labels[{MANAGED_LABEL}]: the only allowed value is 'true'")
    new_managed = is_managed(new, policy, managed_kinds, manage_unlabelled=manage_unlabelled)
    if new_managed:
        errors += _group_errors(new)
    reserved = [a for a in (FAST_ADMISSION_ANNOTATION, SERVING_ANNOTATION)
                if a in _annotations(new)]
    parent = group_parent(new, parents)
    if reserved and not ours and parent is None \
            and _annotations(new).get(reserved[0]) != (_annotations(old or {}).get(reserved[0])):
        errors.append(f"metadata.annotations[{reserved[0]}]: set by pykueue on the pods of "
                      "an owner of pod groups only (a StatefulSet's, a LeaderWorkerSet's)")
    if old is None:
        if manage_unlabelled and not ours and _spec(new).get("nodeName") \
                and controlled_by(new, managed_kinds):
            # Left ungated for its owner (Kueue's rule), it would skip kube-scheduler and the
            # extender; no job kind's controller names the node of the pods it creates.
            errors.append("spec.nodeName: a Pod whose controller is a job kind pykueue "
                          "manages cannot be created with its node set (it would run outside "
                          "any admission); let kube-scheduler place it")
        if parent is not None and new_managed and not group_of(new) and not ours:
            errors.append(f"metadata.labels[{GROUP_LABEL}]: pykueue does not know "
                          f"{parent[0].kind} {parent[1]!r} yet, so it cannot size the pod's "
                          "group; its controller will create the pod again")
        if new_managed and not is_gated(new) and not ours:
            queue = read_queue_name(new, policy.queue_name_label)
            which = (f"queued in LocalQueue {queue!r}" if queue else f"without {label} in a "
                     "namespace pykueue manages (jobs.manage_jobs_without_queue_name)")
            errors.append(f"spec.schedulingGates: a Pod {which} must be created with the "
                          f"scheduling gate {ADMISSION_GATE} (pykueue's mutating webhook "
                          "/mutate--v1-pod adds it: check that its "
                          "MutatingWebhookConfiguration is installed"
                          + ("" if queue else " and sees unlabelled Pods") + ")")
        return errors
    # A Pod pykueue queued keeps its managed label for life, and that label (not the mutable
    # ownerReferences, which a tenant can edit) decides that the Pod's rules apply.
    old_managed = is_managed(old, policy, managed_kinds) or \
        read_labels(old).get(MANAGED_LABEL) == "true"
    if old_managed and not ours:
        if read_labels(old).get(MANAGED_LABEL) == "true" and managed != "true":
            errors.append(f"metadata.labels[{MANAGED_LABEL}]: cannot be removed from a queued "
                          "Pod (pykueue would lose sight of it)")
        if (new_ref := controller_of_object(new)) is not None \
                and new_ref != controller_of_object(old):
            # Adding one could make the Pod look like another kind's (a Job's) and lift these
            # rules; removing one (orphaning by the garbage collector) stays allowed.
            errors.append("metadata.ownerReferences: a controller reference cannot be added to "
                          "a queued Pod")
        for what, before, after in (
                (f"metadata.labels[{GROUP_LABEL}]", group_of(old), group_of(new)),
                (f"metadata.annotations[{TOTAL_COUNT_ANNOTATION}]",
                 _annotations(old).get(TOTAL_COUNT_ANNOTATION),
                 _annotations(new).get(TOTAL_COUNT_ANNOTATION)),
                (f"metadata.annotations[{ROLE_HASH_ANNOTATION}]",
                 _annotations(old).get(ROLE_HASH_ANNOTATION),
                 _annotations(new).get(ROLE_HASH_ANNOTATION))):
            if before != after:
                errors.append(f"{what}: is immutable (was {before!r})")
    old_q = read_queue_name(old, policy.queue_name_label)
    new_q = read_queue_name(new, policy.queue_name_label)
    if old_managed and is_gated(old) and not is_gated(new) and not ours:
        errors.append(f"spec.schedulingGates: only pykueue may remove {ADMISSION_GATE} (by "
                      f"{username or '<anonymous>'!r}); it does when the Pod's Workload is "
                      "admitted")
    if new_q != old_q and not ours:
        if not old_managed and new_managed and not is_gated(old):
            errors.append(f"{label}: cannot be added to a Pod that is not gated: it would "
                          "run without admission; create a new Pod with the label")
        elif old_managed and not is_gated(old):
            errors.append(f"{label}: is immutable once the Pod is admitted (was {old_q!r})")
        elif old_managed and not new_q:
            errors.append(f"{label}: cannot be removed from a gated Pod (was {old_q!r}): "
                          f"nothing would remove {ADMISSION_GATE}; delete the Pod instead")
    return errors


# ----------------------------------------------------------------------------------------------
# Routes (served by ``app.api.webhook``)


def _owner_kinds(pod: Mapping[str, Any], env: WebhookEnv) -> frozenset[tuple[str, str]]:
    """The managed kinds for a Pod at CREATE: ``env.managed_kinds()``, and the core Pod
    when the Pod's controller is a pod of a queued object whose pods make pods (a Spark
    executor of a queued SparkApplication's driver: ``made_by_queued_pod``), which is that
    object's business as Kueue v0.17.1's ancestor walk (``FindAncestorJobManagedByKueue``)
    finds it: not gated, counted by its podSet instead."""
    kinds = env.managed_kinds()
    ref = controller_of_object(pod)
    if ref is not None and ref.is_pod \
            and env.ask("made_by_queued_pod", pod) is True:
        return kinds | {("", "Pod")}
    return kinds


def _mutation(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
    if req.operation != "CREATE" or req.sub_resource or not review_of(req, "", "Pod"):
        return ALLOW
    _, pod = reviewed_objects(req, scheduling_gates)
    return patched(mutate_pod(
        pod, req.operation, env.policy, _owner_kinds(pod, env), env.ask,
        manage_unlabelled=env.manages_unlabelled_in(req.namespace),
        parents=env.group_parents()))


def _validation(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
    if req.operation not in ("CREATE", "UPDATE") or req.sub_resource \
            or not review_of(req, "", "Pod"):
        return ALLOW
    old, pod = reviewed_objects(req, scheduling_gates)
    kinds = _owner_kinds(pod, env) if old is None else env.managed_kinds()
    errors = validate_pod(
        old, pod, req.user_info.username, env.policy, kinds,
        manage_unlabelled=old is None and env.manages_unlabelled_in(req.namespace),
        parents=env.group_parents())
    if not errors and old is None and controlled_by(pod, kinds) \
            and req.user_info.username not in env.policy.controller_usernames:
        # A pod left to its controller, a queued object's: held to what that object's
        # admission covers (``app.controllers.pod_create_check``; unknown allows).
        errors = list(env.ask("pod_create_errors", pod, bool(req.dry_run)) or [])
    return refused(errors)



ROUTES = (WebhookRoute("/mutate--v1-pod", "pod", _mutation),
          WebhookRoute("/validate--v1-pod", "pod", _validation))
