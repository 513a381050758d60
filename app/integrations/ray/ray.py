"""KubeRay's RayJob, RayCluster and RayService (``ray.io/v1``) as job kinds (Kueue
``pkg/controller/jobs/rayjob``, ``jobs/raycluster``, ``jobs/rayservice``, kueue-integrations.md
7), on the shared base of the operators' kinds (``app.integrations.templated``). A RayService's
podSets, refusals and lever are its ``spec.rayClusterConfig``'s (``RayService``).

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
controlled by a RayJob or RayService (KubeRay copies its owner's labels, queue name included,
onto it) is its owner's business: it has no queue of its own (Kueue's managed-ancestor rule),
and is held to its owner's admission (``RayCluster.hold_to_ancestor``).

MultiKueue (Kueue v0.17.1's Ray adapters, ``app.core.multikueue.RAY``): on a queued object whose
ClusterQueue has a MultiKueue AdmissionCheck the webhook sets ``spec.managedBy:
kueue.x-k8s.io/multikueue`` (unset or ``ray.io/kuberay-operator`` before), so the manager's
KubeRay leaves it alone; on a worker, an object labelled ``kueue.x-k8s.io/prebuilt-workload-name``
adopts that Workload copy (``TemplatedKind.workload_name``); the RayCluster KubeRay makes for a
RayJob carries the label too (KubeRay copies the RayJob's labels) and stays its owner's business.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.multikueue import MULTIKUEUE_CONTROLLER, adapter_for
from app.integrations.crdrules import CrdRules
from app.integrations.framework import (
    controlled_by,
    controller_uid,
    label_queue_name,
    pods_of,
)
from app.integrations.podsets import strip_admission
from app.integrations.templated import Obj, Path, Template, TemplatedKind, get_in, set_in
from app.integrations.webhook_toolkit import WebhookPolicy, read_object, read_queue_name
from app.kube.client import WORKLOADS, Resource
from app.kube.errors import Conflict, NotFound
from app.kube.events import NORMAL, WARNING
from app.wire.fields import WorkloadSpecError, integer, mapping, sequence, string
from app.wire.names import ORIGINAL_ANNOTATION, PODSET_LABEL
from app.wire.owners import controller_of_object
from app.wire.podtemplate import pod_requests
from app.wire.podtemplate import template_claims as pod_template_claims
from app.wire.workload import workload_from_object

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


def managed_by_multikueue(obj: Mapping[str, Any]) -> bool:
    """``spec.managedBy`` is ``kueue.x-k8s.io/multikueue``: a MultiKueue manager's object,
    which KubeRay v1.6.0 leaves alone (its copy runs on a worker)."""
    spec = obj.get("spec")
    return isinstance(spec, Mapping) and spec.get("managedBy") == MULTIKUEUE_CONTROLLER


RAY_OWNERS = ("RayJob", "RayService")


def ray_owner(obj: Mapping[str, Any]) -> str:
    """The kind (``RayJob`` or ``RayService``) of the ray.io controller of ``obj`` (a
    RayCluster KubeRay made for it), or ``""``."""
    ref = controller_of_object(obj)
    return ref.kind if ref is not None and ref.kind in RAY_OWNERS and ref.group == GROUP else ""


def owned_by_ray(obj: Mapping[str, Any]) -> bool:
    """True when a RayJob or RayService controls ``obj`` (KubeRay made it)."""
    return bool(ray_owner(obj))


def raised_groups(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The worker groups (``spec.workerGroupSpecs[i]``) of RayCluster ``new`` whose podSet (the
    lower-cased ``groupName``, as Kueue names it: groups sharing it share the podSet) runs
    more pods than in ``old`` (a podSet ``old`` has no group of counts from 0). Raises
    ``WorkloadSpecError``."""
    def totals(obj: Mapping[str, Any]) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in cluster_templates(obj, ("spec",), strict=False)[1:]:
            out[t.name] = out.get(t.name, 0) + t.count
        return out
    before, after = totals(old), totals(new)
    return [t.field.removesuffix(".template")
            for t in cluster_templates(new, ("spec",), strict=False)[1:]
            if t.count and after[t.name] > before.get(t.name, 0)]


def template_requests(obj: Mapping[str, Any], t: Template) -> dict[str, int]:
    """Per-pod requests of template ``t`` of ``obj`` (``pod_requests``: milli-CPU, bytes,
    counts). Raises ``WorkloadSpecError`` naming the field."""
    tpl = mapping(get_in(obj, t.path), t.field, required=True)
    return pod_requests(mapping(tpl.get("spec"), f"{t.field}.spec", required=True),
                        field=f"{t.field}.spec")


def template_claims(obj: Mapping[str, Any], t: Template) -> str:
    """The DRA claims of template ``t`` of ``obj`` as one comparable string (the pod's
    ``spec.resourceClaims`` and each container's ``resources.claims``,
    ``app.wire.podtemplate.template_claims``)."""
    return pod_template_claims(get_in(obj, t.path))


def template_shape(obj: Mapping[str, Any], t: Template) -> tuple[dict[str, int], str]:
    """What a pod of template ``t`` of ``obj`` takes from quota: its per-pod requests
    (``template_requests``) and its DRA claims (``template_claims``). Raises
    ``WorkloadSpecError`` naming the field."""
    return template_requests(obj, t), template_claims(obj, t)


