"""KubeRay's RayJob and RayCluster (``ray.io/v1``) as job kinds (Kueue
``pkg/controller/jobs/rayjob``, ``jobs/raycluster``, kueue-integrations.md 7), on the shared base
of the operators' kinds (``app.integrations.templated``).

PodSets: ``head`` (count 1) first, then one per worker group named after ``groupName``
lower-cased, ``count = replicas`` (default 1) clamped to ``[minReplicas, maxReplicas]`` as
KubeRay v1.6.0 runs it (``GetWorkerGroupDesiredReplicas``; Kueue ignores the bounds, so
replicas 1 with minReplicas 4 ran 4 workers on an admission of 1) ``x numOfHosts`` (when
above 1). A RayJob in ``K8sJobMode`` (the CRD
default) adds ``submitter`` (count 1): ``spec.submitterPodTemplate``, else KubeRay's default
(one container ``ray-job-submitter`` with the head's image, requests 500m CPU / 200Mi, limits
1 CPU / 1Gi, ``restartPolicy: Never``); when started with the default, pykueue writes it,
with the flavor, into ``spec.submitterPodTemplate`` (so the flavor reaches the submitter Job:
kueue#12567, as Kueue HEAD does) and removes it again on stop.

Refused (``WorkloadSpecError`` naming the field; the webhook refuses them at create): a worker
group named ``head`` (or ``submitter`` in K8sJobMode), more than 7 worker groups, in-tree
autoscaling (``enableInTreeAutoscaling``: Kueue admits it only with elastic Workload slices,
which pykueue does not build), a RayJob with ``clusterSelector`` (it runs on an existing
cluster, which Kueue does not queue) or without ``rayClusterSpec``, a RayJob whose cluster
outlives it (``shutdownAfterJobFinishes`` not true: Kueue's rule, or its quota would be held by
an idle cluster), and ``SidecarMode`` (the submitter runs in the head pod, whose podSet would
not count it).

Suspend lever: ``spec.suspend`` (both). Finished: a RayJob when ``status.jobDeploymentStatus`` is
``Complete`` or ``Failed``, succeeded only when ``status.jobStatus`` is ``SUCCEEDED``; a
RayCluster never. Active: a RayJob unless its deployment status is ``Suspended`` or new; a
RayCluster while ``status.state`` is ``ready``. Pods ready (waitForPodsReady): a RayJob when its
cluster's state (``status.rayClusterStatus.state``) is ``ready``, a RayCluster when its
``status.state`` is (KubeRay sets ``ready`` once the cluster's pods run). A RayCluster
controlled by a RayJob or RayService (KubeRay copies the RayJob's labels, queue name included,
onto it) is its owner's business: it has no queue of its own (Kueue's managed-ancestor rule).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.integrations.crdrules import CrdRules
from app.integrations.framework import label_queue_name
from app.integrations.templated import Obj, Path, Template, TemplatedKind, get_in, set_in
from app.integrations.webhook_toolkit import WebhookPolicy, read_object, read_queue_name
from app.kube.client import Resource
from app.kube.events import WARNING
from app.wire.fields import WorkloadSpecError, integer, mapping, sequence, string

if TYPE_CHECKING:
    from app.kube.context import Context

GROUP, VERSION = "ray.io", "v1"
SUSPEND = ("spec", "suspend")
MAX_WORKER_GROUPS = 7
K8S_JOB_MODE = "K8sJobMode"
READY = "ready"  # KubeRay QuotaState once the cluster's pods run
SUBMITTER = "submitter"
DEFAULT_SUBMITTER_ANNOTATION = "pykueue.dev/default-submitter"
"""On a RayJob started with KubeRay's default submitter template, which pykueue wrote into
``spec.submitterPodTemplate`` (removed again on stop)."""


def cluster_templates(obj: Mapping[str, Any], at: Path, *, reserved: tuple[str, ...] = ("head",),
                      strict: bool = True) -> list[Template]:
    """``head`` and the worker groups of the RayClusterSpec at ``at`` (module doc). Raises
    ``WorkloadSpecError`` naming the field. ``strict=False``: where the templates are, without
    the refusals of what pykueue does not queue (autoscaling, group count, reserved names),
    so that a stop can restore an object changed into one of those after it started."""
    where = ".".join(str(p) for p in at)
    spec = mapping(get_in(obj, at), where, required=True)
    if strict and spec.get("enableInTreeAutoscaling") is True:
        raise WorkloadSpecError(f"{where}.enableInTreeAutoscaling", "in-tree autoscaling needs "
                                "elastic Workload slices, which pykueue does not build: set it "
                                "false (the worker groups' replicas are admitted as written)")
    head = mapping(spec.get("headGroupSpec"), f"{where}.headGroupSpec", required=True)
    mapping(head.get("template"), f"{where}.headGroupSpec.template", required=True)
    out = [Template("head", 1, (*at, "headGroupSpec", "template"), "head")]
    groups = sequence(spec.get("workerGroupSpecs"), f"{where}.workerGroupSpecs")
    if strict and len(groups) > MAX_WORKER_GROUPS:
        raise WorkloadSpecError(f"{where}.workerGroupSpecs", f"{len(groups)} worker groups: at "
                                f"most {MAX_WORKER_GROUPS} (a Workload holds 8 podSets, one is "
                                "the head)")
    for i, wg in enumerate(groups):
        w = f"{where}.workerGroupSpecs[{i}]"
        wg = mapping(wg, w, required=True)
        name = string(wg.get("groupName"), f"{w}.groupName")
        if not name:
            raise WorkloadSpecError(f"{w}.groupName", "required")
        if strict and name.lower() in reserved:
            raise WorkloadSpecError(f"{w}.groupName", f"{name!r} is the name of another podSet "
                                    f"({', '.join(reserved)})")
        count = integer(wg.get("replicas"), f"{w}.replicas", default=1, minimum=0)
        # KubeRay v1.6.0 runs replicas clamped to [minReplicas, maxReplicas]
        # (GetWorkerGroupDesiredReplicas): the podSet counts what will run, not what is asked.
        low = integer(wg.get("minReplicas"), f"{w}.minReplicas", default=0, minimum=0)
        high = integer(wg.get("maxReplicas"), f"{w}.maxReplicas", default=2**31 - 1, minimum=0)
        count = low if count < low else min(count, high)
        hosts = integer(wg.get("numOfHosts"), f"{w}.numOfHosts", default=1, minimum=0)
        out.append(Template(name.lower(), count * hosts if hosts > 1 else count,
                            (*at, "workerGroupSpecs", i, "template"), name))
    return out


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(obj.get("spec"), "spec", required=True)


def submission_mode(obj: Mapping[str, Any]) -> str:
    """``spec.submissionMode`` (the CRD's default ``K8sJobMode`` when absent)."""
    return string(_spec(obj).get("submissionMode"), "spec.submissionMode") or K8S_JOB_MODE


def default_submitter(obj: Mapping[str, Any]) -> Obj:
    """KubeRay v1.6.0's default submitter pod template (``GetSubmitterTemplate``)."""
    first = get_in(obj, ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec",
                         "containers", 0))
    image = first.get("image", "") if isinstance(first, Mapping) else ""
    return {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "ray-job-submitter", "image": image,
        "resources": {"requests": {"cpu": "500m", "memory": "200Mi"},
                      "limits": {"cpu": "1", "memory": "1Gi"}}}]}}


