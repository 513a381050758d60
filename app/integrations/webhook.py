"""Admission rules for ``batch/v1`` Jobs: a pure mutation and pure validations (no I/O).

The HTTP adapter (``app.api.webhook``) parses the AdmissionReview, calls these functions on the
raw Job objects (``dict`` as decoded from JSON) and builds the response. Rules, after Kueue's Job
webhook (``pkg/controller/jobs/job/job_webhook.go``, shared/reference/kueue-semantics.md 4.1, 4.2):

- Mutation (CREATE only): a Job with a non-empty ``kueue.x-k8s.io/queue-name`` label and
  ``spec.suspend`` not true gets a JSONPatch (RFC 6902) setting ``/spec/suspend`` to true, so it
  is stored suspended and creates no pods until pykueue admits its Workload. Optionally (Kueue
  LocalQueue defaulting) an unlabelled Job is labelled with the namespace's ``default``
  LocalQueue. Idempotent: applying the patch and mutating again yields no patch.
- Validation on CREATE: the queue-name label is a DNS-1123 subdomain; a labelled Job is created
  suspended (unless by pykueue's own identity).
- Validation on UPDATE: the queue-name label cannot be added, changed or removed while the Job is
  not suspended; it cannot be removed where the namespace has a ``default`` LocalQueue, nor
  while the Job carries the scheduling its admission injected; only
  pykueue's identity may flip ``spec.suspend`` from true to false on a queued Job whose Workload
  is not admitted.

Malformed objects raise ``UnreadableObjectError`` naming the field (e.g. ``spec.suspend``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.wire.fields import WorkloadSpecError, go_bool
from app.wire.names import (
    COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION,
    MAX_EXEC_TIME_LABEL,
    MIN_PARALLELISM_ANNOTATION,
    ORIGINAL_ANNOTATION,
    PODSET_LABEL,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
)
from app.wire.workload import completions_follow_parallelism, job_min_count, job_pod_count

# Kueue LocalQueue defaulting: a LocalQueue with this name in a namespace captures unlabelled Jobs.
DEFAULT_LOCAL_QUEUE = "default"

# A JSONPatch operation: {"op": "add", "path": "/spec/suspend", "value": true}.
JsonPatchOp = dict[str, Any]

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_DNS1123_SUBDOMAIN_MAX = 253


class UnreadableObjectError(ValueError):
    """A Job object (or part of it) does not have the shape the rules need.

    ``field`` is a dotted path inside the object (``""`` for the object itself, ``spec.suspend``,
    ``metadata.labels[kueue.x-k8s.io/queue-name]``); ``problem`` says what is wrong.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field or '<object>'}: {problem}")


@dataclass(frozen=True, slots=True)
class WebhookPolicy:
    """What the rules need from the settings (``Settings.webhook``), as plain data.

    ``controller_usernames``: the identities of pykueue itself (e.g.
    ``system:serviceaccount:pykueue-system:pykueue``), the only ones that may unsuspend a queued
    Job whose Workload is not admitted.
    """

    queue_name_label: str = QUEUE_NAME_LABEL
    controller_usernames: frozenset[str] = field(default_factory=frozenset)


class AdmissionLookup(Protocol):
    """Answers whether the Workload of a Job is admitted (provided by the reconciler).

    ``is_admitted(namespace, job_name, job_uid)``: True when the Workload of the Job with that
    UID has ``status.admission`` and the Admitted condition; False when it exists and is not
    admitted; None when unknown (no Workload yet, caches not synced). The webhook treats None
    as "not admitted". ``job_uid`` matters: a Job deleted and created again under the same
    name is another Job, and must not borrow its predecessor's admission.
    """

    def is_admitted(self, namespace: str, job_name: str, job_uid: str = "") -> bool | None: ...


class DefaultQueueLookup(Protocol):
    """Answers whether a namespace has a LocalQueue named ``default`` that captures its Jobs.

    ``has_default_local_queue(namespace)``: True / False, or None when unknown. The provider
    returns False for namespaces outside ``managedJobsNamespaceSelector`` (Kueue KQ-23).
    """

    def has_default_local_queue(self, namespace: str) -> bool | None: ...


# ----------------------------------------------------------------------------------------------
# JSON Pointer (RFC 6901)


