"""Pod groups as a job kind (Kueue ``pkg/controller/jobs/pod``, groups; kueue-integrations.md
2.4-2.6): the gang guarantee for workloads that have no Job object.

Managed Pods (``app.integrations.pod.webhook_rules``) with the label
``kueue.x-k8s.io/pod-group-name`` and the annotation ``kueue.x-k8s.io/pod-group-total-count``
form one group; its object here is
composed from the Pod store: ``{"group": <name>, "pods": [...]}`` plus the first member's
``apiVersion``/``kind``/``metadata``, so that Events about the group land on that Pod.

- Workload: named after the group, stamped ``kueue.x-k8s.io/is-group-workload: "true"``, every
  member a non-controller owner (so it goes when the last member goes); one podSet per role
  (``kueue.x-k8s.io/role-hash``, computed by the webhook) with the role's pod count and the
  template of its first pod by name. It is created only once the group has its total count
  of runnable pods (not Failed, and not deleting unbound); until then the reconciler reports
  ``ErrWorkloadCompose`` on the pods with the count ("the group has 3 of 6 pods"). Pods that
  disagree on queue or total count are refused the same way: nothing is admitted for a group
  that does not hold together.
- Excess pods (``excess``/``trim``, Kueue ``ConstructComposableWorkload`` and
  ``FindMatchingWorkloads``): runnable pods beyond the total count (no Workload yet), or beyond
  their role's podSet count (a Workload), are deleted, event ``ExcessPodDeleted``; the rest
  is admitted. Kept first: ungated pods, then the oldest (``creationTimestamp``, then name).
- Start: every gated member ungated with its role's flavor, in one update each.
- Stop: every member deleted, as Kueue does; the Workload is deleted with the last of them.
- Serving groups (below) and fast-admission ones are not owned by their members: the
  reconciler deletes the Workload once no member is left, so that replacement pods (a
  rollout) keep running on it.
- Fast admission (``kueue.x-k8s.io/pod-group-fast-admission: "true"``, a StatefulSet's
  group): the Workload is built from the first pod with the whole count, without waiting for
  the others, which their owner creates one by one once the first runs; they are ungated as
  they come, against the quota already held.
- Finished: as many Succeeded pods as the total count, or no pod left running and some
  Failed; a serving group (``kueue.x-k8s.io/pod-group-serving: "true"``) never finishes.
  Members that finish or go count as still matching the admission
  (``fewer_pods_match``); more pods, or other shapes, do not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.core.workload import Workload
from app.integrations.framework import GROUP_WORKLOAD_ANNOTATION, KindDefaults, delete_pods
from app.integrations.pod.pod import KIND as POD_KIND
from app.integrations.pod.pod import injected_pod, pod_ready
from app.integrations.pod.webhook_rules import group_total, is_gated
from app.integrations.podsets import admitted_scheduling, role_hash
from app.kube.client import PODS
from app.kube.events import NORMAL
from app.wire.fields import Obj, WorkloadSpecError
from app.wire.names import (
    FAST_ADMISSION_ANNOTATION,
    GROUP_LABEL,
    MANAGED_LABEL,
    QUEUE_NAME_LABEL,
    ROLE_HASH_ANNOTATION,
    SERVING_ANNOTATION,
    TOTAL_COUNT_ANNOTATION,
)
from app.wire.podtemplate import pod_requests
from app.wire.workload import workload_from_object

if TYPE_CHECKING:
    from app.kube.context import Context

MAX_ROLES = 8  # Kueue: "pod group can't include more than 8 roles"
GROUP_INDEX = "podgroup"  # qpod store index: ``namespace/group name`` -> member keys


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase", ""))


def runnable(pod: Mapping[str, Any]) -> bool:
    """Counts toward the group: not Failed, and not being deleted before it was ever bound."""
    if _phase(pod) == "Failed":
        return False
    return not (_meta(pod).get("deletionTimestamp") and not (pod.get("spec") or {}).get(
        "nodeName"))


def _flag(pod: Mapping[str, Any], annotation: str) -> bool:
    return (_meta(pod).get("annotations") or {}).get(annotation) == "true"


def _by_keep_order(pods: list[Obj]) -> list[Obj]:
    """``pods`` in the order Kueue keeps them: ungated first, then the oldest."""
    return sorted(pods, key=lambda p: (is_gated(p), str(_meta(p).get("creationTimestamp", "")),
                                       str(_meta(p).get("name", ""))))


def _role(pod: Mapping[str, Any]) -> str:
    return str((_meta(pod).get("annotations") or {}).get(ROLE_HASH_ANNOTATION) or role_hash(pod))


class PodGroup(KindDefaults):
    """A group of Pods (``JobKind``; module doc). Composed from the ``qpod`` store."""

    key = "podgroup"
    resource = None
    api_group = ""
    kind = "PodGroup"
    # Kueue ``TopLevelJob``: never a managed ancestor's child (the webhook decides that).
    top_level = True
    label_selector = None
    source = POD_KIND.key
    group_workloads = True
    fewer_pods_match = True

    def takes_unlabelled(self, obj: Mapping[str, Any]) -> bool:
        """A group of Pods without a queue name is queued when its members are marked
        managed (the webhook did so in a managed namespace)."""
        return any((_meta(p).get("labels") or {}).get(MANAGED_LABEL) == "true"
                   for p in self._members(obj))

    # ---- composition
    def object_key(self, pod: Mapping[str, Any]) -> str | None:
        group = (_meta(pod).get("labels") or {}).get(GROUP_LABEL)
        return f"{_meta(pod).get('namespace', '')}/{group}" if group else None

    def lookup(self, ctx: Context, ns: str, name: str) -> Obj | None:
        """The group ``ns/name`` composed from its members (sorted by name), or None. Reads
        the qpod store's ``GROUP_INDEX`` (created on first use, then kept by the store on
        every event), so a lookup costs the group's size, not the store's."""
        store = ctx.store(POD_KIND.key)
        store.index(GROUP_INDEX, self.object_key)
        pods = sorted(store.by_index(GROUP_INDEX, f"{ns}/{name}"),
                      key=lambda p: str(_meta(p).get("name", "")))
        if not pods:
            return None
        return {"apiVersion": "v1", "kind": "Pod", "metadata": dict(_meta(pods[0])),
                "group": name, "pods": pods}

    def _members(self, obj: Mapping[str, Any]) -> list[Obj]:
        return list(obj.get("pods") or [])

    def excess(self, obj: Mapping[str, Any], workload: Mapping[str, Any] | None) -> list[Obj]:
        """The runnable members beyond what the group may have (Kueue v0.17.1 pod groups,
        ``removeExcessPods``): without ``workload``, those beyond the total count (only when
        the members agree on queue and count: otherwise the group is refused whole); with
        it, per podSet (role), those beyond the podSet's count (members of a role the
        Workload lacks are left to the mismatch rule; nothing when the Workload's total is
        not the members' total count: it is stale, the mismatch rule replaces it). Kueue
        keeps ungated pods first, then older ones (``creationTimestamp``; name breaks ties
        here), and deletes the rest."""
        pods = [p for p in self._members(obj) if runnable(p)]
        labels = {(_meta(p).get("labels") or {}).get(QUEUE_NAME_LABEL) for p in pods}
        totals = {group_total(p) for p in pods}
        if len(labels) != 1 or len(totals) != 1 or not (total := next(iter(totals))):
            return []
        if workload is None:
            return _by_keep_order(pods)[total:]
        pod_sets = (workload.get("spec") or {}).get("podSets") or []
        counts = [ps.get("count", 1) for ps in pod_sets]
        if not all(isinstance(c, int) for c in counts) or sum(counts) != total:
            # The Workload was built for another total count (a StatefulSet scaled 0 -> M
            # before its group's old Workload went): not this group's size to trim to.
            return []
        extra: list[Obj] = []
        for ps, count in zip(pod_sets, counts, strict=True):
            role = [p for p in pods if _role(p) == ps.get("name")]
            if len(role) > count:
                extra += _by_keep_order(role)[count:]
        return extra

    async def trim(self, ctx: Context, obj: Obj, workload: Mapping[str, Any] | None) -> Obj:
        """Delete ``excess`` members (event ``ExcessPodDeleted`` on each); returns the group
        without them."""
        extra = self.excess(obj, workload)
        if not extra:
            return obj
        await _delete_members(ctx, [p for p in extra if not _meta(p).get("deletionTimestamp")],
                              "ExcessPodDeleted", "Excess pod deleted")
        gone = {id(p) for p in extra}
        return {**obj, "pods": [p for p in self._members(obj) if id(p) not in gone]}

    def queue_name(self, obj: Mapping[str, Any]) -> str:
        for p in self._members(obj):
            q = (_meta(p).get("labels") or {}).get(QUEUE_NAME_LABEL)
            if q:
                return str(q)
        return ""

    def workload_name(self, obj: Mapping[str, Any]) -> str:
        return str(obj["group"])

    def _compose(self, obj: Mapping[str, Any], priority_classes: Mapping[str, int],
                 pod_priority_classes: Mapping[str, int], *, complete: bool) -> Obj:
        """The group's Workload object. Raises ``WorkloadSpecError`` naming what does not
        hold together (``complete``: the group must have its total count of pods)."""
        pods = [p for p in self._members(obj) if runnable(p)]
        where_t = f"metadata.annotations[{TOTAL_COUNT_ANNOTATION}]"
        queues = {(_meta(p).get("labels") or {}).get(QUEUE_NAME_LABEL) for p in pods}
        totals = {(_meta(p).get("annotations") or {}).get(TOTAL_COUNT_ANNOTATION) for p in pods}
        if len(queues) > 1:
            raise WorkloadSpecError(f"metadata.labels[{QUEUE_NAME_LABEL}]",
                                    f"the pods of the group disagree: {sorted(map(str, queues))}")
        if len(totals) > 1:
            raise WorkloadSpecError(where_t, "the pods of the group disagree: "
                                             f"{sorted(map(str, totals))}")
        total = (group_total(pods[0]) or 0) if pods else 0
        if pods and not total:
            raise WorkloadSpecError(where_t, "not an integer from 1 to 100000")
        if len(pods) > total:
            raise WorkloadSpecError(where_t, f"the group has {len(pods)} runnable pods, more "
                                             f"than its total count {total}: delete the extra")
        if pods and _flag(pods[0], FAST_ADMISSION_ANNOTATION):
            # Fast admission (a StatefulSet's group): the whole count from the first pod, since
            # its other pods are created only once this one runs; so every member must have the
            # first pod's shape, or it would run on the first pod's quota.
            first = _role(pods[0])
            odd = sorted(str(_meta(p).get("name")) for p in pods if _role(p) != first)
            if odd:
                raise WorkloadSpecError(f"metadata.annotations[{ROLE_HASH_ANNOTATION}]",
                                        f"pods {', '.join(odd)} differ in shape from the "
                                        "group's first pod")
            roles_fast = {first: [pods[0]] * total}
            self._same_requests({first: pods})
            return self._body(obj, pods, roles_fast, priority_classes, pod_priority_classes)
        if complete and len(pods) < total:
            raise WorkloadSpecError(where_t, f"the group has {len(pods)} of {total} pods: it "
                                             "waits for the rest before it can be admitted")
        roles: dict[str, list[Obj]] = defaultdict(list)
        for p in pods:
            roles[_role(p)].append(p)
        self._same_requests(roles)
        return self._body(obj, pods, roles, priority_classes, pod_priority_classes)

    @staticmethod
    def _same_requests(roles: Mapping[str, list[Obj]]) -> None:
        """Every member of a role requests what its first does now (a Pod resized in place
        keeps its role hash). Raises ``WorkloadSpecError`` naming the Pod that differs."""
        for role, members in roles.items():
            want = pod_requests(members[0].get("spec") or {})
            for p in members[1:]:
                if pod_requests(p.get("spec") or {}) != want:
                    raise WorkloadSpecError(
                        "spec.containers[].resources",
                        f"pod {_meta(p).get('name')} of role {role} requests other resources "
                        f"than pod {_meta(members[0]).get('name')}")

    def _body(self, obj: Mapping[str, Any], pods: list[Obj], roles: Mapping[str, list[Obj]],
              priority_classes: Mapping[str, int],
              pod_priority_classes: Mapping[str, int]) -> Obj:
        """The Workload object of ``pods`` grouped by role (podSet name -> its pods)."""
        if len(roles) > MAX_ROLES:
            raise WorkloadSpecError(f"metadata.annotations[{ROLE_HASH_ANNOTATION}]",
                                    f"a pod group can't include more than {MAX_ROLES} roles")
        pod_sets = []
        for name in sorted(roles):
            first = POD_KIND.workload_object(roles[name][0], priority_classes=priority_classes,
                                             pod_priority_classes=pod_priority_classes)
            ps = first["spec"]["podSets"][0]
            pod_sets.append({**ps, "name": name, "count": len(roles[name])})
        body = POD_KIND.workload_object(pods[0], priority_classes=priority_classes,
                                        pod_priority_classes=pod_priority_classes) if pods else {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {}, "spec": {"queueName": ""}}
        body["metadata"] = {
            "name": obj["group"], "namespace": obj["metadata"]["namespace"],
            "annotations": {GROUP_WORKLOAD_ANNOTATION: "true"}}
        if not (pods and (_flag(pods[0], FAST_ADMISSION_ANNOTATION)
                          or _flag(pods[0], SERVING_ANNOTATION))):
            # Owned by every member, so it goes when the last one goes. Not for a fast-admission
            # group: its first pod alone would own it, and a restart of that pod would take the
            # Workload (and the quota of the running others) with it; nor for a serving group
            # (a LeaderWorkerSet's): its owner replaces its pods in a rollout, and the
            # replacements, started on this admission, would run on with the Workload gone
            # once the last original member went. The reconciler deletes it once no member
            # is left.
            body["metadata"]["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Pod", "name": _meta(p)["name"],
                 "uid": _meta(p).get("uid", ""), "controller": False, "blockOwnerDeletion": True}
                for p in pods]
        body["spec"]["podSets"] = pod_sets
        return body

    def workload_object(self, obj: Mapping[str, Any], *, priority_classes: Mapping[str, int],
                        pod_priority_classes: Mapping[str, int]) -> Obj:
        return self._compose(obj, priority_classes, pod_priority_classes, complete=True)

    def desired(self, obj: Mapping[str, Any], *, priority_classes: Mapping[str, int],
                pod_priority_classes: Mapping[str, int]) -> Workload:
        return workload_from_object(self._compose(obj, priority_classes, pod_priority_classes,
                                                  complete=False))

    # ---- state
    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        return any(is_gated(p) for p in self._members(obj) if runnable(p))

    def is_started(self, obj: Mapping[str, Any]) -> bool:
        return False

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        pods = self._members(obj)
        if pods and _flag(pods[0], SERVING_ANNOTATION):
            return False, "", ""  # a serving group (a StatefulSet's) never finishes
        totals = {group_total(p) for p in pods}
        total = (next(iter(totals)) or 0) if len(totals) == 1 else 0
        succeeded = sum(1 for p in pods if _phase(p) == "Succeeded")
        if total and succeeded >= total:
            return True, "Succeeded", f"{succeeded} pods of the group succeeded"
        failed = [p for p in pods if _phase(p) == "Failed"]
        if failed and all(_phase(p) in ("Succeeded", "Failed") for p in pods) \
                and not any(is_gated(p) for p in pods):
            return True, "Failed", f"{len(failed)} pods of the group failed"
        return False, "", ""

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        return sum(POD_KIND.active_pods(p) for p in self._members(obj))

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        """Kueue ``Pod.PodsReady`` for a group: the group has its total count of pods and
        every one is Ready."""
        pods = self._members(obj)
        total = (group_total(pods[0]) or 0) if pods else 0
        return bool(pods) and len(pods) >= total and all(pod_ready(p) for p in pods)

    # ---- writes
    async def start(self, ctx: Context, obj: Obj, workload: Mapping[str, Any]) -> bool:
        """Ungate every gated member with its role's flavor."""
        scheduling = admitted_scheduling(ctx, workload)
        inject = ctx.settings.scheduling.inject_node_selector
        wrote = False
        for p in self._members(obj):
            role = _role(p)
            if not is_gated(p) or not runnable(p) or role not in scheduling:
                continue  # a member of a role the admission lacks waits (and is a mismatch)
            selector, tolerations = scheduling[role]
            out = await ctx.client.replace(PODS, injected_pod(p, role, selector, tolerations,
                                                              inject_node_selector=inject))
            ctx.store(POD_KIND.key).put(out)
            wrote = True
        if wrote:
            admission = (workload.get("status") or {}).get("admission") or {}
            ctx.recorder.emit(workload, NORMAL, "Started",
                              f"Admitted by clusterQueue {admission.get('clusterQueue', '')}")
        return wrote

    async def stop(self, ctx: Context, obj: Obj, why: str) -> Obj:
        """Delete every member not already going (Kueue stops a group so)."""
        await _delete_members(ctx, [p for p in self._members(obj)
                                    if not _meta(p).get("deletionTimestamp")
                                    and _phase(p) not in ("Succeeded", "Failed")],
                              "Stopped", why)
        return obj


async def _delete_members(ctx: Context, pods: list[Obj], reason: str, message: str) -> None:
    """Delete ``pods`` (this uid only), a Normal event ``reason`` on each one deleted."""
    for p in await delete_pods(ctx, pods):
        ctx.recorder.emit(p, NORMAL, reason, message)


KIND = PodGroup()
