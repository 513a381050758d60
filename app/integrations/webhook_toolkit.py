"""The webhook toolkit every job kind's admission rules use (pure, no I/O): reading an
object under review, building a JSONPatch, and the rules that are the same for every kind.

- Reading: ``read_object``, ``read_labels``, ``read_queue_name``, ``read_name``; an object or
  field of the wrong JSON type raises ``UnreadableObjectError`` naming the field
  (``metadata.labels[kueue.x-k8s.io/queue-name]``), which the HTTP adapter answers with a 400
  inside the review.
- Patching: ``JsonPatchOp`` (RFC 6902 operation), ``json_pointer`` / ``escape_pointer_token``
  (RFC 6901).
- Settings as data: ``WebhookPolicy`` (queue-name label, pykueue's own identities, who may
  release a pod from its controller).
- Lookups the controllers provide: ``AdmissionLookup``, ``DefaultQueueLookup``.
- Shared rules: a queue name is a DNS-1123 subdomain (Kueue v0.17.1
  ``jobframework.ValidateQueueName``), present but empty is refused
  (``empty_queue_name_errors``), it cannot be removed while pykueue's start record is on the
  object (``injected_label_removal_errors``, beyond Kueue), and a pod of an admitted job keeps
  the labels its controller selects it by (``owner_label_errors``) and its controller
  (``owner_reference_errors``), beyond Kueue.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from app.wire.names import (
    JOB_UID_LABELS,
    ORIGINAL_ANNOTATION,
    PODSET_LABEL,
    PREBUILT_WORKLOAD_LABEL,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
)
from app.wire.owners import controller_of_object

if TYPE_CHECKING:
    from app.models.admissionreview import AdmissionRequest

logger = logging.getLogger("pykueue.webhook")

# Kueue LocalQueue defaulting: a LocalQueue with this name in a namespace captures unlabelled Jobs.
DEFAULT_LOCAL_QUEUE = "default"

# A JSONPatch operation: {"op": "add", "path": "/spec/suspend", "value": true}.
JsonPatchOp = dict[str, Any]

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_DNS1123_SUBDOMAIN_MAX = 253


class UnreadableObjectError(ValueError):
    """An object under review (or part of it) does not have the shape the rules need.

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
    object whose Workload is not admitted.
    ``owner_reference_releasers``: the identities that, besides pykueue's, may remove the
    controller ownerReference of a pod of an admitted job (``owner_reference_errors``);
    empty: anyone.
    """

    queue_name_label: str = QUEUE_NAME_LABEL
    controller_usernames: frozenset[str] = field(default_factory=frozenset)
    owner_reference_releasers: frozenset[str] = field(default_factory=frozenset)


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
    returns False for namespaces outside ``managedJobsNamespaceSelector`` (as Kueue).
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


def set_label_op(obj: Mapping[str, Any], label: str, value: str) -> JsonPatchOp:
    """A JSONPatch op that sets ``metadata.labels[label]`` to ``value``, adding missing
    parent maps whole. Raises ``UnreadableObjectError`` when ``metadata`` or its labels are
    not objects."""
    metadata = optional_object(obj.get("metadata"), "metadata")
    if metadata is None:
        return {"op": "add", "path": "/metadata", "value": {"labels": {label: value}}}
    if optional_object(metadata.get("labels"), "metadata.labels") is None:
        return {"op": "add", "path": "/metadata/labels", "value": {label: value}}
    return {"op": "add", "path": json_pointer("metadata", "labels", label), "value": value}


# ----------------------------------------------------------------------------------------------
# Reading an object under review


def json_type(value: object) -> str:
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


def optional_object(value: object, where: str) -> Mapping[str, Any] | None:
    """``value`` as a mapping, None when absent/null; UnreadableObjectError for other types."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise UnreadableObjectError(where, f"expected an object, got {json_type(value)}")
    return value


def read_object(obj: object, kind: str = "Job") -> Mapping[str, Any]:
    """``obj`` as an object (a mapping), or ``UnreadableObjectError`` (field ``""``)
    naming ``kind``, the kind the review is about."""
    if not isinstance(obj, Mapping):
        raise UnreadableObjectError("", f"expected a {kind} object, got {json_type(obj)}")
    return obj