def escape_pointer_token(token: str) -> str:
    """Escape one JSON Pointer reference token: ``~`` -> ``~0``, then ``/`` -> ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def json_pointer(*tokens: str) -> str:
    """Join reference tokens into a JSON Pointer: ``("metadata", "labels", "a/b")`` ->
    ``/metadata/labels/a~1b``."""
    return "".join("/" + escape_pointer_token(t) for t in tokens)


# ----------------------------------------------------------------------------------------------
# Reading a Job object


def _json_type(value: object) -> str:
    """The JSON type name of a decoded value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _optional_object(value: object, where: str) -> Mapping[str, Any] | None:
    """``value`` as a mapping, None when absent/null; UnreadableObjectError for other types."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise UnreadableObjectError(where, f"expected an object, got {_json_type(value)}")
    return value


def read_job(obj: object) -> Mapping[str, Any]:
    """Return ``obj`` as a Job object, or raise UnreadableObjectError (field ``""``)."""
    if not isinstance(obj, Mapping):
        raise UnreadableObjectError("", f"expected a Job object, got {_json_type(obj)}")
    return obj


def read_labels(job: Mapping[str, Any]) -> Mapping[str, str]:
    """``metadata.labels`` of ``job`` (empty when absent); every value must be a string."""
    metadata = _optional_object(job.get("metadata"), "metadata")
    if metadata is None:
        return {}
    labels = _optional_object(metadata.get("labels"), "metadata.labels")
    if labels is None:
        return {}
    for key, value in labels.items():
        if not isinstance(value, str):
            raise UnreadableObjectError(
                f"metadata.labels[{key}]", f"expected a string, got {_json_type(value)}"
            )
    return labels


def read_queue_name(job: Mapping[str, Any], label: str = QUEUE_NAME_LABEL) -> str:
    """The LocalQueue name from the queue-name label; ``""`` when absent (an unmanaged Job)."""
    return read_labels(job).get(label, "")


def read_suspend(job: Mapping[str, Any]) -> bool:
    """``spec.suspend`` (batch/v1 Job); absent or null means false."""
    spec = _optional_object(job.get("spec"), "spec")
    if spec is None:
        return False
    suspend = spec.get("suspend")
    if suspend is None:
        return False
    if not isinstance(suspend, bool):
        raise UnreadableObjectError(
            "spec.suspend", f"expected a boolean, got {_json_type(suspend)}"
        )
    return suspend


def read_name(job: Mapping[str, Any]) -> str:
    """``metadata.name`` (``""`` when absent, e.g. with ``generateName`` before create)."""
    metadata = _optional_object(job.get("metadata"), "metadata") or {}
    name = metadata.get("name")
    return name if isinstance(name, str) else ""


def is_batch_job(job: Mapping[str, Any]) -> bool:
    """False when the object declares another kind/apiVersion than ``batch/*`` ``Job``."""
    kind = job.get("kind")
    api_version = job.get("apiVersion")
    if kind is not None and kind != "Job":
        return False
    return api_version is None or (
        isinstance(api_version, str) and api_version.startswith("batch/")
    )


# ----------------------------------------------------------------------------------------------
# Mutation


def _set_label_op(job: Mapping[str, Any], label: str, value: str) -> JsonPatchOp:
    """A JSONPatch op that sets ``metadata.labels[label]``, adding missing parent maps whole."""
    metadata = _optional_object(job.get("metadata"), "metadata")
    if metadata is None:
        return {"op": "add", "path": "/metadata", "value": {"labels": {label: value}}}
    if _optional_object(metadata.get("labels"), "metadata.labels") is None:
        return {"op": "add", "path": "/metadata/labels", "value": {label: value}}
    return {"op": "add", "path": json_pointer("metadata", "labels", label), "value": value}


def _suspend_op(job: Mapping[str, Any]) -> JsonPatchOp:
    """A JSONPatch op that sets ``spec.suspend`` to true (``add`` replaces an existing member)."""
    if _optional_object(job.get("spec"), "spec") is None:
        return {"op": "add", "path": "/spec", "value": {"suspend": True}}
    return {"op": "add", "path": json_pointer("spec", "suspend"), "value": True}


def mutate(
    job: object,
    operation: str,
    *,
    queue_name_label: str = QUEUE_NAME_LABEL,
    default_queue: str | None = None,
    manage_unlabelled: bool = False,
) -> list[JsonPatchOp]:
    """The JSONPatch for a Job under admission; ``[]`` when nothing changes.

    ``operation``: the AdmissionReview operation; only ``CREATE`` mutates (a Job's pod template
    is immutable after create). ``default_queue``: the LocalQueue to label an unlabelled Job
    with (Kueue LocalQueue defaulting), None to leave unlabelled Jobs alone, unless
    ``manage_unlabelled`` (Kueue ``manageJobsWithoutQueueName``): then it is suspended
    without a label (its Workload waits for a LocalQueue).
    Raises UnreadableObjectError when the object, ``metadata``, ``metadata.labels`` or
    ``spec.suspend`` has the wrong JSON type. Idempotent: after applying the returned patch,
    ``mutate`` returns ``[]``. Rule: Kueue ``WorkloadShouldBeSuspended`` (suspend on create).
    """
    if operation != "CREATE":
        return []
    job = read_job(job)
    if not is_batch_job(job):
        return []
    patch: list[JsonPatchOp] = []
    if not read_queue_name(job, queue_name_label):
        if default_queue:
            patch.append(_set_label_op(job, queue_name_label, default_queue))
        elif not manage_unlabelled:
            return []
    if not read_suspend(job):
        patch.append(_suspend_op(job))
    return patch


def pod_count(job: Mapping[str, Any]) -> int | None:
    """``min(parallelism, completions)`` (Kueue's podSet count), None when unreadable."""
    try:
        return job_pod_count(job)
    except WorkloadSpecError:
        return None


def mutate_update(
    old_job: object, new_job: object, username: str, policy: WebhookPolicy
) -> list[JsonPatchOp]:
    """The JSONPatch for updating a running queued Job; ``[]`` when nothing changes.

    A queued Job (non-empty queue-name label) that runs (not suspended before nor after) and
    whose pod count (``min(parallelism, completions)``) changes in this update is suspended in
    the same write: Kubernetes lets a running Job's ``spec.parallelism`` change, and the Job
    controller would create the extra pods before anyone could stop them. The change itself is
    kept; pykueue then queues the Job again for its new shape, as Kueue does when a job no
    longer matches its Workload (``NoMatchingWorkload``), only without the window in which
    more pods run than were admitted. pykueue's own identities are exempt. Raises
    UnreadableObjectError.
    """
    old_job, new_job = read_job(old_job), read_job(new_job)
    if not is_batch_job(new_job) or username in policy.controller_usernames:
        return []
    if not read_queue_name(new_job, policy.queue_name_label):
        return []
    if read_suspend(old_job) or read_suspend(new_job):
        return []
    if MIN_PARALLELISM_ANNOTATION in ((new_job.get("metadata") or {}).get("annotations") or {}):
        return []  # partial admission: Kueue refuses the change (validate_update)
    old, new = pod_count(old_job), pod_count(new_job)
    if old is not None and old == new:
        return []
    return [_suspend_op(new_job)]


# ----------------------------------------------------------------------------------------------
# Validation


def _label_field(label: str) -> str:
    return f"metadata.labels[{label}]"


def _queue_name_format_errors(queue: str, label: str) -> list[str]:
    """Errors for a queue-name label value that is not a DNS-1123 subdomain (LocalQueue name)."""
    if not queue or (len(queue) <= _DNS1123_SUBDOMAIN_MAX and _DNS1123_SUBDOMAIN.fullmatch(queue)):
        return []
    return [
        f"{_label_field(label)}: {queue!r} is not a valid LocalQueue name: it must be a DNS-1123 "
        "subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter or "
        f"digit, at most {_DNS1123_SUBDOMAIN_MAX} characters)"
    ]


def empty_queue_name_errors(old: Mapping[str, Any] | None, new: Mapping[str, Any],
                            label: str = QUEUE_NAME_LABEL) -> list[str]:
    """Errors for a queue-name label present with an empty value on ``new``, at CREATE
    (``old`` None) or when an UPDATE empties it; ``[]`` otherwise. Kueue v0.17.1 validates
    the label's value, when the label is present, as a DNS-1123 subdomain
    (``jobframework.ValidateQueueName`` in every kind's ``ValidateJobOnCreate``), which ""
    is not: an empty name is refused rather than read as "not queued" (absent). An object
    stored with it before (pykueue read it as unqueued) may still be changed otherwise."""
    value = read_labels(new).get(label)
    if value != "" or (old is not None and read_labels(old).get(label) == ""):
        return []
    return [f"{_label_field(label)}: must not be empty: \"\" is not a valid LocalQueue name "
            "(a DNS-1123 subdomain, as Kueue requires); name a LocalQueue, or remove the "
            "label to leave the object unqueued"]


def carries_injection(obj: Mapping[str, Any]) -> bool:
    """True when pykueue started ``obj`` with an admission and has not stopped it since: its
    start record (``ORIGINAL_ANNOTATION``) is on it, or (a Job) its pod template carries the
    ``kueue.x-k8s.io/podset`` label the start injects, which a tenant cannot take off a
    started Job's immutable template even after dropping the record."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    anns = meta.get("annotations") if isinstance(meta, Mapping) else None
    if isinstance(anns, Mapping) and ORIGINAL_ANNOTATION in anns:
        return True
    tpl = (obj.get("spec") or {}).get("template") if isinstance(obj.get("spec"), Mapping) \
        else None
    labels = ((tpl.get("metadata") or {}).get("labels") or {}) if isinstance(tpl, Mapping) \
        else {}
    return isinstance(labels, Mapping) and PODSET_LABEL in labels


def injected_label_removal_errors(old: Mapping[str, Any], old_queue: str, new_queue: str,
                                  username: str, policy: WebhookPolicy, what: str) -> list[str]:
    """Errors for removing the queue name from an object (``what``: its kind) that still
    carries the scheduling its admission injected (``carries_injection``), by anyone but
    pykueue; ``[]`` otherwise. Unqueued, the object would leave pykueue's sight with its
    admission's nodeSelector and tolerations and could be resumed on the flavor's nodes with
    no quota; pykueue's stop removes the injection (and the record), after which the label
    may go. Goes beyond Kueue v0.17.1, which lets the label go whenever the job is
    suspended."""
    if not old_queue or new_queue or username in policy.controller_usernames \
            or not carries_injection(old):
        return []
    return [f"{_label_field(policy.queue_name_label)}: cannot be removed (was {old_queue!r}) "
            f"while the {what} carries the scheduling pykueue injected when it admitted it "
            f"(annotation {ORIGINAL_ANNOTATION}): unqueued, it would run with its admission's "
            "nodeSelector and tolerations on no quota; delete it, or remove the label once "
            "pykueue has stopped it (the annotation is gone then)"]


def _controllers(policy: WebhookPolicy) -> str:
    return ", ".join(sorted(policy.controller_usernames)) or "<none configured>"


def validate_create(job: object, username: str, policy: WebhookPolicy) -> list[str]:
    """Errors (each naming a field and saying why) for creating ``job``; ``[]`` to allow.

    A queued Job (non-empty queue-name label) must have a valid LocalQueue name and be created
    suspended: the mutating webhook has run before validation, so an unsuspended queued Job
    means the MutatingWebhookConfiguration is missing. pykueue's own identities are exempt from
    the suspend rule. Raises UnreadableObjectError. Rule: Kueue ``ValidateJobOnCreate``.
    """
    job = read_job(job)
    if not is_batch_job(job):
        return []
    label = policy.queue_name_label
    queue = read_queue_name(job, label)
    errors = _queue_name_format_errors(queue, label)
    if queue and not read_suspend(job) and username not in policy.controller_usernames:
        errors.append(
            f"spec.suspend: must be true when a Job queued in LocalQueue {queue!r} is created "
            f"(only pykueue admits it); pykueue's mutating webhook /mutate-batch-v1-job sets it, "
            "so check that its MutatingWebhookConfiguration is installed"
        )
    if queue:
        errors += _workload_field_errors(job)
    return errors


def queue_name_errors(job: object, policy: WebhookPolicy) -> list[str]:
    """Errors for a Job's queue-name label that is not a valid LocalQueue name, ``[]`` to
    allow (what a Job an ancestor queues is still checked for: Kueue ``ValidateJobOnCreate``
    and ``ValidateJobOnUpdate`` run for every Job). Raises UnreadableObjectError."""
    job = read_job(job)
    if not is_batch_job(job):
        return []
    return _queue_name_format_errors(read_queue_name(job, policy.queue_name_label),
                                     policy.queue_name_label)


def _workload_field_errors(job: Mapping[str, Any]) -> list[str]:
    """What the Job's Workload could not be built from (Kueue ``ValidateJobOnCreate``): the
    ``kueue.x-k8s.io/job-min-parallelism`` annotation (an integer in (0, pod count)) and the
    ``kueue.x-k8s.io/max-exec-time-seconds`` label (an integer > 0)."""
    count = pod_count(job)
    if count is None:
        return []
    errors = []
    try:
        job_min_count(job, count, strict=True)
    except WorkloadSpecError as exc:
        errors.append(str(exc))
    raw = ((job.get("metadata") or {}).get("labels") or {}).get(MAX_EXEC_TIME_LABEL)
    if raw is not None and not (isinstance(raw, str) and raw.isascii() and raw.isdigit()
                                and int(raw) > 0):
        errors.append(f"metadata.labels[{MAX_EXEC_TIME_LABEL}]: must be an integer greater "
                      f"than 0, got {raw!r}")
    return errors + _completions_sync_errors(job)


_SYNC_FIELD = f"metadata.annotations[{COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION}]"


def _sync_annotation(job: Mapping[str, Any]) -> Any:
    return ((job.get("metadata") or {}).get("annotations") or {}).get(
        COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION)


def _completions_sync_errors(job: Mapping[str, Any]) -> list[str]:
    """Kueue ``validateSyncCompletionCreate``: ``job-completions-equal-parallelism`` is a
    boolean; when true the Job is Indexed and its ``completions`` equals its ``parallelism``
    (both default 1), because a partial admission then changes both together."""
    raw = _sync_annotation(job)
    if raw is None:
        return []
    try:
        enabled = go_bool(raw, _SYNC_FIELD)
    except WorkloadSpecError as exc:
        return [str(exc)]
    if not enabled:
        return []
    spec = job.get("spec") or {}
    errors = []
    if spec.get("completionMode") != "Indexed":
        errors.append(f"{_SYNC_FIELD}: should not be enabled for NonIndexed jobs")
    parallelism = spec.get("parallelism") if spec.get("parallelism") is not None else 1
    completions = spec.get("completions") if spec.get("completions") is not None else 1
    if parallelism != completions:
        errors.append(f"spec.completions: should be equal to parallelism ({parallelism}) when "
                      f"{COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION} is true, got {completions}")
    return errors


def validate_update(
    old_job: object,
    new_job: object,
    username: str,
    workload_admitted: bool | None,
    policy: WebhookPolicy,
    *,
    default_local_queue_exists: bool | None = None,
    manages_unlabelled: bool = False,
) -> list[str]:
    """Errors (each naming a field and saying why) for updating ``old_job`` to ``new_job``.

    ``username``: the requester (AdmissionReview ``userInfo.username``). ``workload_admitted``:
    whether the Job's Workload is admitted; None (unknown) counts as not admitted.
    ``default_local_queue_exists``: whether the namespace has a ``default`` LocalQueue; None
    (unknown) counts as no, because without LocalQueue defaulting an unlabelled Job escapes
    nothing it could not escape at create. ``manages_unlabelled``: an unlabelled Job is queued
    too (Kueue ``manageJobsWithoutQueueName`` in a managed namespace, no managed owner), so
    only pykueue may unsuspend it. Raises UnreadableObjectError.
    Rules: Kueue ``ValidateJobOnUpdate`` (queue-name immutable while not suspended; not
    removable with a default LocalQueue), ``job-completions-equal-parallelism`` checked as
    at create when an update changes it, and pykueue's "only the admitter unsuspends".
    """
    old_job, new_job = read_job(old_job), read_job(new_job)
    if not is_batch_job(new_job):
        return []
    label = policy.queue_name_label
    where = _label_field(label)
    old_queue, new_queue = read_queue_name(old_job, label), read_queue_name(new_job, label)
    old_suspended, new_suspended = read_suspend(old_job), read_suspend(new_job)
    errors: list[str] = []
    if new_queue != old_queue:
        errors += _queue_name_format_errors(new_queue, label)
        if not new_suspended:
            if not old_queue:
                change = f"cannot be added ({new_queue!r})"
                fix = "set spec.suspend: true in the same update"
            elif not new_queue:
                change = f"cannot be removed (was {old_queue!r})"
                fix = "suspend the Job first"
            else:
                change = f"is immutable: cannot change {old_queue!r} to {new_queue!r}"
                fix = "suspend the Job first"
            errors.append(f"{where}: {change} while the Job is not suspended; {fix}")
        errors += injected_label_removal_errors(old_job, old_queue, new_queue, username,
                                                policy, "Job")
        if old_queue and not new_queue and default_local_queue_exists:
            errors.append(
                f"{where}: cannot be removed (was {old_queue!r}): the namespace has a LocalQueue "
                f"named {DEFAULT_LOCAL_QUEUE!r}, which queues every unlabelled Job"
            )
    queued_in = new_queue or old_queue
    if (
        queued_in
        and not old_suspended
        and not new_suspended
        and MIN_PARALLELISM_ANNOTATION in ((new_job.get("metadata") or {}).get("annotations")
                                           or {})
        and (old_job.get("spec") or {}).get("parallelism")
        != (new_job.get("spec") or {}).get("parallelism")
        and username not in policy.controller_usernames
    ):
        errors.append(
            "spec.parallelism: is immutable while a Job with partial admission "
            f"({MIN_PARALLELISM_ANNOTATION}) runs; suspend it first")
    if (
        queued_in
        and not old_suspended
        and not new_suspended
        and completions_follow_parallelism(old_job) != completions_follow_parallelism(new_job)
    ):
        errors.append(f"{_SYNC_FIELD}: is immutable while the Job is not suspended")
    if queued_in and _sync_annotation(old_job) != _sync_annotation(new_job):
        # Kueue validates it on UPDATE as on CREATE; added later to a NonIndexed Job, the
        # partial start that sets completions would be refused by the API server.
        errors += _completions_sync_errors(new_job)
    if (
        (queued_in or manages_unlabelled)
        and old_suspended
        and not new_suspended
        and username not in policy.controller_usernames
        and workload_admitted is not True
    ):
        known = "is not admitted" if workload_admitted is False else "is not known to be admitted"
        where_q = f"in LocalQueue {queued_in!r}" if queued_in else \
            "without a queue name (manageJobsWithoutQueueName)"
        errors.append(
            f"spec.suspend: only pykueue ({_controllers(policy)}) may set it to false on a Job "
            f"queued {where_q} whose Workload {known} (requested by "
            f"{username or '<anonymous>'!r}); pykueue unsuspends the Job when it admits it"
        )
    return errors


def priority_class_label_errors(old: Mapping[str, Any], new: Mapping[str, Any],
                                suspended: bool) -> list[str]:
    """Errors for a change of the ``kueue.x-k8s.io/priority-class`` label of a queued object
    (``suspended``: the new object is suspended): it cannot be added to a running one (its
    admitted Workload has no class to change) and never removed; a change of class is
    allowed, running or not (the Workload's priority follows). Kueue v0.17.1
    ``ValidateUpdateForWorkloadPriorityClassName``. Raises ``UnreadableObjectError``."""
    before = str(read_labels(old).get(PRIORITY_CLASS_LABEL) or "")
    after = str(read_labels(new).get(PRIORITY_CLASS_LABEL) or "")
    where = f"metadata.labels[{PRIORITY_CLASS_LABEL}]"
    if not suspended and not before and after:
        return [f"{where}: a WorkloadPriorityClass cannot be added to a Job that is not "
                "suspended"]
    if before and not after:
        return [f"{where}: a WorkloadPriorityClass cannot be removed (was {before!r})"]
    return []


# The labels by which a pod's controller (the Job controller, JobSet, the Kubeflow operators,
# KubeRay) selects its pods, and pykueue's podSet label. Removing one from a running pod of an
# admitted job releases the pod from its controller, which then makes a replacement: the
# released pod keeps running outside the admission.
OWNER_SELECTOR_LABELS = frozenset({
    "batch.kubernetes.io/controller-uid", "controller-uid", "batch.kubernetes.io/job-name",
    "job-name", PODSET_LABEL})
OWNER_SELECTOR_PREFIXES = ("jobset.sigs.k8s.io/", "training.kubeflow.org/", "ray.io/")


def owner_label_errors(old_pod: Mapping[str, Any] | None, new_pod: Mapping[str, Any],
                       username: str, policy: WebhookPolicy) -> list[str]:
    """Why an UPDATE of a Pod that carries ``kueue.x-k8s.io/podset`` (a pod of an admitted
    job) is refused: it removes or changes a label its controller selects it by
    (``OWNER_SELECTOR_LABELS``, ``OWNER_SELECTOR_PREFIXES``). Adding labels is allowed, and
    pykueue's own identity may change any. Beyond Kueue, which leaves pod labels to RBAC.
    Raises ``UnreadableObjectError`` (``read_labels``)."""
    if old_pod is None or username in policy.controller_usernames:
        return []
    old = read_labels(old_pod)
    if PODSET_LABEL not in old:
        return []
    new = read_labels(new_pod)
    changed = sorted(k for k, v in old.items()
                     if (k in OWNER_SELECTOR_LABELS or k.startswith(OWNER_SELECTOR_PREFIXES))
                     and new.get(k) != v)
    if not changed:
        return []
    return [f"metadata.labels: {', '.join(changed)} cannot be removed or changed on a pod of an "
            f"admitted job (its controller would release the pod and start another, running "
            f"more pods than were admitted); only {_controllers(policy)} may"]