def owned_by_ray(obj: Mapping[str, Any]) -> bool:
    """True when a RayJob or RayService controls ``obj`` (KubeRay made it)."""
    return any(r.get("controller") and str(r.get("apiVersion", "")).startswith(f"{GROUP}/")
               and r.get("kind") in ("RayJob", "RayService")
               for r in (obj.get("metadata") or {}).get("ownerReferences") or []
               if isinstance(r, Mapping))


def owned_by_rayjob(obj: Mapping[str, Any]) -> bool:
    """True when a RayJob controls ``obj`` (a RayCluster KubeRay made for it)."""
    return any(r.get("controller") and str(r.get("apiVersion", "")).startswith(f"{GROUP}/")
               and r.get("kind") == "RayJob"
               for r in (obj.get("metadata") or {}).get("ownerReferences") or []
               if isinstance(r, Mapping))


def raised_groups(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The worker groups (``spec.workerGroupSpecs[i]``) of RayCluster ``new`` that run more
    pods than in ``old`` (a group new in ``new`` counts from 0). Raises
    ``WorkloadSpecError``."""
    before = {t.name: t.count for t in cluster_templates(old, ("spec",), strict=False)}
    return [t.field.removesuffix(".template")
            for t in cluster_templates(new, ("spec",), strict=False)[1:]
            if t.count > before.get(t.name, 0)]


@dataclass(frozen=True)
class RayClusterRules(CrdRules):
    """``CrdRules`` of the RayCluster, plus: on a cluster that a queued RayJob made (it
    carries the queue label KubeRay copied from the RayJob), raising a worker group's pod
    count is refused to everyone but pykueue (the reconciler would set it back to the
    RayJob's admission: ``RayCluster.hold_to_ancestor``). Beyond Kueue, whose RayCluster
    webhook leaves a cluster a RayJob owns alone."""

    def validate(self, old: Mapping[str, Any] | None, new: object, username: str,
                 policy: WebhookPolicy, **queued: Any) -> list[str]:
        o = read_object(new, "RayCluster")
        if old is not None and owned_by_rayjob(o) and username not in \
                policy.controller_usernames and read_queue_name(old, policy.queue_name_label):
            try:
                raised = raised_groups(old, o)
            except WorkloadSpecError as exc:
                return [str(exc)]
            if raised:
                return [f"{', '.join(raised)}: this RayCluster belongs to a queued RayJob, "
                        "which was admitted for its pods as they are: change the RayJob's "
                        "rayClusterSpec instead (it is queued again for the new shape)"]
        return super().validate(old, new, username, policy, **queued)


class _RayKind(TemplatedKind):
    """A ray.io/v1 kind: ``kind``, its ``plural``; its webhook's rules refuse at create what
    it cannot queue (``spec_errors``) and leave alone what ``belongs_elsewhere``."""

    api_group = GROUP
    suspend = SUSPEND

    def __init__(self, kind: str, plural: str,
                 belongs_elsewhere: Callable[[Mapping[str, Any]], bool] | None = None) -> None:
        self.kind = kind
        self.key = kind.lower()
        self.resource = Resource(GROUP, VERSION, plural, kind)
        rules = RayClusterRules if kind == "RayCluster" else CrdRules
        self.rules = rules(GROUP, VERSION, plural, kind, SUSPEND, extra_create=self.spec_errors,
                           belongs_elsewhere=belongs_elsewhere,
                           takes_unlabelled=self.takes_unlabelled)


class RayJob(_RayKind):
    """ray.io/v1 RayJob (``JobKind``; module doc)."""

    def takes_unlabelled(self, obj: Mapping[str, Any]) -> bool:
        """False for a RayJob on an existing cluster (``spec.clusterSelector``): Kueue skips
        it (``RayJob.Skip``), so it is not queued without a queue name either (Kueue
        v0.17.1's webhook would suspend it for good)."""
        spec = obj.get("spec")
        return not (isinstance(spec, Mapping) and spec.get("clusterSelector"))

    def templates(self, obj: Mapping[str, Any]) -> list[Template]:
        spec = _spec(obj)
        if mapping(spec.get("clusterSelector"), "spec.clusterSelector"):
            raise WorkloadSpecError("spec.clusterSelector", "a RayJob on an existing RayCluster "
                                    "is not queued (Kueue skips it): remove the queue-name "
                                    "label, or the clusterSelector and give a rayClusterSpec")
        if spec.get("shutdownAfterJobFinishes") is not True:
            raise WorkloadSpecError("spec.shutdownAfterJobFinishes", "must be true for a queued "
                                    "RayJob (Kueue), or its RayCluster would hold the quota "
                                    "after the job ends")
        mode = submission_mode(obj)
        if mode == "SidecarMode":
            raise WorkloadSpecError("spec.submissionMode", "SidecarMode is not supported: its "
                                    "submitter container in the head pod would use no quota; "
                                    "use K8sJobMode or HTTPMode")
        k8s_job = mode == K8S_JOB_MODE
        out = cluster_templates(obj, ("spec", "rayClusterSpec"),
                                reserved=("head", SUBMITTER) if k8s_job else ("head",))
        if k8s_job:
            out.append(Template(SUBMITTER, 1, ("spec", "submitterPodTemplate"), SUBMITTER))
        return out

    def layout(self, obj: Mapping[str, Any]) -> list[Template]:
        """Where the templates are (``cluster_templates`` not strict, the submitter's in
        K8sJobMode), for a stop."""
        out = cluster_templates(obj, ("spec", "rayClusterSpec"), strict=False)
        if submission_mode(obj) == K8S_JOB_MODE:
            out.append(Template(SUBMITTER, 1, ("spec", "submitterPodTemplate"), SUBMITTER))
        return out

    def child_jobs(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """In K8sJobMode its submitter, a Job named after the RayJob (KubeRay v1.6.0), with
        the ``submitter`` podSet's count (1). Raises ``WorkloadSpecError``."""
        return self._podset_child(obj, SUBMITTER, "")

    def template_of(self, obj: Mapping[str, Any], t: Template) -> Any:
        got = get_in(obj, t.path)
        if got is None and t.name == SUBMITTER:
            return default_submitter(obj)
        return got

    def injected(self, obj: Mapping[str, Any], scheduling: Mapping[str, tuple[Mapping[str, str],
                 list[Obj]]], *, inject_node_selector: bool = True) -> Obj:
        """As the base, with KubeRay's default submitter template written first (module
        doc)."""
        ts = self.checked_templates(obj)
        if any(t.name == SUBMITTER for t in ts) and get_in(obj, ts[-1].path) is None:
            obj = copy.deepcopy(dict(obj))
            set_in(obj, ts[-1].path, default_submitter(obj))
            meta = obj.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}),
                                   DEFAULT_SUBMITTER_ANNOTATION: "true"}
        return super().injected(obj, scheduling, inject_node_selector=inject_node_selector)

    def restored(self, obj: Mapping[str, Any]) -> Obj:
        out = super().restored(obj)
        anns = (out.get("metadata") or {}).get("annotations") or {}
        if anns.get(DEFAULT_SUBMITTER_ANNOTATION) == "true":
            out["spec"].pop("submitterPodTemplate", None)
            rest = {k: v for k, v in anns.items() if k != DEFAULT_SUBMITTER_ANNOTATION}
            if rest:
                out["metadata"]["annotations"] = rest
            else:
                out["metadata"].pop("annotations", None)
        return out

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        """``Complete``/``Failed`` deployment; succeeded iff ``jobStatus`` is SUCCEEDED."""
        status = obj.get("status") or {}
        deployment = status.get("jobDeploymentStatus") or ""
        if deployment not in ("Complete", "Failed"):
            return False, "", ""
        job_status = status.get("jobStatus") or ""
        message = status.get("message") or f"RayJob {deployment.lower()} (job {job_status})"
        return True, "Succeeded" if job_status == "SUCCEEDED" else "Failed", message

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        """1 while KubeRay may hold pods (any deployment status but new and Suspended: Kueue
        ``IsActive``), else 0."""
        deployment = (obj.get("status") or {}).get("jobDeploymentStatus") or ""
        return 0 if deployment in ("", "Suspended") else 1

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        """``status.rayClusterStatus.state`` is ``ready`` (Kueue v0.17.1 ``RayJob.PodsReady``)."""
        cluster = (obj.get("status") or {}).get("rayClusterStatus") or {}
        return isinstance(cluster, Mapping) and cluster.get("state") == READY


def held_to(cluster: Mapping[str, Any], admitted: Mapping[str, int]) -> Obj | None:
    """A copy of ``cluster`` whose worker groups run at most ``admitted`` pods each (podSet
    name -> count, a group absent from it 0): a group that would run more gets ``replicas``
    (and ``minReplicas``, when above) lowered to its admitted count over ``numOfHosts``; None
    when no group runs more than admitted."""
    out = copy.deepcopy(dict(cluster))
    changed = False
    for t in cluster_templates(cluster, ("spec",), strict=False)[1:]:
        allowed = int(admitted.get(t.name, 0))
        if t.count <= allowed:
            continue
        wg = out["spec"]["workerGroupSpecs"][t.path[-2]]
        hosts = integer(wg.get("numOfHosts"), "numOfHosts", default=1, minimum=0)
        replicas = allowed // hosts if hosts > 1 else allowed
        wg["replicas"] = replicas
        if integer(wg.get("minReplicas"), "minReplicas", default=0, minimum=0) > replicas:
            wg["minReplicas"] = replicas
        changed = True
    return out if changed else None


RESYNC_ANNOTATION = "pykueue.dev/resync"
"""On a started RayCluster that lacks pods: when pykueue last asked KubeRay to look at it
again (seconds since the epoch; ``RayCluster.settle``)."""
RESYNC_SECONDS = 10.0


class RayCluster(_RayKind):
    """ray.io/v1 RayCluster (``JobKind``; module doc): never finishes; deleting it ends it.

    Its informer lists every RayCluster (``label_selector`` None), so a cluster a queued
    RayJob made is held to that RayJob's admission with or without the queue label KubeRay
    copied onto it (``hold_to_ancestor``)."""

    label_selector = None
    # KubeRay v1.6.0 labels every pod of a cluster ``ray.io/cluster=<name>`` (``labelPod``)
    # and controls it; it writes no uid label.
    pod_labels = ("ray.io/cluster", "")

    async def settle(self, ctx: Context, obj: Obj, pods: int) -> float | None:
        """A started cluster that is not ``ready`` and has fewer pods than it asks for
        (``pods``: its pods holding resources) gets the annotation ``RESYNC_ANNOTATION`` (the
        time) at most every ``RESYNC_SECONDS``, which makes KubeRay reconcile it: KubeRay
        v1.6.0 skips a worker group while pods it created are unseen (its scale expectations,
        30 s, for the pods a stop deleted before it saw them) and then looks again only after
        300 s. Returns seconds to look again while the pods are missing."""
        if self.is_suspended(obj) or self.pods_ready(obj):
            return None
        try:
            groups = (obj.get("spec") or {}).get("workerGroupSpecs") or []
            # A worker group KubeRay was told to suspend makes no pods.
            wanted = sum(t.count for t in cluster_templates(obj, ("spec",), strict=False)
                         if t.name == "head" or (groups[t.path[-2]] or {}).get("suspend")
                         is not True)
        except WorkloadSpecError:
            return None
        if pods >= wanted:
            return None
        meta = obj.get("metadata") or {}
        last = str((meta.get("annotations") or {}).get(RESYNC_ANNOTATION) or "")
        now = ctx.clock()
        try:
            due = now - float(last) >= RESYNC_SECONDS
        except ValueError:
            due = True
        if due:
            body = copy.deepcopy(dict(obj))
            body["metadata"]["annotations"] = {**(meta.get("annotations") or {}),
                                               RESYNC_ANNOTATION: f"{now:.0f}"}
            ctx.store(self.key).put(await ctx.client.replace(self.resource, body))
        return RESYNC_SECONDS

    async def hold_to_ancestor(self, ctx: Context, obj: Obj, parent_kind: Any,
                               parent: Mapping[str, Any], workload: Mapping[str, Any]) -> None:
        """A running cluster of an admitted RayJob (``parent``) whose worker groups were raised
        above the RayJob's admission (``workload``: its podSet counts) is set back to it
        (``held_to``), Warning Event ``ExceedsAncestorAdmission``; KubeRay then deletes the
        workers beyond it. Goes beyond Kueue, whose RayCluster integration leaves a cluster a
        RayJob owns to the RayJob."""
        admitted = {str(p.get("name")): int(p.get("count") or 0)
                    for p in (workload.get("spec") or {}).get("podSets") or []
                    if isinstance(p, Mapping)}
        try:
            body = held_to(obj, admitted)
        except WorkloadSpecError:
            return
        if body is None:
            return
        written = await ctx.client.replace(self.resource, body)
        ctx.store(self.key).put(written)
        meta = obj.get("metadata") or {}
        ctx.recorder.emit(written, WARNING, "ExceedsAncestorAdmission",
                          f"worker groups run more pods than the {parent_kind.kind} "
                          f"{meta.get('namespace')}/{(parent.get('metadata') or {}).get('name')}"
                          f" was admitted for ({admitted}): replicas set back")

    def queue_name(self, obj: Mapping[str, Any]) -> str:  # type: ignore[override]
        """The queue label, except on a cluster a RayJob or RayService controls."""
        return "" if owned_by_ray(obj) else label_queue_name(obj)

    def templates(self, obj: Mapping[str, Any]) -> list[Template]:
        return cluster_templates(obj, ("spec",))

    def layout(self, obj: Mapping[str, Any]) -> list[Template]:
        return cluster_templates(obj, ("spec",), strict=False)

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        return False, "", ""

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        """1 while ``status.state`` is ``ready`` (Kueue ``IsActive``), else 0."""
        return 1 if self.pods_ready(obj) else 0

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        """``status.state`` is ``ready`` (Kueue v0.17.1 ``RayCluster.PodsReady``)."""
        return (obj.get("status") or {}).get("state") == READY


RAYJOB = RayJob("RayJob", "rayjobs")
RAYCLUSTER = RayCluster("RayCluster", "rayclusters", belongs_elsewhere=owned_by_ray)
