"""Admission rules shared by the operators' job kinds (pure; ``app.api.webhook`` serves them):
Kubeflow's training jobs, MPIJob, RayJob and RayCluster. After Kueue's generic ``BaseWebhook``
(``pkg/controller/jobframework/base_webhook.go``, kueue-integrations.md 1.6), which all these
kinds share; the only thing that differs between them is where the suspend lever sits
(``spec.suspend`` or ``spec.runPolicy.suspend``).

- Mutation, CREATE: an object with a non-empty ``kueue.x-k8s.io/queue-name`` label and its
  suspend lever not true gets it set to true (Kueue ``WorkloadShouldBeSuspended``), so the
  operator creates no pod until pykueue admits its Workload.
- Validation, CREATE: the queue name is a DNS-1123 subdomain; a queued object is created
  suspended (unless by pykueue itself), which catches a missing mutating webhook; a kind may
  add its own checks (``extra_create``: e.g. too many podSets for one Workload).
- Validation, UPDATE: the queue name is immutable while the object is not suspended (Kueue:
  it may change only when the new object is suspended), and keeps its format; a queued
  object cannot be changed into one ``extra_create`` refuses (Kueue's Ray webhooks run their
  create checks on update: in-tree autoscaling turned on after the start); the queue name
  cannot be removed while pykueue's start record is on the object (its templates carry the
  admission's scheduling).

Routes (``CrdRules.routes``): ``mutate_path`` and ``validate_path``, Kueue's
``/mutate-<group with - for .>-<version>-<kind lower-cased>`` and ``/validate-...``, enabled by
the framework ``<group>/<kind lower-cased>``.

Malformed objects raise ``UnreadableObjectError`` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
    injected_label_removal_errors,
    json_pointer,
    json_type,
    patched,
    queue_name_format_errors,
    read_object,
    read_queue_name,
    refused,
    review_of,
    reviewed_objects,
)

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


def lever_op(obj: Mapping[str, Any], path: tuple[str, ...]) -> JsonPatchOp:
    """A JSONPatch op that sets the boolean at ``path`` to true, adding the first missing
    parent object whole (``add`` replaces an existing member)."""
    cur: Any = obj
    for i, key in enumerate(path[:-1]):
        nxt = cur.get(key)
        if not isinstance(nxt, Mapping):
            value: Any = True
            for k in reversed(path[i + 1:]):
                value = {k: value}
            return {"op": "add", "path": json_pointer(*path[:i + 1]), "value": value}
        cur = nxt
    return {"op": "add", "path": json_pointer(*path), "value": True}


@dataclass(frozen=True)
class CrdRules:
    """The webhook rules of one operator kind (module doc). ``group``/``version``/``plural``/
    ``kind``: its API; ``suspend``: the path of its suspend lever; ``extra_create``: more
    errors for a queued object at CREATE (pure, may raise ``UnreadableObjectError``);
    ``belongs_elsewhere``: True for an object another kind manages (Kueue's managed ancestor,
    e.g. the RayCluster of a RayJob, which copies the RayJob's labels): both rules leave it
    alone."""

    group: str
    version: str
    plural: str
    kind: str
    suspend: tuple[str, ...]
    extra_create: Callable[[Mapping[str, Any]], list[str]] | None = None
    belongs_elsewhere: Callable[[Mapping[str, Any]], bool] | None = None

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

    def mutate(self, obj: object, operation: str, policy: WebhookPolicy) -> list[JsonPatchOp]:
        """The JSONPatch for an object under admission; ``[]`` when nothing changes.
        Idempotent. Raises ``UnreadableObjectError``."""
        if operation != "CREATE":
            return []
        o = read_object(obj)
        if not read_queue_name(o, policy.queue_name_label) or read_lever(o, self.suspend) \
                or (self.belongs_elsewhere is not None and self.belongs_elsewhere(o)):
            return []
        return [lever_op(o, self.suspend)]

    def _new_spec_errors(self, old: Mapping[str, Any], old_queue: str,
                         new: Mapping[str, Any]) -> list[str]:
        """``extra_create``'s errors of the queued object after an UPDATE that it did not
        have before (Kueue's Ray webhooks run their create checks on every update, e.g.
        ``enableInTreeAutoscaling``): a queued object cannot be changed into one pykueue
        refuses at create, since its reconcile could then no longer read it. Errors the
        stored object already had (created before pykueue ran, or unqueued then) do not
        block other changes to it."""
        if self.extra_create is None:
            return []
        had = set(self.extra_create(old)) if old_queue else set()
        return [e for e in self.extra_create(new) if e not in had]

    def validate(self, old: Mapping[str, Any] | None, new: object, username: str,
                 policy: WebhookPolicy) -> list[str]:
        """Errors (each naming the field and saying why) for creating (``old`` None) or
        updating an object; ``[]`` to allow. Raises ``UnreadableObjectError``."""
        o = read_object(new)
        if self.belongs_elsewhere is not None and self.belongs_elsewhere(o):
            return []
        label = policy.queue_name_label
        queue = read_queue_name(o, label)
        if old is None:
            errors = queue_name_format_errors(queue, label)
            if not queue:
                return errors
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
        errors = self._new_spec_errors(prior, before, o) if queue else []
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
            return patched(rules.mutate(obj, req.operation, env.policy))

        def validation(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
            if not of_kind(req, ("CREATE", "UPDATE")):
                return ALLOW
            old, obj = reviewed_objects(req)
            return refused(rules.validate(old, obj, req.user_info.username, env.policy))

        framework = f"{self.group}/{self.kind.lower()}"
        return (WebhookRoute(self.mutate_path, framework, mutation),
                WebhookRoute(self.validate_path, framework, validation))


