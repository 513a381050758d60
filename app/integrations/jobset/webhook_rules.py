"""Admission rules for JobSets (pure; ``app.api.webhook`` serves them), after Kueue's JobSet
webhook (``pkg/controller/jobs/jobset/jobset_webhook.go`` with the shared ``BaseWebhook``,
kueue-integrations.md 1.6): the operators' shared rules (``app.integrations.crdrules``) with
the lever ``spec.suspend``:

- Mutation, CREATE: a JobSet with a non-empty ``kueue.x-k8s.io/queue-name`` label and
  ``spec.suspend`` not true gets ``spec.suspend: true`` (Kueue ``WorkloadShouldBeSuspended``),
  so JobSet creates no Job until pykueue admits its Workload.
- Mutation, CREATE: ``spec.managedBy: kueue.x-k8s.io/multikueue`` on a queued JobSet whose
  ``managedBy`` is unset or JobSet's own (``jobset.sigs.k8s.io/jobset-controller``) when its
  LocalQueue's ClusterQueue has a MultiKueue AdmissionCheck (Kueue
  ``ApplyDefaultForManagedBy``): the manager's JobSet operator leaves it alone.
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

from app.core.multikueue import JOBSET
from app.integrations.crdrules import CrdRules
from app.integrations.webhook_toolkit import JsonPatchOp, WebhookPolicy

MAX_POD_SETS = 8


def _at_most_eight(js: Mapping[str, Any]) -> list[str]:
    spec = js.get("spec")
    rjobs = spec.get("replicatedJobs") if isinstance(spec, Mapping) else None
    if isinstance(rjobs, list) and len(rjobs) > MAX_POD_SETS:
        return [f"spec.replicatedJobs: {len(rjobs)} replicatedJobs; a queued JobSet may have at "
                f"most {MAX_POD_SETS} (one Workload podSet each)"]
    return []


RULES = CrdRules("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", ("spec", "suspend"),
                 extra_create=_at_most_eight, multikueue=JOBSET)
MUTATE_PATH = RULES.mutate_path


def mutate_jobset(js: object, operation: str, policy: WebhookPolicy) -> list[JsonPatchOp]:
    """The JSONPatch for a JobSet under admission (module doc); ``[]`` when nothing changes.
    Idempotent. Raises ``UnreadableObjectError``."""
    return RULES.mutate(js, operation, policy)


def validate_jobset(old: Mapping[str, Any] | None, new: object, username: str,
                    policy: WebhookPolicy) -> list[str]:
    """Errors (each naming the field and saying why) for creating (``old`` None) or updating a
    JobSet; ``[]`` to allow. Raises ``UnreadableObjectError``."""
    return RULES.validate(old, new, username, policy)
