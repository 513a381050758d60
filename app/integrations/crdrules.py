"""Admission rules shared by the operators' job kinds (pure; ``app.api.webhook`` serves them):
Kubeflow's training jobs, MPIJob, RayJob and RayCluster. After Kueue's generic ``BaseWebhook``
(``pkg/controller/jobframework/base_webhook.go``, kueue-integrations.md 1.6), which all these
kinds share; the only thing that differs between them is where the suspend lever sits
(``spec.suspend`` or ``spec.runPolicy.suspend``).

- Mutation, CREATE: an object with a non-empty ``kueue.x-k8s.io/queue-name`` label and its
  suspend lever not true gets it set to true (Kueue ``WorkloadShouldBeSuspended``), so the
  operator creates no pod until pykueue admits its Workload. One without a queue name gets
  what ``WebhookEnv.unqueued_defaults`` says (the framework's rule for every kind, Kueue
  ``ApplyDefaultLocalQueue`` and ``manageJobsWithoutQueueName``): the ``default``
  LocalQueue's label, or the lever alone.
- Validation, CREATE: the queue name is a DNS-1123 subdomain; a queued object is created
  suspended (unless by pykueue itself), which catches a missing mutating webhook; a kind may
  add its own checks (``extra_create``: e.g. too many podSets for one Workload).
- Validation, UPDATE: the queue name is immutable while the object is not suspended (Kueue:
  it may change only when the new object is suspended), and keeps its format; a queued
  object cannot be changed into one ``extra_create`` refuses (Kueue's Ray webhooks run their
  create checks on update: in-tree autoscaling turned on after the start); the queue name
  cannot be removed while pykueue's start record is on the object (its templates carry the
  admission's scheduling); only pykueue may set the lever from true to false on a queued
  object (labelled, or unlabelled under ``manageJobsWithoutQueueName``) whose Workload is
  not admitted (``unsuspend_errors``, beyond Kueue). An unlabelled queued object is checked
  as a labelled one (``extra_create``).

Routes (``CrdRules.routes``): ``mutate_path`` and ``validate_path``, Kueue's
``/mutate-<group with - for .>-<version>-<kind lower-cased>`` and ``/validate-...``, enabled by
the framework ``<group>/<kind lower-cased>``.

Malformed objects raise ``UnreadableObjectError`` naming the field.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.multikueue import MULTIKUEUE_CONTROLLER, Adapter
from app.integrations.framework import controller_identity
from app.integrations.webhook_toolkit import (
    ALLOW,
    JsonPatchOp,
    UnreadableObjectError,
    Verdict,
    WebhookEnv,
    WebhookPolicy,
    WebhookRoute,
    injected_label_removal_errors,
    json_pointer,
    json_type,
    patched,
    prebuilt_name_errors,
    queue_name_format_errors,
    read_object,
    read_queue_name,
    refused,
    review_of,
    reviewed_objects,
    set_label_op,
    unsuspend_errors,
)
from app.wire.workload import workload_name_for_owner

if TYPE_CHECKING:
    from app.models.admissionreview import AdmissionRequest


def read_lever(obj: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    """The boolean at ``path`` (e.g. ``("spec", "runPolicy", "suspend")``); absent or null is
    false. Raises ``UnreadableObjectError`` naming the field when a level is not an object or
    the value not a boolean."""
    cur: Any = obj
    for i, key in enumerate(path):
        if cur is None:
            return False
        if not isinstance(cur, Mapping):
            raise UnreadableObjectError(".".join(path[:i]),
                                        f"expected an object, got {json_type(cur)}")
        cur = cur.get(key)
    if cur is None:
        return False
    if not isinstance(cur, bool):
        raise UnreadableObjectError(".".join(path), f"expected a boolean, got {json_type(cur)}")
    return cur


def lever_op(obj: Mapping[str, Any], path: tuple[str, ...], value: Any = True) -> JsonPatchOp:
    """A JSONPatch op that sets the value at ``path`` (default true: a suspend lever), adding
    the first missing parent object whole (``add`` replaces an existing member)."""
    cur: Any = obj
    for i, key in enumerate(path[:-1]):
        nxt = cur.get(key)
        if not isinstance(nxt, Mapping):
            for k in reversed(path[i + 1:]):
                value = {k: value}
            return {"op": "add", "path": json_pointer(*path[:i + 1]), "value": value}
        cur = nxt
    return {"op": "add", "path": json_pointer(*path), "value": value}


def _with_adds(obj: object, patch: list[JsonPatchOp]) -> object:
    """``obj`` (an object) with the ``add`` ops of ``patch`` applied to a copy (RFC 6901
    pointers into objects; an op whose parent is missing or not an object is skipped)."""
    if not isinstance(obj, Mapping) or not patch:
        return obj
    out = copy.deepcopy(dict(obj))
    for op in patch:
        if op.get("op") != "add":
            continue
        keys = [k.replace("~1", "/").replace("~0", "~")
                for k in str(op.get("path", "")).split("/")[1:]]
        cur: Any = out
        for k in keys[:-1]:
            cur = cur.get(k) if isinstance(cur, dict) else None
        if isinstance(cur, dict) and keys:
            cur[keys[-1]] = copy.deepcopy(op.get("value"))
    return out



@dataclass(frozen=True)
class CrdRules:
    """The webhook rules of one operator kind (module doc). ``group``/``version``/``plural``/
    ``kind``: its API; ``suspend``: the path of its suspend lever; ``extra_create``: more
    errors for a queued object at CREATE (pure, may raise ``UnreadableObjectError``);
    ``belongs_elsewhere``: True for an object another kind manages (Kueue's managed ancestor,
    e.g. the RayCluster of a RayJob, which copies the RayJob's labels): both rules leave it
    alone; ``takes_unlabelled``: False for an object the kind never queues without a queue
    name (the kind's ``takes_unlabelled``, e.g. a RayJob on an existing cluster);
    ``extra_update``: more errors for an UPDATE (old, new) of a queued object, by anyone
    (e.g. an AppWrapper's immutable components); ``multikueue``: the kind's MultiKueue adapter
    (its ``managedBy`` is defaulted on a queued object whose ClusterQueue has a MultiKueue
    AdmissionCheck: ``managed_by_op``)."""

    group: str
    version: str
    plural: str
    kind: str
    suspend: tuple[str, ...]
    extra_create: Callable[[Mapping[str, Any]], list[str]] | None = None
    belongs_elsewhere: Callable[[Mapping[str, Any]], bool] | None = None
    takes_unlabelled: Callable[[Mapping[str, Any]], bool] | None = None
    extra_update: Callable[[Mapping[str, Any], Mapping[str, Any]], list[str]] | None = None
    multikueue: Adapter | None = None

    @property
    def mutate_path(self) -> str:
        """``/mutate-<group with - for .>-<version>-<kind lower-cased>`` (Kueue's paths)."""
        return f"/mutate-{self.group.replace('.', '-')}-{self.version}-{self.kind.lower()}"

    @property
    def validate_path(self) -> str:
        return "/validate-" + self.mutate_path.removeprefix("/mutate-")

    @property
    def lever(self) -> str:
        return ".".join(self.suspend)

    def takes(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` without a queue name may be queued (``takes_unlabelled``)."""
        return self.takes_unlabelled is None or self.takes_unlabelled(obj)

    def mutate(self, obj: object, operation: str, policy: WebhookPolicy, *,
               default_queue: str | None = None, manage_unlabelled: bool = False
               ) -> list[JsonPatchOp]:
        """The JSONPatch for an object under admission; ``[]`` when nothing changes.
        ``default_queue``/``manage_unlabelled``: what to do when it has no queue name
        (``WebhookEnv.unqueued_defaults``: label it with that LocalQueue, or suspend it
        without one). Idempotent. Raises ``UnreadableObjectError``."""
        if operation != "CREATE":
            return []
        o = read_object(obj)
        if self.belongs_elsewhere is not None and self.belongs_elsewhere(o):
            return []
        patch: list[JsonPatchOp] = []
        if not read_queue_name(o, policy.queue_name_label):
            if not self.takes(o):
                return []
            if default_queue:
                patch.append(set_label_op(o, policy.queue_name_label, default_queue))
            elif not manage_unlabelled:
                return []
        if not read_lever(o, self.suspend):
            patch.append(lever_op(o, self.suspend))
        return patch

    def managed_by_op(self, obj: object) -> JsonPatchOp | None:
        """The JSONPatch op setting the kind's ``managedBy`` to ``kueue.x-k8s.io/multikueue``
        (Kueue ``ApplyDefaultForManagedBy``: the manager's operator then leaves the object
        to MultiKueue), or None: the kind has no MultiKueue adapter, or ``managedBy`` names
        another controller (``Adapter.can_default_managed_by``). The caller checks that the
        object is queued to a ClusterQueue with a MultiKueue AdmissionCheck. Raises
        ``UnreadableObjectError``."""
        o = read_object(obj)
        if self.multikueue is None or not self.multikueue.can_default_managed_by(o) \
                or (self.belongs_elsewhere is not None and self.belongs_elsewhere(o)):
            return None
        return lever_op(o, self.multikueue.managed_by, MULTIKUEUE_CONTROLLER)

    def _managed_by_errors(self, old: Mapping[str, Any], new: Mapping[str, Any]
                           ) -> list[str]:
        """A kind with a MultiKueue adapter: its ``managedBy`` cannot change on update (unset
        and the operator's own value, the same meaning, aside). Its operator makes it
        immutable (the CRD, or AppWrapper's own webhook), but AppWrapper v1.2.0 runs without
        its webhook here and mpi-operator v0.8.0 has none: a tenant taking a dispatched object
        out of ``kueue.x-k8s.io/multikueue`` would have the manager's operator run it beside
        its copy on a worker."""
        if self.multikueue is None:
            return []
        was, now = self.multikueue.managed_by_of(old), self.multikueue.managed_by_of(new)
        own = ("", self.multikueue.operator)
        if was == now or (was in own and now in own):
            return []
        return [f"{'.'.join(self.multikueue.managed_by)}: field is immutable ({was!r} cannot "
                f"become {now!r})"]

    def _new_spec_errors(self, old: Mapping[str, Any], was_queued: bool,
                         new: Mapping[str, Any]) -> list[str]:
        """``extra_create``'s errors of the queued object after an UPDATE that it did not
        have before (Kueue's Ray webhooks run their create checks on every update, e.g.
        ``enableInTreeAutoscaling``): a queued object cannot be changed into one pykueue
        refuses at create, since its reconcile could then no longer read it. Errors the
        stored object already had (created before pykueue ran, or unqueued then) do not
        block other changes to it."""
        if self.extra_create is None:
            return []
        had = set(self.extra_create(old)) if was_queued else set()
        return [e for e in self.extra_create(new) if e not in had]

    def validate(self, old: Mapping[str, Any] | None, new: object, username: str,
                 policy: WebhookPolicy, *, manages_unlabelled: bool = False,
                 workload_admitted: bool | None = None) -> list[str]:
        """Errors (each naming the field and saying why) for creating (``old`` None) or
        updating an object; ``[]`` to allow. ``manages_unlabelled``: an object without a
        queue name is queued too (``WebhookEnv.queues_unlabelled``): it is checked as a
        queued one. ``workload_admitted``: whether its Workload is admitted (None:
        unknown); only pykueue may unsuspend a queued object whose Workload is not
        (``unsuspend_errors``). Raises ``UnreadableObjectError``."""
        o = read_object(new)
        if self.belongs_elsewhere is not None and self.belongs_elsewhere(o):
            return []
        label = policy.queue_name_label
        queue = read_queue_name(o, label)
        unlabelled = manages_unlabelled and self.takes(o)
        if old is None:
            errors = queue_name_format_errors(queue, label)
            if not queue:
                # Queued without a name, it needs a Workload all the same (Kueue v0.17.1's
                # Ray webhooks run their create checks under manageJobsWithoutQueueName).
                return errors + (self.extra_create(o) if unlabelled and self.extra_create
                                 else [])
            if self.extra_create is not None:
                errors += self.extra_create(o)
            if not read_lever(o, self.suspend) and username not in policy.controller_usernames:
                errors.append(f"{self.lever}: must be true when a {self.kind} queued in "
                              f"LocalQueue {queue!r} is created (only pykueue admits it); "
                              f"pykueue's mutating webhook {self.mutate_path} sets it, so "
                              "check that its MutatingWebhookConfiguration is installed")
            return errors
        prior = read_object(old)
        before = read_queue_name(prior, label)
        errors = self._managed_by_errors(prior, o)
        errors += prebuilt_name_errors(prior, o, read_lever(o, self.suspend))
        errors += self._new_spec_errors(prior, bool(before) or unlabelled, o) \
            if queue or unlabelled else []
        if self.extra_update is not None and (queue or before or unlabelled):
            errors += self.extra_update(prior, o)
        errors += unsuspend_errors(self.lever, self.kind, queue or before, unlabelled,
                                   (read_lever(prior, self.suspend),
                                    read_lever(o, self.suspend)),
                                   username, workload_admitted, policy)
        if before == queue:
            return errors
        errors += queue_name_format_errors(queue, label)
        errors += injected_label_removal_errors(prior, before, queue, username, policy,
                                                self.kind)
        if not read_lever(o, self.suspend):
            errors.append(f"metadata.labels[{label}]: cannot change {before!r} to {queue!r} "
                          f"while the {self.kind} is not suspended; set {self.lever}: true in "
                          "the same update, or first")
        return errors

    def routes(self) -> tuple[WebhookRoute, WebhookRoute]:
        """The kind's mutating route (``mutate_path``: ``mutate`` on CREATE) and validating
        route (``validate_path``: ``validate`` on CREATE and UPDATE of the kind itself),
        enabled by the framework ``<group>/<kind lower-cased>``."""
        rules = self

        def of_kind(req: AdmissionRequest, operations: tuple[str, ...]) -> bool:
            return (req.operation in operations and not req.sub_resource
                    and review_of(req, rules.group, rules.kind))

        def mutation(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
            if not of_kind(req, ("CREATE",)):
                return ALLOW
            _, obj = reviewed_objects(req)
            default_queue, manage = env.unqueued_defaults(obj, req.namespace)
            patch = rules.mutate(obj, req.operation, env.policy, default_queue=default_queue,
                                 manage_unlabelled=manage)
            queue = read_queue_name(read_object(obj), env.policy.queue_name_label) \
                or default_queue
            # managedBy's op is computed on the object as patched so far: when both it and the
            # lever add the same missing parent (spec.runPolicy), the second keeps the first.
            if queue and (op := rules.managed_by_op(_with_adds(obj, patch))) is not None \
                    and env.lookup("admission_lookup", "uses_multikueue", req.namespace, queue):
                patch.append(op)
            return patched(patch)

        def validation(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
            if not of_kind(req, ("CREATE", "UPDATE")):
                return ALLOW
            old, obj = reviewed_objects(req)
            admitted = None
            if old is not None and read_lever(old, rules.suspend) \
                    and not read_lever(obj, rules.suspend):
                meta = old.get("metadata") or {}
                admitted = env.lookup("admission_lookup", "workload_admitted", req.namespace,
                                      workload_name_for_owner(
                                          rules.kind, rules.group, str(meta.get("name", "")),
                                          str(meta.get("uid", ""))))
            errors = rules.validate(
                old, obj, req.user_info.username, env.policy, workload_admitted=admitted,
                manages_unlabelled=env.queues_unlabelled(old or obj, req.namespace))
            # Created, or resumed, under a managed ancestor: its pods must be the ones the
            # ancestor's admission was sized for (e.g. an AppWrapper's JobSet component).
            # Or given that ancestor by an update (its controller changed: brk31 H1).
            if req.user_info.username not in env.policy.controller_usernames and (
                    old is None or read_lever(old, rules.suspend)
                    and not read_lever(obj, rules.suspend)
                    or controller_identity(old) != controller_identity(read_object(obj))):
                meta = read_object(obj).get("metadata") or {}
                child = {**read_object(obj), "metadata": {**meta, "namespace": req.namespace}}
                found = env.ask("child_object_errors", rules.kind, child)
                errors += found if isinstance(found, list) else []
            return refused(errors)

        framework = f"{self.group}/{self.kind.lower()}"
        return (WebhookRoute(self.mutate_path, framework, mutation),
                WebhookRoute(self.validate_path, framework, validation))


