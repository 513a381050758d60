"""leaderworkerset.x-k8s.io/v1 LeaderWorkerSet (Kueue v0.17.1
``pkg/controller/jobs/leaderworkerset``, kueue-integrations.md 4), pure admission rules (no
I/O) and its routes (``ROUTES``: ``/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset``,
``/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset``), framework
``leaderworkerset.x-k8s.io/leaderworkerset`` (needs ``pod``).

A queued LeaderWorkerSet (its queue-name label; or any in a managed namespace with
``jobs.manage_jobs_without_queue_name``) gets, on its leader template (when set) and its
worker template, the queue, the managed label, its priority-class label and the annotation
``kueue.x-k8s.io/pod-suspending-parent: leaderworkerset.x-k8s.io/leaderworkerset``
(``app.integrations.parents.queue_template_patch``; Kueue's webhook writes the annotation
and the priority class there, its pod reconciler the queue afterwards), and each template
the podSet name its pods take: ``leader`` and ``worker``, or ``main`` for a worker template
without a leader template (Kueue ``podSets``). Its pods are then queued by the Pod webhook
(gated) and each replica group ``i`` (the leader pod ``<lws>-<i>`` and the ``size - 1``
workers ``<lws>-<i>-<j>`` the operator's worker StatefulSet creates) is one pod group
``leaderworkerset-<lws>-<i>`` of ``size`` pods (``GROUP_PARENTS``: ``membership``), serving,
with podSets ``leader`` (1) and ``worker`` (``size - 1``): one Workload per group, admitted
whole, never finished; scaling ``spec.replicas`` adds or removes groups and so their
Workloads (a group's Workload is owned by its pods and goes with the last of them).

Departure from Kueue v0.17.1 (Kueue's prebuilt Workload is named
``leaderworkerset-<lws>-<i>-<hash>`` and created from the LeaderWorkerSet up front): here the
group's Workload is composed from its pods, as for every pod group, once all ``size`` pods
exist (the operator creates them at once, gated); its name is the group's. A consequence:
after an eviction (a preemption, a ``PodsReadyTimeout``) the group's pods are deleted, its
Workload goes with the last of them and the operator's new pods get a new Workload, so
``status.requeueState.count`` starts again from 0 (each waitForPodsReady backoff is the base
one and ``backoffLimitCount`` never deactivates a group); Kueue's Workload, owned by the
LeaderWorkerSet, keeps the count across the pods' re-creation.

Validation of an UPDATE (pykueue's identities exempt): the queue name is immutable (Kueue
``ValidateImmutableField``); while queued, a priority class cannot be added while a group is
ready (``status.readyReplicas`` above 0) nor ever removed (Kueue
``ValidateUpdateForWorkloadPriorityClassName``), the templates' shape (``role_hash``: requests,
ports, nodeSelector, affinity, tolerations, priority, ...) and the presence of a leader
template cannot change (Kueue ``ValidateImmutablePodGroupPodSpec``), nor can
``spec.leaderWorkerTemplate.size``: raising it after admission would run more pods per group
than the group's quota covers (Kueue fix #13279, feature gate ``LWSImmutableGroupSize``, Beta
and on in the releases that carry it; Kueue v0.17.1 lacks it). ``spec.replicas`` stays
mutable: each group is its own Workload and is admitted through quota. Malformed objects
raise ``UnreadableObjectError`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.integrations.parents import (
    GroupParent,
    Membership,
    controller_of,
    group_name,
    object_at,
    owner_routes,
    queue_template_patch,
)
from app.integrations.podsets import role_hash
from app.integrations.webhook_toolkit import (
    JsonPatchOp,
    UnreadableObjectError,
    WebhookPolicy,
    priority_class_label_errors,
    read_queue_name,
)
from app.wire.names import ROLE_HASH_ANNOTATION

FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"  # Kueue's FrameworkName
API_GROUP = "leaderworkerset.x-k8s.io"
# Written by the LeaderWorkerSet operator (sigs.k8s.io/lws api/leaderworkerset/v1).
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
LEADER_NAME_ANNOTATION = "leaderworkerset.sigs.k8s.io/leader-name"  # on worker pods only
LEADER, WORKER, MAIN = "leader", "worker", "main"  # Kueue's podSet names

_LWT = ("spec", "leaderWorkerTemplate")
LEADER_TEMPLATE = (*_LWT, "leaderTemplate")
WORKER_TEMPLATE = (*_LWT, "workerTemplate")


def _lwt(lws: Mapping[str, Any]) -> Mapping[str, Any]:
    return object_at(object_at(lws.get("spec"), "spec").get("leaderWorkerTemplate"),
                "spec.leaderWorkerTemplate")


def size(lws: Mapping[str, Any]) -> int:
    """``spec.leaderWorkerTemplate.size`` (default 1): the pods of one replica group. Raises
    ``UnreadableObjectError``."""
    value = _lwt(lws).get("size", 1)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UnreadableObjectError("spec.leaderWorkerTemplate.size",
                                    "expected an integer of at least 1")
    return value


def has_leader_template(lws: Mapping[str, Any]) -> bool:
    """Whether ``spec.leaderWorkerTemplate.leaderTemplate`` is set."""
    return _lwt(lws).get("leaderTemplate") is not None


def pod_sets(lws: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(podSet name, count) of one replica group's Workload (Kueue ``podSets``): ``leader``
    1 and ``worker`` ``size - 1`` with a leader template (a ``worker`` of 0 when ``size`` is
    1), else ``main`` ``size``. Raises ``UnreadableObjectError``."""
    n = size(lws)
    return [(LEADER, 1), (WORKER, n - 1)] if has_leader_template(lws) else [(MAIN, n)]


