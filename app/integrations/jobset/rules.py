"""Admission rules for JobSets (pure; ``app.api.webhook`` serves them), after Kueue's JobSet
webhook (``pkg/controller/jobs/jobset/jobset_webhook.go`` with the shared ``BaseWebhook``,
kueue-integrations.md 1.6):

- Mutation, CREATE: a JobSet with a non-empty ``kueue.x-k8s.io/queue-name`` label and
  ``spec.suspend`` not true gets ``spec.suspend: true`` (Kueue ``WorkloadShouldBeSuspended``),
  so JobSet creates no Job until pykueue admits its Workload.
- Validation, CREATE: the queue name is a DNS-1123 subdomain; a queued JobSet is created
  suspended (unless by pykueue itself), which catches a missing mutating webhook, and has at
  most 8 replicatedJobs (a Workload holds at most 8 podSets; Kueue v1beta2 ``podSets``
  maxItems), so it is refused at once rather than left without a Workload.
- Validation, UPDATE: the queue name is immutable while the JobSet is not suspended (Kueue: it
  may change only when the new object is suspended), and keeps its format.

Malformed objects raise ``UnreadableObjectError`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.integrations.webhook import (
    JsonPatchOp,
    WebhookPolicy,
    _queue_name_format_errors,
    _suspend_op,
    read_job,
    read_queue_name,
    read_suspend,
)

MUTATE_PATH = "/mutate-jobset-x-k8s-io-v1alpha2-jobset"
MAX_POD_SETS = 8


def mutate_jobset(js: object, operation: str, policy: WebhookPolicy) -> list[JsonPatchOp]:
    """The JSONPatch for a JobSet under admission (module doc); ``[]`` when nothing changes.
    Idempotent. Raises ``UnreadableObjectError``."""
    if operation != "CREATE":
        return []
    obj = read_job(js)
    if not read_queue_name(obj, policy.queue_name_label) or read_suspend(obj):
        return []
    return [_suspend_op(obj)]


def validate_jobset(old: Mapping[str, Any] | None, new: object, username: str,
                    policy: WebhookPolicy) -> list[str]:
    """Errors (each naming the field and saying why) for creating (``old`` None) or updating a
    JobSet; ``[]`` to allow. Raises ``UnreadableObjectError``."""
    obj = read_job(new)
    label = policy.queue_name_label
    where = f"metadata.labels[{label}]"
    queue = read_queue_name(obj, label)
    if old is None:
        errors = _queue_name_format_errors(queue, label)
        rjobs = (obj.get("spec") or {}).get("replicatedJobs") if isinstance(
            obj.get("spec"), Mapping) else None
        if queue and isinstance(rjobs, list) and len(rjobs) > MAX_POD_SETS:
            errors.append(f"spec.replicatedJobs: {len(rjobs)} replicatedJobs; a queued JobSet "
                          f"may have at most {MAX_POD_SETS} (one Workload podSet each)")
        if queue and not read_suspend(obj) and username not in policy.controller_usernames:
            errors.append(f"spec.suspend: must be true when a JobSet queued in LocalQueue "
                          f"{queue!r} is created (only pykueue admits it); pykueue's mutating "
                          f"webhook {MUTATE_PATH} sets it, so check that its "
                          "MutatingWebhookConfiguration is installed")
        return errors
    before = read_queue_name(read_job(old), label)
    if before == queue:
        return []
    errors = _queue_name_format_errors(queue, label)
    if not read_suspend(obj):
        errors.append(f"{where}: cannot change {before!r} to {queue!r} while the JobSet is not "
                      "suspended; set spec.suspend: true in the same update, or first")
    return errors