def read_labels(job: Mapping[str, Any]) -> Mapping[str, str]:
    """``metadata.labels`` of ``job`` (empty when absent); every value must be a string."""
    metadata = optional_object(job.get("metadata"), "metadata")
    if metadata is None:
        return {}
    labels = optional_object(metadata.get("labels"), "metadata.labels")
    if labels is None:
        return {}
    for key, value in labels.items():
        if not isinstance(value, str):
            raise UnreadableObjectError(
                f"metadata.labels[{key}]", f"expected a string, got {json_type(value)}"
            )
    return labels


def read_queue_name(job: Mapping[str, Any], label: str = QUEUE_NAME_LABEL) -> str:
    """The LocalQueue name from the queue-name label; ``""`` when absent (an unmanaged Job)."""
    return read_labels(job).get(label, "")


def read_name(job: Mapping[str, Any]) -> str:
    """``metadata.name`` (``""`` when absent, e.g. with ``generateName`` before create)."""
    metadata = optional_object(job.get("metadata"), "metadata") or {}
    name = metadata.get("name")
    return name if isinstance(name, str) else ""


# ----------------------------------------------------------------------------------------------
# Rules every kind shares


def label_field(label: str) -> str:
    """The field path of label ``label`` in messages: ``metadata.labels[<label>]``."""
    return f"metadata.labels[{label}]"