def changed_requests(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The templates (head, and each worker group whose podSet, the lower-cased
    ``groupName``, ``old`` has) of RayCluster ``new`` whose per-pod requests or DRA claims
    (``template_shape``) are none of ``old``'s for that podSet; a template of ``old`` whose
    requests cannot be read is skipped (an update must not be blocked by what was already
    stored). Raises ``WorkloadSpecError`` (a layout that cannot be read, or a new
    template's requests)."""
    # (is the head, podSet name): a worker group named "head" is not the head.
    before: dict[tuple[bool, str], list[tuple[dict[str, int], str]]] = {}
    for i, t in enumerate(cluster_templates(old, ("spec",), strict=False)):
        try:
            before.setdefault((i == 0, t.name), []).append(template_shape(old, t))
        except WorkloadSpecError:
            before.setdefault((i == 0, t.name), [])
    return [t.field for i, t in enumerate(cluster_templates(new, ("spec",), strict=False))
            if before.get((i == 0, t.name)) and template_shape(new, t) not in before[(i == 0,
                                                                                    t.name)]]


def reserved_groups(old: Mapping[str, Any], new: Mapping[str, Any],
                    names: tuple[str, ...] = ("head", SUBMITTER)) -> list[str]:
    """The worker groups of RayCluster ``new`` named after its owner's other podSets
    (``names``, any case: a RayJob's ``head`` and ``submitter``, a RayService's ``head``)
    that ``old`` does not have."""
    def named(obj: Mapping[str, Any]) -> dict[str, str]:
        return {t.key: t.field.removesuffix(".template")
                for t in cluster_templates(obj, ("spec",), strict=False)[1:]
                if t.name in names}
    had = named(old)
    return [f"{field}.groupName" for key, field in named(new).items() if key not in had]


ORIGIN_KIND_LABEL = "ray.io/originated-from-crd"
ORIGIN_NAME_LABEL = "ray.io/originated-from-cr-name"
"""Labels KubeRay v1.6.0 writes on the RayCluster it makes for a RayJob or RayService (its
kind and name)."""
OTHER_PODSETS = {"RayJob": ("head", SUBMITTER), "RayService": ("head",)}
"""The podSets of a RayCluster's owner besides its worker groups, by the owner's kind."""
CLUSTER_AT: dict[str, Path] = {"RayJob": ("spec", "rayClusterSpec"),
                               "RayService": ("spec", "rayClusterConfig")}
"""Where a RayCluster's owner holds the RayClusterSpec KubeRay copies, by the owner's kind."""


@dataclass(frozen=True)
class RayClusterRules(CrdRules):
    """``CrdRules`` of the RayCluster, plus: on a cluster that a queued RayJob or RayService
    made (it carries the queue label KubeRay copied from its owner), raising a worker group's
    pod count, changing a template's per-pod requests, or adding a worker group named after
    the owner's other podSets (``OTHER_PODSETS``) is refused to everyone but pykueue (worker
    groups are paired by lower-cased ``groupName``, Kueue's podSet name; requests include
    DRA claims: ``template_shape``; the
    reconciler would set it back to the owner's admission: ``RayCluster.hold_to_ancestor``).
    Kueue's RayCluster webhook refuses a worker group named ``head`` on a queued cluster at
    create and update alike; the rest goes beyond Kueue, whose webhook leaves a cluster a
    RayJob or RayService owns to its owner."""

    def validate(self, old: Mapping[str, Any] | None, new: object, username: str,
                 policy: WebhookPolicy, **queued: Any) -> list[str]:
        o = read_object(new, "RayCluster")
        owner = ray_owner(o)
        if old is not None and owner and username not in \
                policy.controller_usernames and read_queue_name(old, policy.queue_name_label):
            names = OTHER_PODSETS[owner]
            try:
                raised = raised_groups(old, o)
                changed = changed_requests(old, o)
                reserved = reserved_groups(old, o, names)
            except WorkloadSpecError as exc:
                return [str(exc)]
            errors = [f"{where}: the name of another podSet of the {owner} "
                      f"({', '.join(names)})" for where in reserved]
            if raised or changed:
                field = ".".join(CLUSTER_AT[owner][1:])
                errors.append(f"{', '.join(raised + changed)}: this RayCluster belongs to a "
                              f"queued {owner}, which was admitted for its pods as they are "
                              f"(count and requests): change the {owner}'s {field} "
                              "instead (it is queued again for the new shape)")
            if errors:
                return errors
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
        self.rules = rules(GROUP, VERSION, plural, kind, self.suspend,
                           extra_create=self.spec_errors,
                           belongs_elsewhere=belongs_elsewhere,
                           takes_unlabelled=self.takes_unlabelled,
                           multikueue=adapter_for(f"{GROUP}/{VERSION}", kind))


class _ClusterOwner(_RayKind):
    """A ray.io/v1 kind for which KubeRay makes RayClusters from the RayClusterSpec at
    ``cluster_at`` (RayJob, RayService)."""

    cluster_at: Path
    records_clusters = False
    """Whether ``settle`` records the clusters on the Workload (``CLUSTERS_ANNOTATION``):
    a record is that kind's alone (``_finish_orphan`` asks every kind)."""

    def cluster_names(self, obj: Mapping[str, Any]) -> list[str]:
        """The RayClusters ``obj`` runs on, by name, as its status names them (KubeRay
        v1.6.0); ``[]`` before any is named."""
        raise NotImplementedError

    def direct_podsets(self, obj: Mapping[str, Any]) -> frozenset[str] | None:
        """None of them: KubeRay v1.6.0 makes a RayJob's or RayService's pods through its
        RayClusters (and a RayJob's submitter through a batch Job), none controlled by the
        object itself."""
        return frozenset()

    def made_pods(self, ctx: Context, workload: Mapping[str, Any], uid: str,
                  pods: list[Mapping[str, Any]]) -> int:
        """The pods holding resources of the RayClusters KubeRay made for the object of
        orphaned ``workload`` (``_made_clusters``): ``kubectl delete rayjob
        --cascade=orphan`` (or rayservice) leaves the cluster running, and the Workload
        keeps the quota while its pods run. A recorded cluster already gone from the store
        (deleted in the background: its pods are killed after it, with their grace period)
        counts through its recorded name and uid while those pods still hold resources,
        unless a Workload of its own (kept while they do) accounts for them; so do its pods
        without an owner (the cluster deleted with ``--cascade=orphan``: they run on, with
        the admission's scheduling), as a gone owner's pods count for its own orphaned
        Workload (``pods_of_workload``)."""
        return sum(len(pods_of(RAYCLUSTER, pods, rc, ctx=ctx))
                   for rc in self._made_clusters(ctx, workload, uid)) \
            + sum(len(pods_of(RAYCLUSTER, pods, rc, owner_gone=True, ctx=ctx))
                  for rc in self._gone_clusters(ctx, workload))

    def _gone_clusters(self, ctx: Context, workload: Mapping[str, Any]) -> list[Obj]:
        """``{"metadata": {name, uid, namespace}}`` of each cluster of ``workload``'s record
        (``CLUSTERS_ANNOTATION``) with a recorded uid and no stored cluster of that name and
        uid, not queued on its own (its own Workload still in the store)."""
        made = recorded_clusters(workload)
        if not made or not self.records_clusters \
                or RAYCLUSTER.key not in ctx.informers.informers:
            return []
        ns = str((workload.get("metadata") or {}).get("namespace", ""))
        store = ctx.store(RAYCLUSTER.key)
        out: list[Obj] = []
        for name, rc_uid in made.items():
            rc = store.get(f"{ns}/{name}")
            if not rc_uid or (rc is not None and str(
                    (rc.get("metadata") or {}).get("uid", "")) == rc_uid):
                continue
            gone = {"metadata": {"name": name, "uid": rc_uid, "namespace": ns}}
            if not queued_on_its_own(ctx, gone):
                out.append(gone)
        return out

    def _made_clusters(self, ctx: Context, workload: Mapping[str, Any],
                       uid: str) -> list[Obj]:
        """The stored RayClusters KubeRay made for the object with ``uid`` of ``workload``
        that still run on its admission: those its record names (``CLUSTERS_ANNOTATION``:
        by name, and by uid where recorded), whatever labels they carry now; without a
        record, those labelled ``ORIGIN_KIND_LABEL: <kind>`` and ``ORIGIN_NAME_LABEL:
        <name>`` whose Workload name (a hash of kind, name and ``uid``) is ``workload``'s
        (a cluster a tenant labels so counts then). A cluster with a Workload of its own
        is left out (``queued_on_its_own``): orphaned with the queue label KubeRay copied,
        it is queued as a RayCluster of its own (Kueue v0.17.1 does the same), whose
        Workload pykueue creates only once the cluster is stopped and its pods are gone,
        so the pods it runs afterwards are that Workload's."""
        meta = workload.get("metadata") or {}
        ns, wl_name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        if RAYCLUSTER.key not in ctx.informers.informers:
            return []
        store = ctx.store(RAYCLUSTER.key)
        made = recorded_clusters(workload)
        if made is not None and not self.records_clusters:
            return []  # another kind's record (a RayJob's Workload)
        if made is not None:
            candidates = [rc for name, rc_uid in made.items()
                          if (rc := store.get(f"{ns}/{name}")) is not None
                          and rc_uid in ("", str((rc.get("metadata") or {}).get("uid", "")))]
        else:
            candidates = []
            for rc in store:
                rc_meta = rc.get("metadata") or {}
                labels = rc_meta.get("labels") or {}
                origin = str(labels.get(ORIGIN_NAME_LABEL) or "")
                if rc_meta.get("namespace") == ns and origin and \
                        labels.get(ORIGIN_KIND_LABEL) == self.kind and self.workload_name(
                            {"metadata": {"name": origin, "uid": uid}}) == wl_name \
                        and controlled_by(rc, self, origin, uid,
                                          owner_gone=not meta.get("ownerReferences")):
                    candidates.append(rc)
        return [rc for rc in candidates if not queued_on_its_own(ctx, rc)]

    async def stop_made(self, ctx: Context, workload: Mapping[str, Any], uid: str) -> None:
        """Stop the RayClusters the record of orphaned ``workload`` names
        (``_made_clusters``: one queued on its own is its own Workload's business) as
        orphaned clusters (``RayCluster.stop_orphaned``: suspended, set back, the
        admission's scheduling taken out; Warning Event ``AncestorGone``): they ran on the
        admission that ends with the object, also when a tenant stripped every label and
        annotation that marked them before deleting it with ``--cascade=orphan``. Without a
        record nothing is done here (the orphaned-child rule finds clusters by their
        marks). Idempotent: a cluster already stopped so is not written again (called on
        each look at the orphaned Workload, it also stops a cluster the tenant resumes
        while the Workload waits for its pods)."""
        if recorded_clusters(workload) is None or not self.records_clusters:
            return
        why = (f"the {self.kind} it ran for is gone (deleted with --cascade=orphan?): the "
               "RayCluster is stopped and the admission's nodeSelector, tolerations and "
               "podset label removed")
        for rc in self._made_clusters(ctx, workload, uid):
            if (rc.get("metadata") or {}).get("deletionTimestamp"):
                continue
            try:
                written = await RAYCLUSTER.stop_orphaned(ctx, rc, why)
            except (Conflict, NotFound):
                # The orphaned-child rule stopped it first, or it is gone: the store will
                # show which, and the Workload's next look (it waits for the pods) sees it.
                continue
            if written is not rc:
                ctx.recorder.emit(written, WARNING, "AncestorGone", why)


def queued_on_its_own(ctx: Context, cluster: Mapping[str, Any]) -> bool:
    """Whether RayCluster ``cluster`` has a Workload of its own in the store (named after
    it, its controller ``cluster``'s uid)."""
    meta = cluster.get("metadata") or {}
    wl = ctx.store("wl").get(f"{meta.get('namespace', '')}/{RAYCLUSTER.workload_name(cluster)}")
    return wl is not None and controller_uid(wl) == str(meta.get("uid") or "")


CLUSTERS_ANNOTATION = "pykueue.dev/ray-clusters"
"""On a RayJob's Workload: the RayClusters the RayJob ran on (its ``status.rayClusterName``
while admitted), comma-separated ``name/uid`` (``name`` alone when its uid was not known), so
that its orphaned Workload waits for the pods of those clusters only (``made_pods``) and
stops them (``stop_made``)."""


def recorded_clusters(workload: Mapping[str, Any]) -> dict[str, str] | None:
    """``{name: uid}`` of ``CLUSTERS_ANNOTATION`` on ``workload`` (uid ``""`` when not
    recorded); None without the annotation."""
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    recorded = str(annotations.get(CLUSTERS_ANNOTATION) or "")
    if not recorded:
        return None
    out: dict[str, str] = {}
    for entry in recorded.split(","):
        name, _, uid = entry.partition("/")
        if name:
            out[name] = uid
    return out


def _refused(obj: Mapping[str, Any]) -> bool:
    """Whether KubeRay v1.6.0 refused RayJob ``obj`` before making anything for it:
    deployment status ``ValidationFailed`` with no ``status.rayClusterName`` (it validates
    first on every reconcile and returns, so the status stays so and nothing ever runs).
    Kueue v0.18.5 ``RayJob.Finished`` (kueue#13415; v0.17.1 left such a RayJob admitted and,
    once evicted, holding its quota for good: ``IsActive`` true for ever)."""
    status = obj.get("status") or {}
    return status.get("jobDeploymentStatus") == "ValidationFailed" \
        and not status.get("rayClusterName")


class RayJob(_ClusterOwner):
    """ray.io/v1 RayJob (``JobKind``; module doc)."""

    cluster_at = CLUSTER_AT["RayJob"]
    records_clusters = True
    # KubeRay v1.6.0 only drops its own finalizer from a RayJob being deleted: its status is
    # never written again and a suspension deletes no cluster (``pods_once_deleted``).
    ignored_once_deleted = True

    def pods_once_deleted(self, ctx: Context, workload: Mapping[str, Any],
                          obj: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> int:
        """The pods of the RayClusters KubeRay made for ``obj`` (``made_pods``: those
        ``workload`` records, else those its origin labels name), also without a record: a
        RayJob deleted before its cluster was recorded (right after its start) would else
        count from its status (``active_pods``: 1 from deployment status ``New`` on), which
        KubeRay v1.6.0 never writes again for a RayJob being deleted, so its Workload would
        hold the quota for good. A cluster already gone unrecorded counts no more: its pods'
        grace period is not waited for, as Kueue v0.17.1 releases at the deletion."""
        return self.made_pods(ctx, workload, str((obj.get("metadata") or {}).get("uid") or ""),
                              pods)

    def cluster_names(self, obj: Mapping[str, Any]) -> list[str]:
        """``status.rayClusterName`` (KubeRay v1.6.0 sets it before making the cluster): a
        RayJob runs one cluster."""
        used = str(((obj.get("status") or {}).get("rayClusterName")) or "")
        return [used] if used else []

    async def settle(self, ctx: Context, obj: Obj, pods: int) -> float | None:
        """Record the cluster the started RayJob ``obj`` runs on (``status.rayClusterName``,
        set by KubeRay v1.6.0) on its Workload (``CLUSTERS_ANNOTATION``, merged), once: what
        KubeRay made for it is known while the RayJob exists, not after an orphaning delete
        removed the clusters' ownerReferences. Returns None."""
        cluster = str((obj.get("status") or {}).get("rayClusterName") or "")
        meta = obj.get("metadata") or {}
        ns = str(meta.get("namespace", ""))
        wl = ctx.store("wl").get(f"{ns}/{self.workload_name(obj)}") if cluster else None
        if wl is None:
            return None
        wl_meta = wl.get("metadata") or {}
        made = recorded_clusters(wl) or {}
        rc = ctx.store(RAYCLUSTER.key).get(f"{ns}/{cluster}") \
            if RAYCLUSTER.key in ctx.informers.informers else None
        uid = str(((rc or {}).get("metadata") or {}).get("uid") or "")
        # Recorded with its uid (once the store shows it): a cluster created later under
        # the same name is not the one the RayJob ran on.
        if cluster in made and (made[cluster] or not uid):
            return None
        made[cluster] = uid
        body = copy.deepcopy(dict(wl))
        body["metadata"]["annotations"] = {
            **(wl_meta.get("annotations") or {}),
            CLUSTERS_ANNOTATION: ",".join(f"{n}/{u}" if u else n for n, u in made.items())}
        ctx.store("wl").put(await ctx.client.replace(WORKLOADS, body))
        return None

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

    def child_job_sized_by(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> Any:
        """In K8sJobMode the submitter's pod template (``spec.submitterPodTemplate``, else
        KubeRay's default) for its Job named after the RayJob, None for any other Job.
        Raises ``WorkloadSpecError``."""
        return self._podset_child_template(obj, job, SUBMITTER, "")

    def child_job_podset(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> str | None:
        """In K8sJobMode ``submitter`` for its Job named after the RayJob, else None. Raises
        ``WorkloadSpecError``."""
        return self._podset_child_name(obj, job, SUBMITTER, "")

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
        """``Complete``/``Failed`` deployment, or ``ValidationFailed`` before any cluster was
        named (``_refused``); succeeded iff ``jobStatus`` is SUCCEEDED."""
        status = obj.get("status") or {}
        deployment = status.get("jobDeploymentStatus") or ""
        if deployment not in ("Complete", "Failed") and not _refused(obj):
            return False, "", ""
        job_status = status.get("jobStatus") or ""
        message = status.get("message") or f"RayJob {deployment.lower()} (job {job_status})"
        return True, "Succeeded" if job_status == "SUCCEEDED" else "Failed", message

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        """1 while KubeRay may hold pods (any deployment status but new and Suspended: Kueue
        ``IsActive``), else 0."""
        deployment = (obj.get("status") or {}).get("jobDeploymentStatus") or ""
        return 0 if deployment in ("", "Suspended") or _refused(obj) else 1

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        """``status.rayClusterStatus.state`` is ``ready`` (Kueue v0.17.1 ``RayJob.PodsReady``)."""
        cluster = (obj.get("status") or {}).get("rayClusterStatus") or {}
        return isinstance(cluster, Mapping) and cluster.get("state") == READY


SERVICE_READY = "Ready"  # KubeRay v1.6.0 RayService condition once it serves


class RayService(_ClusterOwner):
    """ray.io/v1 RayService (``JobKind``; Kueue ``jobs/rayservice``): podSets those of its
    ``spec.rayClusterConfig`` (``cluster_templates``, as a RayCluster's), suspend lever
    ``spec.rayClusterConfig.suspend`` (KubeRay copies the spec, lever and the flavor's
    nodeSelector and tolerations included, onto the RayCluster it makes), never finished
    (deleting it ends it), active and pods ready while its condition ``Ready`` is True
    (Kueue v0.17.1 ``IsActive`` / ``PodsReady``)."""

    suspend = (*CLUSTER_AT["RayService"], "suspend")
    cluster_at = CLUSTER_AT["RayService"]

    def cluster_names(self, obj: Mapping[str, Any]) -> list[str]:
        """``status.activeServiceStatus.rayClusterName`` and
        ``status.pendingServiceStatus.rayClusterName`` (KubeRay v1.6.0: the cluster serving
        and the one being prepared, during an upgrade both)."""
        status = obj.get("status") or {}
        return [str(name) for at in ("activeServiceStatus", "pendingServiceStatus")
                if (name := ((status.get(at) or {}).get("rayClusterName")))]

    def templates(self, obj: Mapping[str, Any]) -> list[Template]:
        return cluster_templates(obj, self.cluster_at)

    def layout(self, obj: Mapping[str, Any]) -> list[Template]:
        return cluster_templates(obj, self.cluster_at, strict=False)

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        return False, "", ""

    def clusters(self, ctx: Context, obj: Mapping[str, Any]) -> list[Obj]:
        """The stored RayClusters the RayService ``obj`` controls (by uid), not being
        deleted."""
        if RAYCLUSTER.key not in ctx.informers.informers:
            return []
        meta = obj.get("metadata") or {}
        return [rc for rc in ctx.store(RAYCLUSTER.key)
                if (m := rc.get("metadata") or {}).get("namespace") == meta.get("namespace")
                and not m.get("deletionTimestamp") and controller_uid(rc) == meta.get("uid")]

    async def stop(self, ctx: Context, obj: Obj, why: str) -> Obj:
        """As the base, and each running RayCluster it controls stopped too: KubeRay v1.6.0
        does not copy the lowered lever onto a cluster it made (the spec's hash changed, so
        it would prepare a new cluster beside the running one), which would keep running on
        no admission."""
        written = await super().stop(ctx, obj, why)
        for rc in self.clusters(ctx, obj):
            if not RAYCLUSTER.is_suspended(rc):
                await RAYCLUSTER.stop(ctx, rc, why)
        return written

    async def settle(self, ctx: Context, obj: Obj, pods: int) -> float | None:
        """Delete the suspended RayClusters of a started RayService, so that KubeRay makes
        them again from its started spec; returns seconds to look again while one is left.
        KubeRay v1.6.0 makes the cluster of a RayService created suspended (as a queued one
        is) suspended too, and once the RayService is started it neither updates that
        cluster (the spec's hash changed: the lever, the flavor's nodeSelector) nor makes a
        new one (it stops at the missing head pod first), so the admitted RayService would
        never run; a cluster stopped with its RayService (``stop``) is in the same state
        once the RayService is admitted again. A suspended cluster holds no pod."""
        if self.is_suspended(obj):
            return None
        stale = [rc for rc in self.clusters(ctx, obj) if RAYCLUSTER.is_suspended(rc)]
        for rc in stale:
            m = rc["metadata"]
            try:
                await ctx.client.delete(RAYCLUSTER.resource, m["name"], m["namespace"],
                                        uid=m.get("uid"))
            except NotFound:
                continue
            ctx.recorder.emit(obj, NORMAL, "StaleRayClusterDeleted",
                              f"RayCluster {m['name']} is suspended: deleted, KubeRay makes "
                              "it again from the started RayService")
        return RESYNC_SECONDS if stale else None

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        """1 while the condition ``Ready`` is True (Kueue ``IsActive``), else 0."""
        return 1 if self.pods_ready(obj) else 0

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        """The condition ``Ready`` is True (Kueue v0.17.1 ``RayService.PodsReady``)."""
        return any(isinstance(c, Mapping) and c.get("type") == SERVICE_READY
                   and c.get("status") == "True"
                   for c in (obj.get("status") or {}).get("conditions") or [])


def held_to(cluster: Mapping[str, Any], workers: Mapping[str, int]) -> Obj | None:
    """A copy of ``cluster`` whose worker groups run at most the pods of the admitted worker
    podSets ``workers`` (podSet name -> count; the head and a RayJob's submitter are not
    worker podSets): a worker group is matched to the podSet of its lower-cased
    ``groupName`` only, groups sharing one podSet share its count in order, and a group
    whose name is no admitted worker podSet is held to 0. A group that would run more gets
    ``replicas`` (and ``minReplicas``, when above) lowered to what is left of its podSet's
    count over ``numOfHosts``; None when no group runs more than admitted."""
    out = copy.deepcopy(dict(cluster))
    left = {str(k): int(v) for k, v in workers.items()}
    changed = False
    for t in cluster_templates(cluster, ("spec",), strict=False)[1:]:
        allowed = left.get(t.name, 0)
        if t.count <= allowed:
            left[t.name] = allowed - t.count
            continue
        wg = out["spec"]["workerGroupSpecs"][t.path[-2]]
        hosts = integer(wg.get("numOfHosts"), "numOfHosts", default=1, minimum=0)
        replicas = allowed // hosts if hosts > 1 else allowed
        left[t.name] = allowed - (replicas * hosts if hosts > 1 else replicas)
        wg["replicas"] = replicas
        if integer(wg.get("minReplicas"), "minReplicas", default=0, minimum=0) > replicas:
            wg["minReplicas"] = replicas
        changed = True
    return out if changed else None


def with_admitted_templates(cluster: Mapping[str, Any], parent: Mapping[str, Any],
                            workload: Mapping[str, Any], at: Path = CLUSTER_AT["RayJob"]
                            ) -> tuple[Obj, list[str]]:
    """A copy of ``cluster`` (the RayCluster of RayJob or RayService ``parent``, whose
    RayClusterSpec is at ``at``) whose head and worker
    templates ask the per-pod requests of their admitted podSets (``workload``'s, matched
    as ``held_to`` matches them: by lower-cased ``groupName``, so every group sharing a
    podSet is compared) and the DRA claims of the parent's template for that podSet
    (``template_claims``): each template that asks other requests or claims is set back
    whole to the parent's first template of that podSet (its RayClusterSpec, as KubeRay
    copied it at create), and the
    cluster suspended (KubeRay deletes its pods, including those it made from the changed
    template; it does not replace running pods on a template change). Returns the copy and
    the fields set back (``[]``: none). Raises ``WorkloadSpecError``."""
    admitted = {ps.name: dict(ps.requests) for ps in workload_from_object(workload).pod_sets}
    theirs: dict[str, Template] = {}
    for t in cluster_templates(parent, at, strict=False):
        theirs.setdefault(t.name, t)
    out = copy.deepcopy(dict(cluster))
    fields = []
    for i, t in enumerate(cluster_templates(cluster, ("spec",), strict=False)):
        own = theirs.get(t.name)
        if own is None or t.name not in admitted or (i > 0 and own.name == "head"):
            continue  # no admitted worker podSet: held to 0 pods (held_to)
        if template_requests(cluster, t) != admitted[t.name] or \
                template_claims(cluster, t) != template_claims(parent, own):
            set_in(out, t.path, copy.deepcopy(get_in(parent, own.path)))
            fields.append(t.field)
    if fields:
        set_in(out, SUSPEND, True)
    return out, fields


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
    # KubeRay v1.6.0: "RayCluster is being deleted, just ignore".
    ignored_once_deleted = True

    async def settle(self, ctx: Context, obj: Obj, pods: int) -> float | None:
        """A started cluster that is not ``ready`` and has fewer pods than it asks for
        (``pods``: its pods holding resources) gets the annotation ``RESYNC_ANNOTATION`` (the
        time) at most every ``RESYNC_SECONDS``, which makes KubeRay reconcile it: KubeRay
        v1.6.0 skips a worker group while pods it created are unseen (its scale expectations,
        30 s, for the pods a stop deleted before it saw them) and then looks again only after
        300 s. Returns seconds to look again while the pods are missing. Not on a MultiKueue
        manager's cluster (``spec.managedBy: kueue.x-k8s.io/multikueue``): its pods run on a
        worker, and KubeRay here leaves it alone."""
        if self.is_suspended(obj) or self.pods_ready(obj) or managed_by_multikueue(obj):
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
        """A running cluster of an admitted RayJob or RayService (``parent``, of
        ``parent_kind``) is held to the parent's admission (``workload``): worker groups
        raised above their admitted worker podSet (or named after none of them, as ``head``
        or ``submitter``) are set back (``held_to``), and a template asking other per-pod
        requests than its podSet was admitted for is set back to the parent's and the
        cluster suspended (``with_admitted_templates``); Warning Event
        ``ExceedsAncestorAdmission``. A cluster claiming a RayJob or RayService as
        controller that is not one it runs on (``is_owners_cluster``) is held to no worker
        and suspended instead (``NotTheRayJobsCluster``, ``NotTheRayServicesCluster``).
        Goes beyond Kueue, whose RayCluster integration leaves
        a cluster a RayJob or RayService owns to its owner (KubeRay v1.6.0 does not copy a
        RayService's changed ``replicas`` onto its running cluster, but a tenant may raise
        the cluster's own)."""
        if getattr(parent_kind, "kind", "") != ray_owner(obj):
            # Under a RayJob an AppWrapper wraps (``parent`` the AppWrapper): judged against
            # that RayJob; its pods are held by the Pod rules and the backstop (brk37b R3).
            direct = self._direct_owner(ctx, obj)
            if direct is not None and not self.is_owners_cluster(ctx, obj, *direct):
                await self._hold_to_none(ctx, obj, *direct)
            return
        if not self.is_owners_cluster(ctx, obj, parent_kind, parent):
            await self._hold_to_none(ctx, obj, parent_kind, parent)
            return
        at = parent_kind.cluster_at
        counts = {str(p.get("name")): int(p.get("count") or 0)
                  for p in (workload.get("spec") or {}).get("podSets") or []
                  if isinstance(p, Mapping)}
        try:
            workers = {t.name: counts.get(t.name, 0)
                       for t in cluster_templates(parent, at, strict=False)[1:]}
            body, fields = with_admitted_templates(obj, parent, workload, at)
            body = held_to(body, workers) or body
        except WorkloadSpecError:
            return  # the parent's own reconcile stops it: it no longer matches
        if body == obj:
            return
        written = await ctx.client.replace(self.resource, body)
        ctx.store(self.key).put(written)
        meta = obj.get("metadata") or {}
        name = f"{parent_kind.kind} {meta.get('namespace')}/" \
               f"{(parent.get('metadata') or {}).get('name')}"
        ctx.recorder.emit(written, WARNING, "ExceedsAncestorAdmission",
                          f"{', '.join(fields)}: other per-pod requests than the {name} was "
                          f"admitted for: set back to the {parent_kind.kind}'s templates and "
                          "the cluster "
                          "stopped" if fields else f"worker groups run more pods than the "
                          f"{name} was admitted for ({workers}): replicas set back")

    def withholds(self, ctx: Context, obj: Mapping[str, Any], parent_kind: Any,
                  parent: Mapping[str, Any]) -> str:
        """A cluster claiming a RayJob or RayService (``parent``, of ``parent_kind``) as
        controller that is not one it runs on (``is_owners_cluster``): its pods get no node
        from the scheduler extender, so none runs in the moment before the reconciler
        suspends the cluster (``_hold_to_none``). Goes beyond Kueue (module doc)."""
        if getattr(parent_kind, "kind", "") != ray_owner(obj):
            # ``parent`` is the queued object above the cluster's RayJob (an AppWrapper's
            # wrapped RayJob): judged against that RayJob (brk37b R1).
            direct = self._direct_owner(ctx, obj)
            if direct is None:
                return ""
            parent_kind, parent = direct
        if self.is_owners_cluster(ctx, obj, parent_kind, parent):
            return ""
        pm = parent.get("metadata") or {}
        used = ", ".join(parent_kind.cluster_names(parent)) or "another cluster"
        return (f"RayCluster {(obj.get('metadata') or {}).get('name')} claims "
                f"{parent_kind.kind} {pm.get('namespace')}/{pm.get('name')} as controller "
                f"but that {parent_kind.kind} runs on RayCluster {used}: its admission does "
                "not cover this cluster's pods")

    @staticmethod
    def _direct_owner(ctx: Context, obj: Mapping[str, Any]
                      ) -> tuple[Any, Mapping[str, Any]] | None:
        """The stored RayJob or RayService ``obj``'s controller ownerReference names (name
        and uid), with its kind; None when there is none or it is not stored."""
        ref = controller_of_object(obj)
        kind = {"RayJob": RAYJOB, "RayService": RAYSERVICE}.get(ray_owner(obj))
        informers = getattr(ctx, "informers", None)  # a bare context has every store
        if ref is None or kind is None \
                or (informers is not None and kind.key not in informers.informers):
            return None
        ns = str((obj.get("metadata") or {}).get("namespace", ""))
        parent = ctx.store(kind.key).get(f"{ns}/{ref.name}")
        if parent is None or (parent.get("metadata") or {}).get("uid") != ref.uid:
            return None
        return kind, parent

    def is_owners_cluster(self, ctx: Context, obj: Mapping[str, Any], parent_kind: Any,
                          parent: Mapping[str, Any]) -> bool:
        """Whether ``obj`` (a RayCluster whose controller is ``parent``, a RayJob or
        RayService of ``parent_kind``) is a cluster the parent runs on: one its status names
        (``cluster_names``), or, before any is named, the oldest (creation time, then name)
        of the stored clusters it controls. KubeRay makes a RayJob one cluster and a
        RayService one at a time (two during an upgrade, both named); any other claiming the
        parent as controller was made by someone else (a tenant's ownerReference)."""
        used = parent_kind.cluster_names(parent)
        meta = obj.get("metadata") or {}
        if used:
            return meta.get("name") in used
        uid = (parent.get("metadata") or {}).get("uid")
        mine = sorted((str(m.get("creationTimestamp") or ""), str(m.get("name") or ""))
                      for rc in ctx.store(self.key)
                      if (m := rc.get("metadata") or {}).get("namespace") == meta.get("namespace")
                      and not m.get("deletionTimestamp") and controller_uid(rc) == uid)
        return not mine or mine[0][1] == meta.get("name")

    async def _hold_to_none(self, ctx: Context, obj: Obj, parent_kind: Any,
                            parent: Mapping[str, Any]) -> None:
        """Suspend ``obj`` with every worker group held to 0 pods (``held_to``): it claims
        ``parent`` (a RayJob or RayService) as controller but is not a cluster the parent
        runs on (``is_owners_cluster``), so the parent's admission is not its to run on;
        Warning Event ``NotThe<Kind>sCluster``."""
        try:
            body = held_to(obj, {}) or copy.deepcopy(dict(obj))
        except WorkloadSpecError:
            body = copy.deepcopy(dict(obj))
        set_in(body, SUSPEND, True)
        if body == obj:
            return
        written = await ctx.client.replace(self.resource, body)
        ctx.store(self.key).put(written)
        pm = parent.get("metadata") or {}
        used = ", ".join(parent_kind.cluster_names(parent)) or "another cluster"
        ctx.recorder.emit(written, WARNING, f"NotThe{parent_kind.kind}sCluster",
                          f"controlled by {parent_kind.kind} {pm.get('namespace')}/"
                          f"{pm.get('name')}, which runs on RayCluster {used}: its admission "
                          "is not this cluster's, so its workers are held to 0 and it is "
                          "suspended")

    def carries_admission(self, obj: Mapping[str, Any]) -> bool:
        """Whether the cluster carries the scheduling of a started RayJob that KubeRay copied
        onto it: a template with the podSet label ``kueue.x-k8s.io/podset``, or the RayJob's
        start record (``ORIGINAL_ANNOTATION``: KubeRay copies the RayJob's annotations)."""
        if ORIGINAL_ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {}):
            return True
        try:
            ts = cluster_templates(obj, ("spec",), strict=False)
        except WorkloadSpecError:
            return False
        return any(PODSET_LABEL in (((get_in(obj, t.path) or {}).get("metadata") or {})
                                    .get("labels") or {}) for t in ts)

    async def stop_orphaned(self, ctx: Context, obj: Obj, why: str) -> Obj:
        """Stop a cluster that ran on the admission of a RayJob which is gone
        (``carries_admission``, no managed ancestor: ``kubectl delete rayjob
        --cascade=orphan``): suspended, the templates set back to the RayJob's start record
        where it is readable, and what any admission injects taken out of each
        (``podsets.strip_admission``), so resuming it gives no flavor's scheduling."""
        out = self.restored(obj)
        flavors = list(ctx.store("rf"))
        try:
            for t in cluster_templates(out, ("spec",), strict=False):
                template = copy.deepcopy(dict(get_in(out, t.path)))
                strip_admission(template, flavors)
                set_in(out, t.path, template)
        except WorkloadSpecError:
            pass  # suspended all the same
        if out == obj:
            return obj
        return await self._put(ctx, out)

    def operator_stopped(self, obj: Mapping[str, Any]) -> bool:
        """``suspended_by_kuberay``: KubeRay v1.6.0 deletes every pod labelled
        ``ray.io/cluster: <name>`` (``RayClusterAllPodsAssociationOptions``, whatever its
        owner) while the cluster is ``RayClusterSuspending``, and reports it
        ``RayClusterSuspended`` only once it lists none; from then on ``reconcilePods``
        returns at once, so it deletes (and makes) no pod until the cluster is resumed. A
        pod the cluster controls in that state is deleted by pykueue
        (``framework.stop_pods_left``) and counts until it is gone, as in any other state: a
        tenant's pod made afterwards, kept Pending by a nodeSelector no node has, would hold
        the evicted Workload's quota for good (kray28), and a tenant that may write
        ``rayclusters/status`` can forge the condition while its pods run (brk28). A resumed
        cluster (``spec.suspend`` false) is KubeRay's."""
        return suspended_by_kuberay(obj)

    def queue_name(self, obj: Mapping[str, Any]) -> str:  # type: ignore[override]
        """The queue label, except on a cluster a RayJob or RayService controls."""
        return "" if owned_by_ray(obj) else label_queue_name(obj)

    def templates(self, obj: Mapping[str, Any]) -> list[Template]:
        return cluster_templates(obj, ("spec",))

    def direct_podsets(self, obj: Mapping[str, Any]) -> frozenset[str] | None:
        """The head and every worker group (lower-cased ``groupName``): KubeRay v1.6.0 makes
        their pods controlled by the RayCluster. Raises ``WorkloadSpecError``."""
        return frozenset(t.name for t in cluster_templates(obj, ("spec",), strict=False))

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


def suspended_by_kuberay(cluster: Mapping[str, Any]) -> bool:
    """Whether RayCluster ``cluster`` is suspended (``spec.suspend``) and KubeRay v1.6.0
    reports it so: condition ``RayClusterSuspended`` True (``RayClusterStatusConditions``,
    on by default), which it sets once no pod labelled with the cluster's name is left and
    clears only once ``spec.suspend`` is false. With the feature off there is no such
    condition, and KubeRay deletes the labelled pods on every pass while suspended."""
    if (cluster.get("spec") or {}).get("suspend") is not True:
        return False
    return any(isinstance(c, Mapping) and c.get("type") == "RayClusterSuspended"
               and c.get("status") == "True"
               for c in (cluster.get("status") or {}).get("conditions") or [])


RAYJOB = RayJob("RayJob", "rayjobs")
RAYCLUSTER = RayCluster("RayCluster", "rayclusters", belongs_elsewhere=owned_by_ray)
RAYSERVICE = RayService("RayService", "rayservices")
