"""Plain Pod as a job kind (Kueue ``pkg/controller/jobs/pod``, single pods;
kueue-integrations.md 2.4-2.6).

A managed Pod (``app.integrations.pod.webhook_rules``: labelled
``kueue.x-k8s.io/managed: "true"`` and gated with ``kueue.x-k8s.io/admission`` by the
webhook) gets one Workload ``pod-<name>-<hash5>`` with one podSet ``main`` of count 1 whose
template is the Pod's spec.
Suspend lever: the scheduling gate. Start: one update of the gated Pod that adds the flavor's
nodeSelector (allowed on a gated Pod), its tolerations and the podset label, and removes the
gate. Stop (eviction, no admission, no matching Workload): the Pod is deleted, as Kueue does;
its Workload goes with it (quota released once the Pod object is gone, so never while it runs).
A Pod is not restarted: whoever made it makes a new one, which queues again. Finished: phase
``Succeeded`` / ``Failed``.

Difference from Kueue: no ``kueue.x-k8s.io/managed`` finalizer on the Pod. Kueue keeps it to
read the final phase of a Pod deleted while running; pykueue releases the quota only when the
Pod object is gone (which, for a running Pod, is after its containers stopped), so the
finalizer is not needed for quota, and a Pod can never be left Terminating by pykueue.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.core.workload import Workload
from app.integrations.framework import KindDefaults
from app.integrations.pod.webhook_rules import ADMISSION_GATE, GROUP_LABEL, MANAGED_LABEL, is_gated
from app.integrations.podsets import admitted_scheduling, merge_tolerations, merged_node_selector
from app.kube.client import PODS
from app.kube.errors import NotFound
from app.kube.events import NORMAL
from app.wire.fields import Obj
from app.wire.names import PODSET_LABEL, QUEUE_NAME_LABEL
from app.wire.workload import workload_from_job, workload_name_for_owner, workload_object_for_job

if TYPE_CHECKING:
    from app.kube.context import Context



def _as_job(pod: Mapping[str, Any]) -> Obj:
    """The Pod seen as a one-pod Job, so the Job's Workload rules (requests, priority, time
    limit, queue name) read it: template = the Pod's spec, without what the scheduler and
    pykueue write (nodeName, schedulingGates)."""
    meta = pod.get("metadata") or {}
    spec = copy.deepcopy(dict(pod.get("spec") or {}))
    for f in ("nodeName", "schedulingGates"):
        spec.pop(f, None)
    keep = ("name", "namespace", "uid", "labels", "creationTimestamp")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {k: meta[k] for k in keep if k in meta},
            "spec": {"parallelism": 1, "template": {"spec": spec}}}


def injected_pod(pod: Obj, pod_set: str, node_selector: Mapping[str, str],
                 tolerations: list[Mapping[str, Any]], *, inject_node_selector: bool) -> Obj:
    """A copy of the gated ``pod`` started: the flavor's nodeSelector merged (raises
    ``InjectionConflict`` when it contradicts the Pod's own), tolerations appended without
    duplicates, the podset label, and the admission gate removed."""
    out = copy.deepcopy(pod)
    spec = out.setdefault("spec", {})
    if inject_node_selector and node_selector:
        spec["nodeSelector"] = merged_node_selector(spec.get("nodeSelector") or {},
                                                    node_selector, "Pod")
    if tolerations:
        spec["tolerations"] = merge_tolerations(spec.get("tolerations") or [], tolerations)
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != ADMISSION_GATE]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    out.setdefault("metadata", {}).setdefault("labels", {})[PODSET_LABEL] = pod_set
    return out


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """The pod's ``Ready`` condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in ((pod.get("status") or {}).get("conditions")) or [])


