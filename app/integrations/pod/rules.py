"""Admission rules for plain Pods (Kueue ``pkg/controller/jobs/pod/pod_webhook.go``,
kueue-integrations.md 2.1-2.2), pure: no I/O.

A Pod labelled ``kueue.x-k8s.io/queue-name`` (non-empty) and not controlled by an object of
a job kind pykueue manages (a Job's pods are that Job's business) is *managed*: at CREATE it
gets the label ``kueue.x-k8s.io/managed: "true"`` and the scheduling gate
``kueue.x-k8s.io/admission``, so kube-scheduler does not place it until pykueue admits its
Workload and removes the gate.

Validation (CREATE and UPDATE), for managed Pods:
- ``kueue.x-k8s.io/managed`` may only be ``"true"``;
- a queued Pod must be created with the gate (the mutating webhook adds it; a Pod without it
  means the MutatingWebhookConfiguration is missing);
- only pykueue's identities may remove the gate (Kueue leaves this to RBAC; a tenant who may
  edit Pods in a namespace could otherwise run a Pod that was never admitted);
- the queue name may change only while the Pod is gated, cannot be removed from a gated Pod
  (nothing would lift the gate), and cannot be added to a Pod that already runs (it was never
  admitted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.core.webhook_rules import (
    JsonPatchOp,
    UnreadableObjectError,
    WebhookPolicy,
    escape_pointer_token,
    read_labels,
    read_queue_name,
)

ADMISSION_GATE = "kueue.x-k8s.io/admission"
MANAGED_LABEL = "kueue.x-k8s.io/managed"


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
    meta = pod.get("metadata") or {}
    for ref in meta.get("ownerReferences") or [] if isinstance(meta, Mapping) else []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            group = str(ref.get("apiVersion", "")).rpartition("/")[0]
            if (group, str(ref.get("kind", ""))) in managed_kinds:
                return True
    return False


def is_managed(pod: Mapping[str, Any], policy: WebhookPolicy,
               managed_kinds: frozenset[tuple[str, str]]) -> bool:
    """A queued Pod that no managed job kind controls (module doc)."""
    return bool(read_queue_name(pod, policy.queue_name_label)) and \
        not controlled_by(pod, managed_kinds)


def mutate_pod(pod: Mapping[str, Any], operation: str, policy: WebhookPolicy,
               managed_kinds: frozenset[tuple[str, str]]) -> list[JsonPatchOp]:
    """The JSONPatch for a Pod under admission: on CREATE of a managed Pod, the managed label
    and the admission gate (each only when missing: idempotent). Raises
    ``UnreadableObjectError``. Rule: Kueue pod webhook ``Default``."""
    if operation != "CREATE" or not is_managed(pod, policy, managed_kinds):
        return []
    patch: list[JsonPatchOp] = []
    labels = read_labels(pod)
    if labels.get(MANAGED_LABEL) != "true":
        patch.append({"op": "add",
                      "path": f"/metadata/labels/{escape_pointer_token(MANAGED_LABEL)}",
                      "value": "true"})
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
                 managed_kinds: frozenset[tuple[str, str]]) -> list[str]:
    """Errors (each naming a field) for creating (``old`` None) or updating a Pod; ``[]`` to
    allow. Raises ``UnreadableObjectError``."""
    ours = username in policy.controller_usernames
    label = f"metadata.labels[{policy.queue_name_label}]"
    errors: list[str] = []
    managed = read_labels(new).get(MANAGED_LABEL)
    if managed is not None and managed != "true":
        errors.append(f"metadata.labels[{MANAGED_LABEL}]: the only allowed value is 'true'")
    new_managed = is_managed(new, policy, managed_kinds)
    if old is None:
        if new_managed and not is_gated(new) and not ours:
            errors.append(f"spec.schedulingGates: a Pod queued in LocalQueue "
                          f"{read_queue_name(new, policy.queue_name_label)!r} must be created "
                          f"with the scheduling gate {ADMISSION_GATE} (pykueue's mutating "
                          "webhook /mutate--v1-pod adds it: check that its "
                          "MutatingWebhookConfiguration is installed)")
        return errors
    old_managed = is_managed(old, policy, managed_kinds)
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