def queue_name_format_errors(queue: str, label: str) -> list[str]:
    """Errors for a queue-name label value that is not a DNS-1123 subdomain (LocalQueue name)."""
    if not queue or (len(queue) <= _DNS1123_SUBDOMAIN_MAX and _DNS1123_SUBDOMAIN.fullmatch(queue)):
        return []
    return [
        f"{label_field(label)}: {queue!r} is not a valid LocalQueue name: it must be a DNS-1123 "
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
    return [f"{label_field(label)}: must not be empty: \"\" is not a valid LocalQueue name "
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
    return [f"{label_field(policy.queue_name_label)}: cannot be removed (was {old_queue!r}) "
            f"while the {what} carries the scheduling pykueue injected when it admitted it "
            f"(annotation {ORIGINAL_ANNOTATION}): unqueued, it would run with its admission's "
            "nodeSelector and tolerations on no quota; delete it, or remove the label once "
            "pykueue has stopped it (the annotation is gone then)"]


def prebuilt_name_errors(old: Mapping[str, Any], new: Mapping[str, Any],
                         new_suspended: bool) -> list[str]:
    """Kueue v0.17.1 ``validateUpdateForPrebuiltWorkload``: the
    ``kueue.x-k8s.io/prebuilt-workload-name`` label cannot be added, changed or removed
    unless the updated object is suspended. Running, a Job that lost it got a Workload of
    its own beside the prebuilt one (a MultiKueue worker's copy, still admitted): one pod
    held the quota twice (breaker16). Raises ``UnreadableObjectError`` on a label value that
    is not a string (``read_labels``)."""
    was = read_labels(old).get(PREBUILT_WORKLOAD_LABEL, "")
    now = read_labels(new).get(PREBUILT_WORKLOAD_LABEL, "")
    if new_suspended or was == now:
        return []
    return [f"{label_field(PREBUILT_WORKLOAD_LABEL)}: field is immutable ({was!r} cannot "
            f"become {now!r}) while the object is not suspended"]


def unsuspend_errors(lever: str, what: str, queue: str, manages_unlabelled: bool,
                     suspended: tuple[bool, bool], username: str,
                     workload_admitted: bool | None, policy: WebhookPolicy) -> list[str]:
    """Errors for setting a queued object's suspend lever (``lever``, e.g. ``spec.suspend``;
    ``what``: its kind) from true to false (``suspended``: before, after) by anyone but
    pykueue while its Workload is not admitted (``workload_admitted``; None, unknown, counts
    as not). Queued: ``queue`` (its LocalQueue) or ``manages_unlabelled`` (without one, under
    Kueue ``manageJobsWithoutQueueName``, ``WebhookEnv.queues_unlabelled``). pykueue
    unsuspends it when it admits it. Beyond Kueue, which leaves the lever to RBAC and stops
    a job that runs without an admission afterwards."""
    if not (queue or manages_unlabelled) or not suspended[0] or suspended[1] \
            or username in policy.controller_usernames or workload_admitted is True:
        return []
    known = "is not admitted" if workload_admitted is False else "is not known to be admitted"
    where = f"in LocalQueue {queue!r}" if queue else \
        "without a queue name (manageJobsWithoutQueueName)"
    return [f"{lever}: only pykueue ({controllers_phrase(policy)}) may set it to false on a "
            f"{what} queued {where} whose Workload {known} (requested by "
            f"{username or '<anonymous>'!r}); pykueue unsuspends the {what} when it admits it"]


def controllers_phrase(policy: WebhookPolicy) -> str:
    """pykueue's identities for messages (sorted, comma-separated)."""
    return ", ".join(sorted(policy.controller_usernames)) or "<none configured>"


# The labels by which a pod's controller (the Job controller, JobSet, the Kubeflow operators,
# KubeRay) selects its pods, and pykueue's podSet label. Removing one from a running pod of an
# admitted job releases the pod from its controller, which then makes a replacement: the
# released pod keeps running outside the admission.
# Spark's own (``spark-role``, ``spark-app-selector``: how a driver finds its executors) and the
# spark-operator's (``sparkoperator.k8s.io/app-name``: how the operator and pykueue count a
# SparkApplication's pods; without it an orphaned driver held no quota while it ran).
OWNER_SELECTOR_LABELS = frozenset({
    "batch.kubernetes.io/controller-uid", "controller-uid", "batch.kubernetes.io/job-name",
    "job-name", PODSET_LABEL, "spark-role", "spark-app-selector", "spark-app-name"})
OWNER_SELECTOR_PREFIXES = ("jobset.sigs.k8s.io/", "training.kubeflow.org/", "ray.io/",
                           "sparkoperator.k8s.io/")


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
            f"more pods than were admitted); only {controllers_phrase(policy)} may"]


def owner_reference_errors(old_pod: Mapping[str, Any] | None, new_pod: Mapping[str, Any],
                           username: str, policy: WebhookPolicy) -> list[str]:
    """Why an UPDATE of a Pod that carries ``kueue.x-k8s.io/podset`` (a pod of an admitted
    job) is refused:

    - it gives the pod a controller ownerReference other than the one it had. A controller
      ignores a pod another one controls (Kubernetes ``ClaimObject``), so a tenant pointing
      the reference at an object of its own (a ConfigMap) had the Job controller start a
      replacement beside the pod still running, no label changed (breakdel23: 2 GPU pods on
      an admission of 1). Setting one on a pod without is allowed: for a pod of a batch Job
      (label ``batch.kubernetes.io/controller-uid``) only that Job (its adoption back),
      otherwise any (a ReplicaSet's or an operator's adoption).
    - it removes the controller ownerReference (or makes it no controller) and ``username``
      is not in ``policy.owner_reference_releasers`` (the garbage collector's
      ``--cascade=orphan``, a built-in controller releasing a pod; empty: anyone). A pod
      without a controller counts only for an orphaned Workload, so a tenant's Spark
      executors freed from their driver ran on uncounted once the application was preempted
      (brk27 M3).

    Other ownerReferences may change; pykueue may change any. Beyond Kueue."""
    if old_pod is None or username in policy.controller_usernames:
        return []
    labels = read_labels(old_pod)
    new_ref, old_ref = controller_of_object(new_pod), controller_of_object(old_pod)
    if PODSET_LABEL not in labels or new_ref == old_ref:
        return []
    if new_ref is None:
        releasers = policy.owner_reference_releasers
        if not releasers or username in releasers:
            return []
        allowed = ", ".join(sorted(releasers | policy.controller_usernames))
        return [f"metadata.ownerReferences: the controller ownerReference of a pod of an "
                f"admitted job cannot be removed by {username or '<anonymous>'!r} (a pod "
                f"without a controller is not counted for its job: it would run on outside "
                f"the admission); only {allowed} may (webhook.owner_reference_releasers: the "
                f"garbage collector's --cascade=orphan, a controller releasing the pod)"]
    job_uid = next((labels[k] for k in JOB_UID_LABELS if labels.get(k)), None)
    if old_ref is None and (job_uid is None or new_ref.uid == job_uid):
        return []
    return [f"metadata.ownerReferences: the controller ownerReference of a pod of an admitted "
            f"job cannot be set to another object (its controller would no longer count the "
            f"pod and start another, running more pods than were admitted); only "
            f"{controllers_phrase(policy)} may"]


# ----------------------------------------------------------------------------------------------
# Routes: what a kind serves, and what its deciders may ask


@dataclass(frozen=True, slots=True)
class Verdict:
    """A decider's answer: ``errors`` (each naming a field; the review is refused, 403) or a
    ``patch`` (allowed with that JSONPatch), neither: allowed unchanged."""

    patch: tuple[JsonPatchOp, ...] = ()
    errors: tuple[str, ...] = ()


ALLOW = Verdict()


def patched(patch: list[JsonPatchOp]) -> Verdict:
    """Allowed with ``patch`` (``[]``: unchanged)."""
    return Verdict(patch=tuple(patch))


def refused(errors: list[str]) -> Verdict:
    """Refused for ``errors`` (``[]``: allowed)."""
    return Verdict(errors=tuple(errors))


def priority_class_label_errors(old: Mapping[str, Any], new: Mapping[str, Any],
                                suspended: bool, what: str = "Job") -> list[str]:
    """Errors for a change of the ``kueue.x-k8s.io/priority-class`` label of a queued object
    (``what``: its kind, for the message; ``suspended``: the new object is suspended, or
    runs no pod): it cannot be added to a running one (its admitted Workload has no class
    to change) and never removed; a change of class is allowed, running or not (the
    Workload's priority follows). Kueue v0.17.1 ``ValidateUpdateForWorkloadPriorityClassName``.
    Raises ``UnreadableObjectError``."""
    before = str(read_labels(old).get(PRIORITY_CLASS_LABEL) or "")
    after = str(read_labels(new).get(PRIORITY_CLASS_LABEL) or "")
    where = f"metadata.labels[{PRIORITY_CLASS_LABEL}]"
    if not suspended and not before and after:
        return [f"{where}: a WorkloadPriorityClass cannot be added to a {what} that is not "
                "suspended"]
    if before and not after:
        return [f"{where}: a WorkloadPriorityClass cannot be removed (was {before!r})"]
    return []


class WebhookEnv:
    """What a decider may ask of the running process, read from the web app's state
    (``app.state``): ``settings`` (``app.config.Settings``; None in bare tests), and the
    optional ``admission_lookup`` (the reconciler's stores: ``is_admitted``,
    ``has_managed_ancestor``, ``managed_kinds``, ``child_job_share``,
    ``child_job_template``, ``child_job_sized_by``, ``statefulset_replicas``,
    ``queued_statefulset``) and
    ``default_queue_lookup`` (``has_default_local_queue``, ``namespace_managed``). A part
    that is absent, or raises, answers "unknown" (None); each rule says what unknown means
    for it. ``builtin_kinds``:
    (API group, kind) of the kinds ``integrations.frameworks`` enables, for when the
    reconciler cannot say (``app.integrations.managed_kinds``). ``group_parents``: the
    owners of pod groups (``app.integrations.parents.GroupParent``,
    ``app.integrations.GROUP_PARENTS``)."""

    def __init__(self, state: Any,
                 builtin_kinds: Callable[[Iterable[str] | None], frozenset[tuple[str, str]]],
                 group_parents: tuple[Any, ...] = ()) -> None:
        self.state = state
        self.settings = getattr(state, "settings", None)
        self._builtin_kinds = builtin_kinds
        self._group_parents = group_parents
        self.policy = WebhookPolicy() if self.settings is None else WebhookPolicy(
            controller_usernames=frozenset(self.settings.webhook.controller_usernames),
            owner_reference_releasers=frozenset(
                self.settings.webhook.owner_reference_releasers))

    @property
    def jobs(self) -> Any:
        """``settings.jobs`` (None without settings)."""
        return None if self.settings is None else self.settings.jobs

    def lookup(self, attribute: str, method: str, *args: str) -> bool | None:
        """``app.state.<attribute>.<method>(*args)`` when it answers a bool; None when the
        lookup is absent, fails (logged) or answers anything else."""
        provider = getattr(self.state, attribute, None)
        if provider is None:
            return None
        try:
            answer = getattr(provider, method)(*args)
        except Exception:
            logger.exception("webhook: %s.%s failed; treating the answer as unknown",
                             attribute, method)
            return None
        return answer if isinstance(answer, bool) else None

    def ask(self, method: str, *args: Any) -> Any:
        """``admission_lookup.<method>(*args)``; None when absent or when it fails (logged)."""
        provider = getattr(self.state, "admission_lookup", None)
        fn = getattr(provider, method, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception:
            logger.exception("webhook: %s failed; treating it as unknown", method)
            return None

    def managed_kinds(self) -> frozenset[tuple[str, str]]:
        """(API group, kind) of the job kinds pykueue manages: the reconciler's (enabled and
        served), else those ``settings.integrations.frameworks`` enables (Kueue counts only
        enabled integrations as managed owners)."""
        kinds = getattr(getattr(self.state, "admission_lookup", None), "managed_kinds", None)
        answer = kinds() if callable(kinds) else None
        if isinstance(answer, frozenset):
            return answer
        return self._builtin_kinds(self.settings.integrations.frameworks
                                   if self.settings is not None else None)

    def group_parents(self) -> tuple[Any, ...]:
        """The owners of pod groups whose framework ``settings.integrations.frameworks``
        enables (all without settings)."""
        if self.settings is None:
            return self._group_parents
        return tuple(p for p in self._group_parents
                     if self.settings.integrations.enabled(p.framework))

    def has_managed_ancestor(self, obj: Mapping[str, Any]) -> bool:
        """True when an ancestor queues ``obj`` (the reconciler's stores; unknown counts as
        no: the object is then queued as its own, as before the stores sync)."""
        ask = getattr(getattr(self.state, "admission_lookup", None), "has_managed_ancestor",
                      None)
        if ask is None:
            return False
        try:
            return ask(obj) is True
        except Exception:
            logger.exception("webhook: has_managed_ancestor failed; treating the Job as its own")
            return False

    def controlled_by_managed_kind(self, obj: Any) -> bool:
        """True when ``obj``'s controller ownerReference is an object of a job kind pykueue
        manages (Kueue ``IsOwnerManagedByKueueForObject``: enabled kinds only)."""
        ref = controller_of_object(obj)
        return ref is not None and (ref.group, ref.kind) in self.managed_kinds()

    def namespace_managed(self, namespace: str) -> bool:
        """Whether ``jobs.managed_jobs_namespace_selector`` matches ``namespace``. A namespace
        the stores do not know (not synced, or created a moment ago) is judged by the one
        label every Namespace carries, ``kubernetes.io/metadata.name``: exact for the default
        selector (by name), and for a selector on other labels the answer is "not managed"
        until the Namespace is seen."""
        jobs = self.jobs
        if jobs is None:
            return False
        known = self.lookup("default_queue_lookup", "namespace_managed", namespace)
        if known is None:
            return bool(jobs.namespace_managed({"kubernetes.io/metadata.name": namespace}))
        return known

    def manages_unlabelled_in(self, namespace: str) -> bool:
        """Whether objects without a queue name are queued in ``namespace``
        (``jobs.manage_jobs_without_queue_name`` and ``namespace_managed``)."""
        jobs = self.jobs
        return bool(jobs is not None and jobs.manage_jobs_without_queue_name
                    and self.namespace_managed(namespace))

    def queues_unlabelled(self, obj: Mapping[str, Any], namespace: str) -> bool:
        """Whether ``obj``, a job kind's object without a queue name, is queued all the same
        (Kueue ``manageJobsWithoutQueueName``): ``manages_unlabelled_in(namespace)`` and no
        managed job kind controls it (such a child is its owner's business). Its Workload
        then waits for a LocalQueue, and only pykueue may unsuspend it."""
        return self.manages_unlabelled_in(namespace) \
            and not self.controlled_by_managed_kind(obj)

    def unqueued_defaults(self, obj: Mapping[str, Any], namespace: str
                          ) -> tuple[str | None, bool]:
        """What a job kind's mutating webhook does at CREATE to ``obj`` when it has no queue
        name: (the LocalQueue to label it with, or None; whether to suspend it without one).
        Kueue v0.17.1 ``BaseWebhook.Default`` for every kind: ``ApplyDefaultLocalQueue`` (a
        LocalQueue named ``default`` in the namespace, ``jobs.local_queue_defaulting``) then
        ``WorkloadShouldBeSuspended`` (``manageJobsWithoutQueueName``), both only for an
        object no managed kind controls, and (as Kueue HEAD) only in namespaces
        ``managed_jobs_namespace_selector`` matches. ``(None, False)`` for a queued object
        or outside those settings."""
        jobs = self.jobs
        if jobs is None or read_queue_name(obj, self.policy.queue_name_label) \
                or not (jobs.local_queue_defaulting or jobs.manage_jobs_without_queue_name) \
                or self.controlled_by_managed_kind(obj) or not self.namespace_managed(namespace):
            return None, False
        has_default = jobs.local_queue_defaulting and self.lookup(
            "default_queue_lookup", "has_default_local_queue", namespace)
        return (DEFAULT_LOCAL_QUEUE if has_default else None), \
            bool(jobs.manage_jobs_without_queue_name)


Decider = Callable[["AdmissionRequest", WebhookEnv], Verdict]


@dataclass(frozen=True, slots=True)
class WebhookRoute:
    """One webhook endpoint a kind serves: ``path`` (Kueue's, e.g. ``/mutate-batch-v1-job``),
    ``framework`` (the ``integrations.frameworks`` name that enables it; None: always served,
    whatever made the object) and ``decide(request, env)``, the decider (may raise
    ``UnreadableObjectError``)."""

    path: str
    framework: str | None
    decide: Decider


def review_of(req: AdmissionRequest, group: str, kind_name: str) -> bool:
    """True for a review about ``group``/``kind_name`` (by ``request.kind``, else by the
    object's own ``kind``)."""
    kind = req.kind or req.request_kind
    if kind is not None and kind.kind:
        return kind.group == group and kind.kind == kind_name
    return isinstance(req.object, dict) and req.object.get("kind", kind_name) == kind_name


def read_reviewed(value: object, where: str, *readers: Callable[[Any], Any]) -> dict[str, Any]:
    """The object at ``where`` (``request.object``), checked by ``read_labels`` and
    ``readers`` so that an ``UnreadableObjectError`` names the full path
    (``request.oldObject.spec.schedulingGates``)."""
    try:
        obj = read_object(value)
        read_labels(obj)
        for read in readers:
            read(obj)
    except UnreadableObjectError as exc:
        raise UnreadableObjectError(
            ".".join(filter(None, (where, exc.field))), exc.problem
        ) from None
    return obj  # type: ignore[return-value]


def reviewed_objects(req: AdmissionRequest, *readers: Callable[[Any], Any]
                     ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(old object or None on CREATE, new object), read with ``read_reviewed``."""
    new = read_reviewed(req.object, "request.object", *readers)
    old = (read_reviewed(req.old_object, "request.oldObject", *readers)
           if req.operation == "UPDATE" else None)
    return old, new


def _owner_labels(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
    if req.operation != "UPDATE" or req.sub_resource or not review_of(req, "", "Pod"):
        return ALLOW
    old, pod = reviewed_objects(req)
    user = req.user_info.username
    return refused(owner_label_errors(old, pod, user, env.policy)
                   + owner_reference_errors(old, pod, user, env.policy))


# The framework's own route: every pod of an admitted job (objectSelector
# kueue.x-k8s.io/podset), whatever made it, so not gated by integrations.frameworks.
ROUTES = (WebhookRoute("/validate--v1-pod-owner", None, _owner_labels),)