class PlainPod(KindDefaults):
    """core/v1 Pod (``JobKind``; module doc)."""

    key = "qpod"  # the extender's informer of every Pod already uses "pod"
    resource = PODS
    api_group = ""
    kind = "Pod"
    # Kueue ``TopLevelJob``: never a managed ancestor's child (the webhook decides that).
    top_level = True
    label_selector: str | None = f"{MANAGED_LABEL}=true,{QUEUE_NAME_LABEL},{QUEUE_NAME_LABEL}!="
    # Kueue manageJobsWithoutQueueName: the webhook marks an unlabelled Pod of a managed
    # namespace managed and gates it; the informer then lists every marked Pod.
    unlabelled_selector = f"{MANAGED_LABEL}=true"

    def takes_unlabelled(self, obj: Mapping[str, Any]) -> bool:
        """An unlabelled Pod is queued on its own only when the webhook marked it managed and
        it is not a member of a pod group (the group is queued)."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return labels.get(MANAGED_LABEL) == "true" and not labels.get(GROUP_LABEL)

    def queue_name(self, obj: Mapping[str, Any]) -> str:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(GROUP_LABEL):
            return ""  # a member of a pod group: the group is queued, not the Pod
        return str(labels.get(QUEUE_NAME_LABEL, ""))

    def workload_name(self, obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return workload_name_for_owner("Pod", "", str(meta.get("name", "")),
                                       str(meta.get("uid", "")))

    def workload_object(self, obj: Mapping[str, Any], *, priority_classes: Mapping[str, int],
                        pod_priority_classes: Mapping[str, int]) -> Obj:
        body = workload_object_for_job(_as_job(obj), priority_classes=priority_classes,
                                       pod_priority_classes=pod_priority_classes)
        body["metadata"]["name"] = self.workload_name(obj)
        for ref in body["metadata"].get("ownerReferences") or []:
            ref.update(apiVersion="v1", kind="Pod")
        return body

    def desired(self, obj: Mapping[str, Any], *, priority_classes: Mapping[str, int],
                pod_priority_classes: Mapping[str, int]) -> Workload:
        return workload_from_job(_as_job(obj), priority_classes=priority_classes,
                                 pod_priority_classes=pod_priority_classes)

    def is_suspended(self, obj: Mapping[str, Any]) -> bool:
        return is_gated(obj)

    def is_started(self, obj: Mapping[str, Any]) -> bool:
        return False  # not gated is "not suspended": the reconciler stops it unless admitted

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        status = obj.get("status") or {}
        phase = status.get("phase")
        if phase == "Succeeded":
            return True, "Succeeded", status.get("message") or "Pod succeeded"
        if phase == "Failed":
            return True, "Failed", status.get("message") or status.get("reason") or "Pod failed"
        return False, "", ""

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        if self.finished(obj)[0]:
            return 0
        return 0 if is_gated(obj) and not (obj.get("spec") or {}).get("nodeName") else 1

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        """Kueue ``Pod.PodsReady``: the pod's ``Ready`` condition is True."""
        return pod_ready(obj)

    async def start(self, ctx: Context, obj: Obj, workload: Mapping[str, Any]) -> bool:
        """Ungate with the admission's flavor applied (one update; a no-op once ungated)."""
        if not is_gated(obj):
            return False
        scheduling = admitted_scheduling(ctx, workload)
        pod_set = next(iter(scheduling), "main")
        selector, tolerations = scheduling.get(pod_set, ({}, []))
        desired = injected_pod(obj, pod_set, selector, tolerations,
                               inject_node_selector=ctx.settings.scheduling.inject_node_selector)
        out = await ctx.client.replace(PODS, desired)
        ctx.store(self.key).put(out)
        admission = (workload.get("status") or {}).get("admission") or {}
        ctx.recorder.emit(obj, NORMAL, "Started",
                          f"Admitted by clusterQueue {admission.get('clusterQueue', '')}")
        return True

    async def stop(self, ctx: Context, obj: Obj, why: str) -> Obj:
        """Delete the Pod (Kueue stops a plain Pod by deleting it); its Workload follows once
        the Pod object is gone."""
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp"):
            try:
                await ctx.client.delete(PODS, meta["name"], meta["namespace"], uid=meta.get("uid"))
            except NotFound:
                return obj
            ctx.recorder.emit(obj, NORMAL, "Stopped", why)
        return obj


KIND = PlainPod()