def mutate_leaderworkerset(lws: Mapping[str, Any], operation: str, policy: WebhookPolicy, *,
                           manage_unlabelled: bool = False) -> list[JsonPatchOp]:
    """The queue, the suspending parent and the podSet name onto a queued LeaderWorkerSet's
    templates (module doc). Raises ``UnreadableObjectError``."""
    leader = has_leader_template(lws)
    patch: list[JsonPatchOp] = []
    for template, role in ((LEADER_TEMPLATE, LEADER), (WORKER_TEMPLATE,
                                                         WORKER if leader else MAIN)):
        if template is LEADER_TEMPLATE and not leader:
            continue
        patch += queue_template_patch(lws, operation, policy, FRAMEWORK,
                                      manage_unlabelled=manage_unlabelled, template=template,
                                      annotations={ROLE_HASH_ANNOTATION: role})
    return patch


def _template_shape(lws: Mapping[str, Any], template: tuple[str, ...]) -> str | None:
    tpl = object_at(_lwt(lws).get(template[-1]), ".".join(template))
    if not tpl:
        return None
    return role_hash({"spec": object_at(tpl.get("spec"), ".".join((*template, "spec")))})


def validate_leaderworkerset_update(old: Mapping[str, Any], new: Mapping[str, Any],
                                   username: str, policy: WebhookPolicy, *,
                                   manage_unlabelled: bool = False) -> list[str]:
    """Errors for an UPDATE of a LeaderWorkerSet (module doc); ``[]`` to allow. Raises
    ``UnreadableObjectError``."""
    if username in policy.controller_usernames:
        return []
    errors: list[str] = []
    old_q = read_queue_name(old, policy.queue_name_label)
    new_q = read_queue_name(new, policy.queue_name_label)
    if old_q != new_q:
        errors.append(f"metadata.labels[{policy.queue_name_label}]: field is immutable (was "
                      f"{old_q!r}); delete and re-create the LeaderWorkerSet")
    if not new_q and not manage_unlabelled:
        return errors
    ready = (old.get("status") or {}).get("readyReplicas") or 0
    errors += priority_class_label_errors(old, new, not ready, "LeaderWorkerSet")
    for template in (LEADER_TEMPLATE, WORKER_TEMPLATE):
        before, after = _template_shape(old, template), _template_shape(new, template)
        if before != after:
            what = "is set or removed" if None in (before, after) else \
                "changes its pods' shape (requests, ports, nodeSelector, affinity, " \
                "tolerations, priority, ...)"
            errors.append(f"{'.'.join(template)}: field is immutable while the "
                          f"LeaderWorkerSet is queued ({what}): its groups were admitted "
                          "for the old one")
    if size(old) != size(new):
        errors.append(f"spec.leaderWorkerTemplate.size: field is immutable while the "
                      f"LeaderWorkerSet is queued (was {size(old)}, now {size(new)}): each "
                      f"group was admitted for {size(old)} pods; re-create it at the new size")
    return errors


# ----------------------------------------------------------------------------------------------
# Its pods' groups (read by the Pod webhook)


def owner_of_pod(pod: Mapping[str, Any]) -> str | None:
    """The LeaderWorkerSet that made ``pod``: its name label, on a pod a StatefulSet controls
    (the leader StatefulSet, or a group's worker StatefulSet), else None."""
    name = ((pod.get("metadata") or {}).get("labels") or {}).get(NAME_LABEL)
    if not isinstance(name, str) or not name:
        return None
    return name if controller_of(pod, "StatefulSet", "apps") is not None else None


def group_index(pod: Mapping[str, Any], lws: str) -> int | None:
    """The replica group of ``pod``: its group-index label (the operator writes it on the
    workers' template and, by its own Pod webhook, on leaders), else a leader's StatefulSet
    ordinal (leader pods are named ``<lws>-<i>``); None when neither reads."""
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(GROUP_INDEX_LABEL)
    if value is None and LEADER_NAME_ANNOTATION not in (meta.get("annotations") or {}):
        name = str(meta.get("name", ""))
        value = name[len(lws) + 1:] if name.startswith(f"{lws}-") else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 6:
        return int(value)
    return None


def membership(pod: Mapping[str, Any], lws: str, ask: Any = None) -> Membership | None:
    """``pod``'s group: ``leaderworkerset-<lws>-<index>`` (``parents.group_name``) of the
    group's size (the operator's size annotation, from ``spec.leaderWorkerTemplate.size``,
    immutable while queued), its role the podSet name its template carries (``leader``,
    ``worker``, ``main``), else ``worker`` for a pod naming its leader and ``leader``
    otherwise. None when the index or the size does not read."""
    index = group_index(pod, lws)
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    total = ann.get(SIZE_ANNOTATION)
    if index is None or not (isinstance(total, str) and total.isascii() and total.isdigit()
                             and 0 < len(total) <= 6 and int(total) >= 1):
        return None
    role = ann.get(ROLE_HASH_ANNOTATION)
    if role not in (LEADER, WORKER, MAIN):
        role = WORKER if LEADER_NAME_ANNOTATION in ann else LEADER
    return Membership(group_name(f"{lws}-{index}", "leaderworkerset"), int(total), role)


GROUP_PARENTS = (GroupParent("LeaderWorkerSet", FRAMEWORK, FRAMEWORK, owner_of_pod,
                             membership),)

ROUTES = owner_routes("LeaderWorkerSet", mutate_leaderworkerset,
                      validate_leaderworkerset_update, group=API_GROUP, framework=FRAMEWORK,
                      unlabelled_validation=True)
