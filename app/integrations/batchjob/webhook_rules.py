"""Admission rules for ``batch/v1`` Jobs: a pure mutation and pure validations (no I/O), and
their routes (``ROUTES``: ``/mutate-batch-v1-job``, ``/validate-batch-v1-job``).

The HTTP adapter (``app.api.webhook``) parses the AdmissionReview and calls the routes'
deciders, which read the raw Job objects (``dict`` as decoded from JSON); a Job a managed
ancestor queues (a JobSet's) is left to that ancestor, only its label's format checked and,
with ``webhook.child_job_creators``, who may make it run. Rules, after Kueue's Job
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

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.core.multikueue import MULTIKUEUE_CONTROLLER
from app.integrations.framework import controller_identity
from app.integrations.webhook_toolkit import (
    ALLOW,
    DEFAULT_LOCAL_QUEUE,
    JsonPatchOp,
    UnreadableObjectError,
    Verdict,
    WebhookEnv,
    WebhookPolicy,
    WebhookRoute,
    injected_label_removal_errors,
    json_pointer,
    json_type,
    label_field,
    optional_object,
    patched,
    prebuilt_name_errors,
    priority_class_label_errors,
    queue_name_format_errors,
    read_name,
    read_object,
    read_queue_name,
    read_reviewed,
    refused,
    set_label_op,
    unsuspend_errors,
)
from app.wire.fields import WorkloadSpecError, go_bool
from app.wire.names import (
    COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION,
    MAX_EXEC_TIME_LABEL,
    MIN_PARALLELISM_ANNOTATION,
    QUEUE_NAME_LABEL,
)
from app.wire.owners import controller_of_object
from app.wire.podtemplate import (
    requests_beyond,
    template_claims,
    template_differences,
    template_requests,
)
from app.wire.workload import completions_follow_parallelism, job_min_count, job_pod_count

if TYPE_CHECKING:
    from app.models.admissionreview import AdmissionRequest

BUILTIN_JOB_CONTROLLER = "kubernetes.io/job-controller"

# ----------------------------------------------------------------------------------------------
# Reading a Job


def read_suspend(job: Mapping[str, Any]) -> bool:
    """``spec.suspend`` (batch/v1 Job); absent or null means false."""
    spec = optional_object(job.get("spec"), "spec")
    if spec is None:
        return False
    suspend = spec.get("suspend")
    if suspend is None:
        return False
    if not isinstance(suspend, bool):
        raise UnreadableObjectError(
            "spec.suspend", f"expected a boolean, got {json_type(suspend)}"
        )
    return suspend


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


def _suspend_op(job: Mapping[str, Any]) -> JsonPatchOp:
    """A JSONPatch op that sets ``spec.suspend`` to true (``add`` replaces an existing member)."""
    if optional_object(job.get("spec"), "spec") is None:
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
    job = read_object(job)
    if not is_batch_job(job):
        return []
    patch: list[JsonPatchOp] = []
    if not read_queue_name(job, queue_name_label):
        if default_queue:
            patch.append(set_label_op(job, queue_name_label, default_queue))
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
    old_job, new_job = read_object(old_job), read_object(new_job)
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


def validate_create(job: object, username: str, policy: WebhookPolicy) -> list[str]:
    """Errors (each naming a field and saying why) for creating ``job``; ``[]`` to allow.

    A queued Job (non-empty queue-name label) must have a valid LocalQueue name and be created
    suspended: the mutating webhook has run before validation, so an unsuspended queued Job
    means the MutatingWebhookConfiguration is missing. pykueue's own identities are exempt from
    the suspend rule. Raises UnreadableObjectError. Rule: Kueue ``ValidateJobOnCreate``.
    """
    job = read_object(job)
    if not is_batch_job(job):
        return []
    label = policy.queue_name_label
    queue = read_queue_name(job, label)
    errors = queue_name_format_errors(queue, label)
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
    job = read_object(job)
    if not is_batch_job(job):
        return []
    return queue_name_format_errors(read_queue_name(job, policy.queue_name_label),
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
    old_job, new_job = read_object(old_job), read_object(new_job)
    if not is_batch_job(new_job):
        return []
    label = policy.queue_name_label
    where = label_field(label)
    old_queue, new_queue = read_queue_name(old_job, label), read_queue_name(new_job, label)
    old_suspended, new_suspended = read_suspend(old_job), read_suspend(new_job)
    errors = prebuilt_name_errors(old_job, new_job, new_suspended)
    if new_queue != old_queue:
        errors += queue_name_format_errors(new_queue, label)
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
    errors += unsuspend_errors("spec.suspend", "Job", queued_in, manages_unlabelled,
                               (old_suspended, new_suspended), username, workload_admitted,
                               policy)
    return errors


# ----------------------------------------------------------------------------------------------
# Routes (served by ``app.api.webhook``)


def _job_uid(job: Mapping[str, Any]) -> str:
    uid = (job.get("metadata") or {}).get("uid")
    return uid if isinstance(uid, str) else ""


def _is_job_review(req: AdmissionRequest) -> bool:
    """True for a review about a batch Job (by ``request.kind``, else by the object's own kind)."""
    kind = req.kind or req.request_kind
    if kind is not None and kind.kind:
        return kind.group == "batch" and kind.kind == "Job"
    return not isinstance(req.object, dict) or is_batch_job(req.object)


def _read_job(value: object, where: str) -> dict[str, Any]:
    """The Job at ``where`` (``request.object``), checked for every field the rules read, so
    UnreadableObjectError names the full path (``request.oldObject.spec.suspend``)."""
    return read_reviewed(value, where, read_suspend)


def _mutation(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
    if req.operation not in ("CREATE", "UPDATE") or req.sub_resource \
            or not _is_job_review(req):
        return ALLOW
    policy = env.policy
    job = _read_job(req.object, "request.object")
    if env.has_managed_ancestor(job):
        # Kueue WorkloadShouldBeSuspended: a job an ancestor queues (a JobSet's Job) is left
        # to that ancestor and its operator, its queue label notwithstanding.
        return ALLOW
    if req.operation == "UPDATE":
        old_job = _read_job(req.old_object, "request.oldObject")
        patch = mutate_update(old_job, job, req.user_info.username, policy)
        if read_queue_name(job, policy.queue_name_label) \
                and not read_queue_name(old_job, policy.queue_name_label):
            patch += replacement_policy_ops(job, env)  # queued by this update
        return patched(patch)
    default_queue, manage = env.unqueued_defaults(job, req.namespace)
    patch = mutate(job, req.operation, queue_name_label=policy.queue_name_label,
                   default_queue=default_queue, manage_unlabelled=manage)
    queue = read_queue_name(job, policy.queue_name_label) or default_queue
    if queue or manage:
        patch += replacement_policy_ops(job, env)
    if queue and can_default_managed_by(job) and env.lookup(
            "admission_lookup", "uses_multikueue", req.namespace, queue):
        patch.append(managed_by_op(job))
    return patched(patch)


def _replacing_on_failure(env: WebhookEnv) -> bool:
    """``jobs.pod_replacement_policy`` is ``Failed`` (pykueue's opt-in)."""
    jobs = env.settings.jobs if env.settings is not None else None
    return jobs is not None and jobs.pod_replacement_policy == "Failed"


def replacement_policy_ops(job: Mapping[str, Any], env: WebhookEnv) -> list[JsonPatchOp]:
    """With ``jobs.pod_replacement_policy: Failed``, the JSONPatch op setting a queued Job's
    ``spec.podReplacementPolicy`` to ``Failed`` (batch/v1; the API server has defaulted it
    to ``TerminatingOrFailed`` before any webhook sees it, so an explicit value cannot be
    told from the default): a pod being deleted is replaced only once it is terminal, so
    the Job never runs more pods than its admission while a deleted one runs out its grace
    period (brk32 H4). ``[]`` without the setting (Kueue's), or when already ``Failed``."""
    spec = optional_object(job.get("spec"), "spec")
    if not _replacing_on_failure(env) or spec is None \
            or spec.get("podReplacementPolicy") == "Failed":
        return []
    return [{"op": "add", "path": json_pointer("spec", "podReplacementPolicy"),
             "value": "Failed"}]


def _replacement_policy_errors(old_job: Mapping[str, Any], job: Mapping[str, Any],
                               username: str, env: WebhookEnv) -> list[str]:
    """With ``jobs.pod_replacement_policy: Failed``, an UPDATE (by anyone but pykueue) of a
    queued Job changing ``spec.podReplacementPolicy`` away from ``Failed`` is refused (the
    field is mutable in batch/v1)."""
    if not _replacing_on_failure(env) or username in env.policy.controller_usernames:
        return []
    before = (optional_object(old_job.get("spec"), "spec") or {}).get("podReplacementPolicy")
    after = (optional_object(job.get("spec"), "spec") or {}).get("podReplacementPolicy")
    if before != "Failed" or after == "Failed":
        return []
    return [f"spec.podReplacementPolicy: a queued Job keeps 'Failed' (pykueue "
            f"jobs.pod_replacement_policy: Failed), not {after!r}: a replacement pod started "
            "while the pod it replaces still runs would run beyond the Job's admission"]


def can_default_managed_by(job: Mapping[str, Any]) -> bool:
    """Kueue Job ``CanDefaultManagedBy``: ``spec.managedBy`` unset or the built-in Job
    controller's."""
    spec = optional_object(job.get("spec"), "spec") or {}
    return spec.get("managedBy") in (None, "", BUILTIN_JOB_CONTROLLER)


def managed_by_op(job: Mapping[str, Any]) -> JsonPatchOp:
    """The JSONPatch op setting ``spec.managedBy`` to ``kueue.x-k8s.io/multikueue``: a Job
    queued to a ClusterQueue with a MultiKueue AdmissionCheck runs on a worker, so the
    manager's Job controller must leave it alone (Kueue ``ApplyDefaultForManagedBy``)."""
    if optional_object(job.get("spec"), "spec") is None:
        return {"op": "add", "path": "/spec", "value": {"managedBy": MULTIKUEUE_CONTROLLER}}
    return {"op": "add", "path": json_pointer("spec", "managedBy"),
            "value": MULTIKUEUE_CONTROLLER}


def _validation(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
    if req.operation not in ("CREATE", "UPDATE") or req.sub_resource or not _is_job_review(req):
        return ALLOW
    policy = env.policy
    username = req.user_info.username
    job = _read_job(req.object, "request.object")
    if env.has_managed_ancestor(job):
        # Its ancestor's operator creates and resumes it (a JobSet resumes its Jobs once
        # admitted): only the label's format is pykueue's business (Kueue ValidateJobOnCreate),
        # and, when configured, who may make it run.
        errors = queue_name_errors(job, policy) + _child_runner_errors(req, env, job) \
            + _adopted_running_errors(req, env, job) + _child_share_errors(req, env, job) \
            + _child_template_errors(req, env, job)
    elif req.operation == "CREATE":
        errors = validate_create(job, username, policy)
    else:
        old_job = _read_job(req.old_object, "request.oldObject")
        name = req.name or read_name(job)
        admitted = env.lookup("admission_lookup", "is_admitted", req.namespace, name,
                           _job_uid(old_job) or _job_uid(job))
        jobs = env.jobs
        has_default = (jobs is None or jobs.local_queue_defaulting) and env.lookup(
            "default_queue_lookup", "has_default_local_queue", req.namespace
        )
        manages = env.queues_unlabelled(old_job, req.namespace)
        errors = validate_update(
            old_job, job, username, admitted, policy, default_local_queue_exists=has_default,
            manages_unlabelled=manages,
        )
        if manages or read_queue_name(old_job, policy.queue_name_label) \
                or read_queue_name(job, policy.queue_name_label):
            errors += priority_class_label_errors(old_job, job, read_suspend(job))
            errors += _replacement_policy_errors(old_job, job, username, env)
    return refused(errors)


def _child_runner_errors(req: AdmissionRequest, env: WebhookEnv, job: dict[str, Any]) -> list[str]:
    """With ``webhook.child_job_creators`` set, only those identities (and pykueue's) may
    create a running Job that a queued ancestor owns, resume one, resize a running one, or
    make a running Job such a child: the ancestor's admission covers the pods its operator
    creates, not Jobs a tenant hangs under it."""
    settings = env.settings
    allowed = set(settings.webhook.child_job_creators) if settings is not None else set()
    username = req.user_info.username
    if not allowed or username in allowed or username in env.policy.controller_usernames:
        return []
    if read_suspend(job):
        return []
    if req.operation == "UPDATE":
        old = _read_job(req.old_object, "request.oldObject")
        if (not read_suspend(old) and env.has_managed_ancestor(old)
                and pod_count(old) == pod_count(job)):
            return []  # a running child changed otherwise (labels, annotations)
    return [f"spec.suspend: a Job owned by a queued {_ancestor_phrase(job)} runs only when "
            f"its operator ({', '.join(sorted(allowed))}) creates or resumes it "
            "(webhook.child_job_creators); create it suspended or submit it queued on its own"]



def _adopted_running_errors(req: AdmissionRequest, env: WebhookEnv, job: dict[str, Any]
                            ) -> list[str]:
    """An UPDATE (by anyone but pykueue) that gives a running Job a managed ancestor as its
    controller (its controller ownerReference added or changed) is refused: the operators
    create their Jobs under their owner, and a running Job adopted so was never checked for
    what its pods ask (brk31 H1: an 8-GPU pod made an AppWrapper component's, or a queued
    JobSet's, Job). A suspended one may be; it is checked when resumed."""
    if req.operation != "UPDATE" or read_suspend(job) \
            or req.user_info.username in env.policy.controller_usernames:
        return []
    old = _read_job(req.old_object, "request.oldObject")
    if controller_identity(old) == controller_identity(job):
        return []
    return [f"metadata.ownerReferences: a running Job cannot be made a Job of "
            f"{_ancestor_phrase(job)}, whose admission its pods would run on; suspend it "
            "first (it is checked when resumed) or let that object's operator create it"]


def _child_share_errors(req: AdmissionRequest, env: WebhookEnv, job: dict[str, Any]) -> list[str]:
    """A running child Job of a managed ancestor (by anyone but pykueue) with more pods at
    once than its share of the ancestor's admission (``child_job_share``: a JobSet's Job its
    replicatedJob's pods per Job) is refused when it is created (a share of at least 1: a
    ``generateName`` component's Job has none until its name is recorded, and the
    reconciler holds it), resumed (against the share, not its own suspended count: brk31
    H2), or raised above it; the operators never do so. Unknown shares pass (the
    reconciler sets a Job beyond its share back)."""
    if read_suspend(job) or req.user_info.username in env.policy.controller_usernames:
        return []
    share = env.ask("child_job_share", job)
    have = pod_count(job)
    if not isinstance(share, int) or have is None or have <= share:
        return []
    if req.operation == "CREATE":
        if share < 1:
            return []
    else:
        old = _read_job(req.old_object, "request.oldObject")
        before = pod_count(old)
        if not read_suspend(old) and before is not None and have <= before:
            return []
    return [f"spec.parallelism: a Job of {_ancestor_phrase(job)} runs at most {share} pod(s) "
            f"at once, its share of that object's admission, not {have}; resize the "
            f"{_ancestor_phrase(job).split(' ')[0]} itself (it is queued again for its new "
            "shape)"]


def _child_template_errors(req: AdmissionRequest, env: WebhookEnv, job: dict[str, Any]
                           ) -> list[str]:
    """A CREATE, or a resume (UPDATE from suspended to running), by anyone but pykueue, of a
    Job whose managed ancestor sized its share from a pod template (``child_job_template``:
    an AppWrapper's Job component, or a Job of its JobSet component, as its operator makes it
    under the ancestor's admission) is refused when its pods would request other than that
    template's pods (per-pod requests, ``template_requests``: milli-CPU, bytes, counts), claim
    other DRA devices, or run elsewhere (``template_differences``: nodeSelector, affinity,
    tolerations, nodeName; the template's with the flavor's nodeSelector and tolerations the
    admission adds, none while the ancestor is only queued): the operator makes it from that
    template, and a Job of its name a tenant made instead (adopted by name, brk30b H2/H3)
    would run pods no quota covers, or on a flavor not admitted (brk31 M1, M2). Unknown
    templates pass. Goes beyond Kueue v0.17.1, which leaves an AppWrapper's children to its
    controller."""
    if req.user_info.username in env.policy.controller_usernames:
        return []
    if req.operation == "UPDATE" and (
            read_suspend(job) or not read_suspend(_read_job(req.old_object, "request.oldObject"))):
        return []
    template = env.ask("child_job_template", job)
    theirs = (optional_object(job.get("spec"), "spec") or {}).get("template")
    if not isinstance(template, Mapping):
        return _child_requests_errors(env, job, theirs)
    want, have = template_requests(template), template_requests(theirs)
    if have != want:
        return [f"spec.template: a Job of {_ancestor_phrase(job)} runs pods requesting {have}, "
                f"but its share of that object's admission was sized for pods requesting "
                f"{want} (milli-CPU, bytes, counts): only the Job its operator makes from that "
                "template may run there"]
    return [f"spec.template.{field}: a Job of {_ancestor_phrase(job)} has {field} {mine!r}, "
            f"but its share of that object's admission was given for pods with {placed!r} "
            "(its template's, with the nodeSelector and tolerations of the flavor it was "
            "admitted on): only the Job its operator makes from that template may run there"
            for field, placed, mine in template_differences(template, theirs)]


def _child_requests_errors(env: WebhookEnv, job: dict[str, Any], theirs: Any) -> list[str]:
    """For a Job whose managed ancestor gives no whole template but sized its share by one
    (``child_job_sized_by``: a JobSet's, TrainJob's JobSet's, replicatedJob; an MPIJob's
    launcher; a RayJob's submitter): its pods may ask no more of any resource than that
    template's (``requests_beyond``), and it claims the template's DRA devices
    (``template_claims``; brk33 M2). Placement is not compared: jobset v0.11.1 merges the
    admission's nodeSelector and tolerations into a suspended Job it resumes, keeping an
    earlier admission's (``resumeJobsIfNecessary``). brk32 H1 and H3: a tenant's 8-GPU Job
    adopted by a JobSet while suspended, or a queued JobSet's Job enlarged while suspended,
    resumed on an admission of 1 GPU a pod. Beyond Kueue v0.17.1 (``shouldSuspendChildJob``
    leaves an admitted ancestor's children alone)."""
    sized = env.ask("child_job_sized_by", job)
    if not isinstance(sized, Mapping):
        return []
    want = template_requests(sized)
    errors = []
    if requests_beyond(template_requests(theirs), want):
        errors.append(
            f"spec.template: a Job of {_ancestor_phrase(job)} runs pods requesting "
            f"{template_requests(theirs)}, beyond the {want} (milli-CPU, bytes, counts) its "
            "share of that object's admission was sized for: only pods no bigger than its "
            "template's may run there (resize the object itself: it is queued again)")
    if template_claims(theirs) != template_claims(sized):
        errors.append(
            f"spec.template.spec.resourceClaims: a Job of {_ancestor_phrase(job)} claims "
            f"{template_claims(theirs) or 'no devices'}, but its share of that object's "
            f"admission was sized for {template_claims(sized) or 'no devices'} (DRA, counted "
            "in quota through resources.deviceClassMappings)")
    return errors


def _ancestor_phrase(job: dict[str, Any]) -> str:
    ref = controller_of_object(job)
    return "object" if ref is None else f"{ref.kind or 'object'} {ref.name!r}"


ROUTES = (WebhookRoute("/mutate-batch-v1-job", "batch/job", _mutation),
          WebhookRoute("/validate-batch-v1-job", "batch/job", _validation))
