"""workload.codeflare.dev/v1beta2 AppWrapper as a job kind (Kueue
``pkg/controller/jobs/appwrapper``, kueue-integrations.md 8), on the shared base of the
operators' kinds (``app.integrations.templated``).

An AppWrapper wraps other objects (``spec.components[]``, each a ``template``: a Job, a JobSet,
a PyTorchJob, ...) that its controller (project-codeflare/appwrapper v1.2.0) creates once the
AppWrapper is unsuspended, each controlled by the AppWrapper.

PodSets (AppWrapper ``utils.GetComponentPodSpecs``): per component, in order, its declared
``podSets`` (``path`` to a PodTemplateSpec inside the component, ``replicas`` default 1), or
those the AppWrapper library infers for its kind (``infer_pod_sets``: Job, JobSet, PyTorchJob,
RayCluster, RayJob, Pod, Deployment, StatefulSet; none for another kind). Each is named
``<appwrapper>-<global index>`` with count ``replicas``; at most 8 over all components. Declared
podSets must agree with the inferred ones (same paths and replicas; the operator's webhook
``ValidatePodSets``), so the Workload counts the pods the components run. A path is the
AppWrapper's syntax, ``template.spec.replicatedJobs[0].template.spec.template`` (``template``
is the component's object).

Suspend lever: ``spec.suspend``. Start (Kueue ``RunWithPodSetsInfo``): one
``spec.components[].podSetInfos[]`` entry per podSet (the flavor's nodeSelector and
tolerations, the ``kueue.x-k8s.io/podset`` label), which the AppWrapper controller applies to
the pod templates of the objects it creates, and ``spec.suspend=false``, in one update; the
start record is ``ORIGINAL_ANNOTATION`` (``{}``: no template is changed). Stop (Kueue
``RestorePodSetsInfo``): ``spec.suspend=true`` and every ``podSetInfos`` cleared; the controller
then deletes the wrapped objects. Finished (Kueue ``Finished``): phase ``Succeeded``; phase
``Failed`` once condition ``ResourcesDeployed`` is no longer True. Pods ready: condition
``PodsReady``. Active: condition ``QuotaReserved`` (the controller's: components deployed).

The components are immutable (the operator's webhook refuses any change of a component's
template or declared podSets, ``validateAppWrapperUpdate``; pykueue's refuses the same on a
queued AppWrapper, so an admitted one cannot be made to run more pods). The wrapped objects
are managed-ancestor children, not queued again; a wrapped batch Job runs at most its podSet's
pods at once (``child_jobs``), and so does a wrapped JobSet's Job (``made_via``; the reconciler
reads the unlabelled JobSet in between from the API server); a wrapped Deployment or
StatefulSet cannot be scaled above its podSet (``wrapped_replicas``, the webhook in
``app.integrations.appwrapper.wrapped``).

MultiKueue (Kueue v0.17.1's AppWrapper adapter, ``app.core.multikueue.APPWRAPPER``): on a queued
AppWrapper whose ClusterQueue has a MultiKueue AdmissionCheck the webhook sets
``spec.managedBy: kueue.x-k8s.io/multikueue`` (unset or the AppWrapper controller's before), so
the manager's controller leaves it alone; on a worker, an AppWrapper labelled
``kueue.x-k8s.io/prebuilt-workload-name`` adopts that Workload copy
(``TemplatedKind.workload_name``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.core.multikueue import APPWRAPPER
from app.integrations.crdrules import CrdRules
from app.integrations.framework import (
    JobKind,
    controlled_by,
    stored_controller,
)
from app.integrations.podsets import (
    mark_started,
    merged_node_selector,
)
from app.integrations.templated import Path, Template, TemplatedKind, get_in
from app.integrations.webhook_toolkit import label_field, queue_name_format_errors
from app.kube.client import Resource
from app.kube.context import JOB
from app.wire.fields import Obj, WorkloadSpecError
from app.wire.names import JOBSET_NAME_LABEL, JOBSET_UID_LABEL, PODSET_LABEL, QUEUE_NAME_LABEL
from app.wire.owners import controller_of_object
from app.wire.podtemplate import template_differences, template_requests

if TYPE_CHECKING:
    from app.kube.context import Context

GROUP, VERSION = "workload.codeflare.dev", "v1beta2"
APPWRAPPERS = Resource(GROUP, VERSION, "appwrappers", "AppWrapper")
# The label the AppWrapper controller puts on every wrapped object and pod template.
APPWRAPPER_LABEL = "workload.codeflare.dev/appwrapper"
JOBSETS_GROUP = "jobset.x-k8s.io"
# jobset v0.11.1's exclusive placement by nodeSelector (``api/jobset/v1alpha2``).
_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
_BY_NODE_SELECTOR = "alpha.jobset.sigs.k8s.io/node-selector"
_NAMESPACED_JOB = "alpha.jobset.sigs.k8s.io/namespaced-job"
_NO_SCHEDULE = "alpha.jobset.sigs.k8s.io/no-schedule"

_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def parse_path(path: str, where: str) -> Path:
    """The keys and indexes of an AppWrapper podSet ``path`` after its leading ``template``
    (``template.spec.replicatedJobs[0].template`` -> ``("spec", "replicatedJobs", 0,
    "template")``). Raises ``WorkloadSpecError`` naming ``where``."""
    if not isinstance(path, str) or not path.startswith("template"):
        raise WorkloadSpecError(where, f"{path!r}: the first element must be 'template'")
    rest, out = path[len("template"):], []
    while rest:
        m = _STEP.match(rest)
        if m is None:
            raise WorkloadSpecError(where, f"{path!r}: invalid path element {rest!r}")
        out.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        rest = rest[m.end():]
    return tuple(out)


def _count(obj: Mapping[str, Any], path: Path, default: int = 1) -> int:
    value = get_in(obj, path)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _min_pods(job_spec: Mapping[str, Any] | None) -> int:
    """A Job spec's pods at once as the AppWrapper library infers them: ``parallelism``
    (default 1), lowered to ``completions`` when that is smaller."""
    spec = job_spec if isinstance(job_spec, Mapping) else {}
    pods = _count(spec, ("parallelism",))
    completions = spec.get("completions")
    return completions if isinstance(completions, int) and completions < pods else pods


def _replicated_jobs(jobset: Mapping[str, Any]) -> dict[str, tuple[int, int, Any]]:
    """A JobSet's (or JobSet template's) replicatedJobs by name: (Jobs, pods at once each,
    per-pod requests or why unreadable, ``template_requests``)."""
    out: dict[str, tuple[int, int, Any]] = {}
    spec = jobset.get("spec")
    rjobs = spec.get("replicatedJobs") if isinstance(spec, Mapping) else None
    for rj in rjobs if isinstance(rjobs, list) else []:
        if not isinstance(rj, Mapping):
            continue
        job_spec = (rj.get("template") or {}).get("spec") if isinstance(
            rj.get("template"), Mapping) else None
        out[str(rj.get("name"))] = (
            _count(rj, ("replicas",)), _min_pods(job_spec),
            template_requests((job_spec or {}).get("template")
                              if isinstance(job_spec, Mapping) else None))
    return out


def _ray_pod_sets(obj: Mapping[str, Any], prefix: str) -> list[tuple[str, int]]:
    """A RayCluster spec's podSets at ``template<prefix>``: the head (1), each worker group
    (``replicas``, default 1)."""
    cluster = get_in(obj, parse_path("template" + prefix, "path"))
    groups = cluster.get("workerGroupSpecs") if isinstance(cluster, Mapping) else None
    out = [(f"template{prefix}.headGroupSpec.template", 1)]
    for i, group in enumerate(groups if isinstance(groups, list) else []):
        if isinstance(group, Mapping) and "template" in group:
            out.append((f"template{prefix}.workerGroupSpecs[{i}].template",
                        _count(group, ("replicas",))))
    return out


def infer_pod_sets(obj: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(path, replicas) of each podSet the AppWrapper library (v1.2.0 ``InferPodSets``)
    infers for component object ``obj`` from its apiVersion and kind; ``[]`` for a kind it
    does not know."""
    kind = (str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    if kind == ("batch/v1", "Job"):
        return [("template.spec.template", _min_pods(spec))]
    if kind == ("jobset.x-k8s.io/v1alpha2", "JobSet"):
        out = []
        for i, rj in enumerate(spec.get("replicatedJobs") or []):
            if isinstance(rj, Mapping) and "template" in rj:
                pods = _min_pods((rj.get("template") or {}).get("spec"))
                out.append((f"template.spec.replicatedJobs[{i}].template.spec.template",
                            _count(rj, ("replicas",)) * pods))
        return out
    if kind == ("kubeflow.org/v1", "PyTorchJob"):
        replicas = spec.get("pytorchReplicaSpecs")
        replicas = replicas if isinstance(replicas, Mapping) else {}
        return [(f"template.spec.pytorchReplicaSpecs.{r}.template",
                 _count(replicas[r], ("replicas",)))
                for r in ("Master", "Worker")
                if isinstance(replicas.get(r), Mapping) and "template" in replicas[r]]
    if kind == ("ray.io/v1", "RayCluster"):
        return _ray_pod_sets(obj, ".spec")
    if kind == ("ray.io/v1", "RayJob"):
        return _ray_pod_sets(obj, ".spec.rayClusterSpec")
    if kind == ("v1", "Pod"):
        return [("template", 1)]
    if kind in (("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")) and "template" in spec:
        return [("template.spec.template", _count(spec, ("replicas",)))]
    return []


def components(aw: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``spec.components`` checked: a list of objects, each with a ``template`` object.
    Raises ``WorkloadSpecError`` naming the field."""
    comps = (aw.get("spec") or {}).get("components")
    if not isinstance(comps, list) or not comps:
        raise WorkloadSpecError("spec.components", "required (at least one)")
    for i, c in enumerate(comps):
        if not isinstance(c, Mapping) or not isinstance(c.get("template"), Mapping):
            raise WorkloadSpecError(f"spec.components[{i}].template", "required object")
    return comps


def component_pod_sets(aw: Mapping[str, Any]) -> list[tuple[int, str, int]]:
    """(component index, path, replicas) of every podSet, in order (module doc). Raises
    ``WorkloadSpecError`` for a declared podSet that disagrees with the inferred ones."""
    out = []
    for i, comp in enumerate(components(aw)):
        inferred = infer_pod_sets(comp["template"])
        declared = comp.get("podSets") or []
        if not declared:
            out += [(i, p, r) for p, r in inferred]
            continue
        where = f"spec.components[{i}].podSets"
        if not isinstance(declared, list) or not all(isinstance(d, Mapping) for d in declared):
            raise WorkloadSpecError(where, "expected a list of objects")
        mine = [(str(d.get("path") or ""), _count(d, ("replicas",))) for d in declared]
        if len({p for p, _ in mine}) != len(mine):
            raise WorkloadSpecError(where, "two podSets with one path")
        if inferred and sorted(mine) != sorted(inferred):
            kind = comp["template"].get("kind")
            raise WorkloadSpecError(where, f"{mine} differ from what the {kind} runs "
                                    f"{inferred} (path, replicas)")
        out += [(i, p, r) for p, r in mine]
    return out


def wrapped_component(aw: Mapping[str, Any], kind: str, name: str
                      ) -> tuple[int, Mapping[str, Any]] | None:
    """The apps/v1 ``kind`` (``Deployment`` or ``StatefulSet``) component of ``aw`` that its
    controller creates under ``name``, as (its podSet's pods, count: the declared
    ``replicas``, else the template's ``spec.replicas``, default 1; the component's object
    as the controller creates it under ``aw``'s admission, ``made_component``); None when
    ``aw`` wraps no such object or its components are unreadable (it is then not admitted
    either). The name as ``names_component``."""
    try:
        pods = {(i, p): r for i, p, r in component_pod_sets(aw)}
        for i, comp in enumerate(components(aw)):
            tpl = comp["template"]
            if (tpl.get("apiVersion"), tpl.get("kind")) != ("apps/v1", kind):
                continue
            if names_component(aw, i, name):
                count = pods.get((i, "template.spec.template"))
                return None if count is None else (count, made_component(aw, i))
    except WorkloadSpecError:
        return None
    return None


def made_component(aw: Mapping[str, Any], i: int) -> Obj:
    """Component ``i``'s object as appwrapper v1.2.0 creates it under ``aw``'s admission,
    where its pods may run: each podSet's pod template (``component_pod_sets`` order, the
    controller's ``componentStatus.podSets``) with its ``podSetInfos`` entry applied
    (``createComponent``): the entry's nodeSelector merged under the template's own (the
    template's value kept: a conflict fails the create) and its tolerations appended. pykueue
    writes the entries when it starts ``aw`` and clears them when it stops it (``injected``,
    ``restored``): a queued AppWrapper not admitted adds nothing. Labels are left out. Raises
    ``WorkloadSpecError``."""
    comp = components(aw)[i]
    out = copy.deepcopy(dict(comp["template"]))
    infos = comp.get("podSetInfos")
    paths = [path for n, path, _ in component_pod_sets(aw) if n == i]
    for info, path in zip(infos if isinstance(infos, list) else [], paths, strict=False):
        pod = get_in(out, parse_path(path, f"spec.components[{i}].podSets path"))
        if not isinstance(info, Mapping) or not isinstance(pod, dict) \
                or not isinstance(pod.get("spec"), dict):
            continue
        spec = pod["spec"]
        if isinstance(info.get("nodeSelector"), Mapping) and info["nodeSelector"]:
            spec["nodeSelector"] = {**info["nodeSelector"], **(spec.get("nodeSelector") or {})}
        if isinstance(info.get("tolerations"), list) and info["tolerations"]:
            spec["tolerations"] = [*(spec.get("tolerations") or []),
                                   *copy.deepcopy(info["tolerations"])]
    return out


def _by_node_selector(jobset: Mapping[str, Any], rj: Mapping[str, Any]) -> bool:
    """Whether jobset v0.11.1 places the Jobs of replicatedJob ``rj`` of ``jobset``
    exclusively by a nodeSelector (``constructJob``: annotations
    ``alpha.jobset.sigs.k8s.io/exclusive-topology`` and ``.../node-selector`` on the Job,
    from the replicatedJob's template or, for the exclusive one, the JobSet's)."""
    def annotations(obj: Any) -> Mapping[str, Any]:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        found = meta.get("annotations") if isinstance(meta, Mapping) else None
        return found if isinstance(found, Mapping) else {}
    own, top = annotations(rj.get("template")), annotations(jobset)
    by_node_selector = _BY_NODE_SELECTOR in own or _EXCLUSIVE in top and _BY_NODE_SELECTOR in top
    return (_EXCLUSIVE in own or _EXCLUSIVE in top) and by_node_selector


def _jobset_job_template(template: Any, job: str) -> Any:
    """Pod template ``template`` as jobset v0.11.1 gives it to Job ``job``
    (``<namespace>_<name>``) placed exclusively by a nodeSelector: that nodeSelector and the
    toleration of its taint added (``addNamespacedJobNodeSelector``,
    ``addTaintToleration``)."""
    out = copy.deepcopy(template)
    if not isinstance(out, dict) or not isinstance(out.get("spec"), dict):
        return out
    spec = out["spec"]
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), _NAMESPACED_JOB: job}
    spec["tolerations"] = [*(spec.get("tolerations") or []), {
        "key": _NO_SCHEDULE, "operator": "Exists", "effect": "NoSchedule"}]
    return out


def _component_jobs(aw: Mapping[str, Any]) -> list[tuple[int, str, int, Any]]:
    """The batch Jobs the controller makes for ``aw``'s components, as (component index,
    the Job's name after its component's name, the pods it may run at once, the pod
    template it runs them from: the Job's ``spec.template`` as the component made under
    ``aw``'s admission gives it, ``made_component``): a Job component (``""``, its podSet's
    pods), a JobSet component's Jobs (``-<replicatedJob>-<index>``,
    ``min(parallelism, completions)`` each; placed by a nodeSelector of its own name when
    the JobSet asks, ``_by_node_selector``). Raises ``WorkloadSpecError``."""
    out: list[tuple[int, str, int, Any]] = []
    pods = {(i, p): r for i, p, r in component_pod_sets(aw)}
    namespace = str((aw.get("metadata") or {}).get("namespace", ""))
    for i, comp in enumerate(components(aw)):
        tpl = comp["template"]
        api = (tpl.get("apiVersion"), tpl.get("kind"))
        if api == ("batch/v1", "Job"):
            out.append((i, "", pods.get((i, "template.spec.template"), 0),
                        (made_component(aw, i).get("spec") or {}).get("template")))
        elif api == ("jobset.x-k8s.io/v1alpha2", "JobSet"):
            made = made_component(aw, i)
            for rj in (made.get("spec") or {}).get("replicatedJobs") or []:
                job_spec = (rj.get("template") or {}).get("spec")
                template = (job_spec or {}).get("template")
                for index in range(_count(rj, ("replicas",))):
                    suffix = f"-{rj.get('name')}-{index}"
                    name = _component_name(aw, i)
                    out.append((i, suffix, _min_pods(job_spec),
                                _jobset_job_template(template, f"{namespace}_{name}{suffix}")
                                if name and _by_node_selector(made, rj) else template))
    return out


def names_component(aw: Mapping[str, Any], i: int, name: str) -> bool:
    """Whether ``name`` may be the object the controller creates for component ``i`` of
    ``aw``: its template's ``metadata.name``; for one named by ``metadata.generateName``,
    the name the controller recorded (``status.componentStatus[i].name``), and besides, any
    ``name`` with that prefix while the controller is creating it: phase ``Resuming`` (the
    only one in which appwrapper v1.2.0 creates components; or about to be: unsuspended in
    phase ``Suspended``, which the controller leaves for it at once, and whose change a
    store may show a moment after the create it precedes) and that object not deployed
    (condition ``ResourcesDeployed`` not True: no name recorded yet, the create initiated,
    or the object deleted by a suspension or reset, after which the controller creates it
    again under a new generated name, recorded only after its create succeeded;
    ``createComponent``). Not in the pause of a reset (phase ``Resetting``, as long as the
    AppWrapper's own annotation asks): the controller creates nothing then (brk30). Nor
    while an earlier component's create fails (``_earlier_create_failed``): the controller
    creates components in order and stops at the first error, so it is not creating this
    one (brk30b H1: a tenant keeping that create failing held the prefix open).
    Deployments and StatefulSets only: a batch Job or JobSet component's Jobs are known by
    the recorded name alone (``AppWrapper.child_job_pods``). Raises ``WorkloadSpecError``
    when the components are unreadable."""
    if not name:
        return False
    if _component_name(aw, i) == name:
        return True
    meta = _template_meta(components(aw)[i])
    prefix = meta.get("generateName")
    return not meta.get("name") and isinstance(prefix, str) and bool(prefix) \
        and name.startswith(prefix) and _creating(aw) and not _deployed(aw, i) \
        and not _earlier_create_failed(aw, i)


def _earlier_create_failed(aw: Mapping[str, Any], i: int) -> bool:
    """Whether a component before ``i`` shows its last create failed: condition
    ``ResourcesDeployed`` False with reason ``ComponentCreationErrored`` (appwrapper v1.2.0
    ``createComponent``). ``createComponents`` creates in order and returns at the first
    error, and patches a component True before creating the next, so while an earlier one
    shows that, the controller is not creating ``i`` (a store a moment behind a retry that
    succeeded refuses the controller's create once; it retries a second later)."""
    for j in range(i):
        for c in _component_status(aw, j).get("conditions") or []:
            if isinstance(c, Mapping) and c.get("type") == "ResourcesDeployed" \
                    and c.get("status") == "False" \
                    and c.get("reason") == "ComponentCreationErrored":
                return True
    return False


def _creating(aw: Mapping[str, Any]) -> bool:
    """Whether appwrapper v1.2.0 creates ``aw``'s components now or next: phase
    ``Resuming``, or unsuspended in phase ``Suspended``, which it leaves for ``Resuming`` on
    its next pass (never with no phase: an AppWrapper ``spec.managedBy`` another controller
    has none, brk30b)."""
    phase = (aw.get("status") or {}).get("phase") or ""
    return phase == "Resuming" or phase == "Suspended" \
        and (aw.get("spec") or {}).get("suspend") is not True


def _template_meta(component: Mapping[str, Any]) -> Mapping[str, Any]:
    """A component's ``template.metadata``, ``{}`` when it is no object."""
    meta = component["template"].get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def wrapped_replicas(aw: Mapping[str, Any], kind: str, name: str) -> int | None:
    """The pods (count) ``aw``'s podSet gives the apps/v1 ``kind`` (``Deployment`` or
    ``StatefulSet``) it wraps under ``name`` (``wrapped_component``); None when ``aw`` wraps
    no such object or its components are unreadable."""
    found = wrapped_component(aw, kind, name)
    return None if found is None else found[0]


def with_pod_set_infos(aw: Mapping[str, Any], infos: list[list[Obj]] | None) -> Obj:
    """A copy of ``aw`` whose ``spec.components[i].podSetInfos`` are ``infos[i]`` (None:
    every one removed, Kueue ``ClearPodSetInfos``)."""
    out = copy.deepcopy(dict(aw))
    for i, comp in enumerate(out.get("spec", {}).get("components") or []):
        if infos is None or not infos[i]:
            comp.pop("podSetInfos", None)
        else:
            comp["podSetInfos"] = infos[i]
    return out


class AppWrapper(TemplatedKind):
    """workload.codeflare.dev/v1beta2 AppWrapper (``JobKind``; module doc). ``optional``: its
    CRD may be absent; the manager then leaves the kind out at start-up."""

    key = "appwrapper"
    resource = APPWRAPPERS
    api_group = GROUP
    kind = "AppWrapper"
    suspend = ("spec", "suspend")
    # Its webhook rules check what the operator's webhook checks of the podSets (1 to 8,
    # declared ones as inferred, every path a pod template: ``spec_errors``).
    rules = CrdRules(GROUP, VERSION, "appwrappers", "AppWrapper", ("spec", "suspend"),
                     extra_create=lambda aw: KIND.spec_errors(aw) + component_queue_errors(aw),
                     extra_update=lambda old, new: _components_changed(old, new),
                     multikueue=APPWRAPPER)
    # The controller labels the wrapped pod templates with the AppWrapper's name; the pods'
    # controller is the wrapped Job (``pod_of``).
    pod_labels = (APPWRAPPER_LABEL, "")
    # appwrapper v1.2.0 deletes its components and waits for them before it sets
    # QuotaReserved False and drops its own finalizer: the status covers the pods of a
    # wrapped PyTorchJob, which ``pod_of`` cannot name.
    status_kept_once_deleted = True
    # Its wrapped Jobs and wrapped JobSets' Jobs run its pods.
    runs_batch_jobs = True

    def templates(self, obj: Mapping[str, Any]) -> list[Template]:
        """One per podSet (module doc). Raises ``WorkloadSpecError``."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        out = []
        for n, (i, path, replicas) in enumerate(component_pod_sets(obj)):
            where = f"spec.components[{i}].podSets path"
            out.append(Template(f"{name}-{n}".lower(), replicas,
                                ("spec", "components", i, "template", *parse_path(path, where)),
                                str(n)))
        return out

    def direct_podsets(self, obj: Mapping[str, Any]) -> frozenset[str] | None:
        """The podSets of its Pod components: appwrapper v1.2.0 makes each component
        controlled by the AppWrapper, so only a wrapped Pod is a pod the AppWrapper itself
        controls; a Job's, JobSet's or Deployment's pods run under the object it makes.
        Raises ``WorkloadSpecError``."""
        comps = components(obj)
        name = str((obj.get("metadata") or {}).get("name", ""))
        return frozenset(f"{name}-{n}".lower() for n, (i, _, _) in
                         enumerate(component_pod_sets(obj))
                         if (comps[i].get("template") or {}).get("kind") == "Pod")

    def child_podsets(self, obj: Mapping[str, Any], kind: JobKind,
                      child: Mapping[str, Any]) -> frozenset[str] | None:
        """The podSets of the component ``child`` is, or of the component that controls
        ``child`` (a wrapped RayJob's RayCluster, which KubeRay makes from the RayJob's
        labelled templates): its template's API group and kind, and its name, a recorded or
        fixed name first, then by ``names_component``'s ``generateName`` rule. Only when
        ``kind``'s operator makes its pods controlled by ``child`` (a PyTorchJob, a
        RayCluster): appwrapper v1.2.0 labels the wrapped object's pod templates with the
        AppWrapper's podSet names (``<name>-<n>``), so its pods carry those; none
        (``frozenset()``) for such a child no component names. None for a child of a kind
        whose pods run under objects it makes, or a batch Job (its pods are counted by the
        Job controller, replacements made while the old ones terminate). Raises
        ``WorkloadSpecError``."""
        if not kind.controls_pods_directly or kind.key == JOB:
            return None
        meta = child.get("metadata") or {}
        candidates = [(str(child.get("apiVersion") or "").rpartition("/")[0],
                       child.get("kind"), str(meta.get("name", "")))]
        ref = controller_of_object(child)
        if ref is not None:
            candidates.append((ref.group, ref.kind, ref.name))
        comps = components(obj)
        name = str((obj.get("metadata") or {}).get("name", ""))
        for exact in (True, False):
            for group, child_kind, child_name in candidates:
                for i, comp in enumerate(comps):
                    tpl = comp["template"]
                    if (str(tpl.get("apiVersion") or "").rpartition("/")[0],
                            tpl.get("kind")) != (group, child_kind):
                        continue
                    named = child_name and child_name in (
                        _component_name(obj, i), _template_meta(comp).get("name"))
                    if named if exact else names_component(obj, i, child_name):
                        return frozenset(f"{name}-{n}".lower() for n, (j, _, _) in
                                         enumerate(component_pod_sets(obj)) if j == i)
        # No component names it: a tenant's object under the AppWrapper, none of whose
        # pods the admission covers (brk36b B2: one made in a generateName component's
        # window, once the controller recorded the real name).
        return frozenset()

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        """Phase ``Succeeded``, or ``Failed`` once ``ResourcesDeployed`` is not True (Kueue
        ``AppWrapper.Finished``)."""
        phase = (obj.get("status") or {}).get("phase")
        if phase == "Succeeded":
            return True, "Succeeded", "AppWrapper finished successfully"
        if phase == "Failed" and not _condition(obj, "ResourcesDeployed"):
            return True, "Failed", "AppWrapper failed"
        return False, "", ""

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        return _condition(obj, "PodsReady")

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        """The podSets' pods while ``QuotaReserved`` is True (components deployed), else 0;
        the reconciler also counts the pods themselves (``pod_labels``)."""
        if not _condition(obj, "QuotaReserved"):
            return 0
        try:
            return sum(t.count for t in self.templates(obj))
        except WorkloadSpecError:
            return 1  # deployed all the same: active, whatever its shape

    def runs_pods_through(self, ctx: Context, job: Mapping[str, Any] | None,
                          pod: Mapping[str, Any], name: str, uid: str, *,
                          owner_gone: bool = False) -> bool:
        """A wrapped Job (controlled by the AppWrapper), or a Job of a wrapped JobSet that the
        stores hold controlled by the AppWrapper (an unlabelled JobSet is in none unless a
        TrainJob's store of every JobSet is watched: its pods then count through the
        AppWrapper's status alone); gone (``job`` None), any: appwrapper v1.2.0 labels the
        pods of every component with the AppWrapper's name (``pod_labels``), whatever the
        component's name."""
        if job is None:
            return True
        return controlled_by(job, self, name, uid, owner_gone=owner_gone) \
            or controlled_by(stored_controller(ctx, job), self, name, uid, owner_gone=owner_gone)

    def leaves_orphans(self, ctx: Context, pod: Mapping[str, Any], name: str,
                       uid: str) -> bool:
        """A pod of a wrapped JobSet's Job: its ``jobset-name`` and ``jobset-uid`` labels
        name a JobSet the stores hold controlled by the AppWrapper with ``uid``. JobSet
        v0.11.1 makes a Job deleted with ``--cascade=orphan`` again, and appwrapper v1.2.0,
        its JobSet component still there, runs on (it resets only for a missing
        component). A directly wrapped Job's pod is not: appwrapper v1.2.0 fails the
        AppWrapper for its missing Job and keeps ``ResourcesDeployed`` (its status, which
        counts) until no pod with its label is left (``deleteComponents``)."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        ns = str((pod.get("metadata") or {}).get("namespace", ""))
        js_name = labels.get(JOBSET_NAME_LABEL)
        if not js_name:
            return False
        for key in ctx.informers.keys_for(JOBSETS_GROUP, "JobSet"):
            jobset = ctx.store(key).get(f"{ns}/{js_name}")
            if jobset is not None \
                    and (jobset.get("metadata") or {}).get("uid") == labels.get(JOBSET_UID_LABEL):
                return controlled_by(jobset, self, name, uid)
        return False

    def operator_stopped(self, obj: Mapping[str, Any]) -> bool:
        """``suspended_by_controller``: while ``Suspending`` appwrapper v1.2.0 deletes its
        components and waits until no pod labelled with the AppWrapper's name is left
        (``deleteComponents``; force-deleting them once its deletion grace period is over),
        then sets phase ``Suspended``, in which it deletes (and deploys) nothing until
        ``spec.suspend`` is false. A pod the AppWrapper controls in that phase (a ``Pod``
        component's) is deleted by pykueue (``framework.stop_pods_left``) and counts until
        it is gone, as in any other phase: a tenant's pod made afterwards, kept Pending by a
        nodeSelector no node has, would hold the evicted Workload's quota for good, and a
        tenant that may write ``appwrappers/status`` can forge the phase while its pods run
        (brk28)."""
        return suspended_by_controller(obj)

    def child_jobs(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """The batch Jobs its controller makes (``_component_jobs``) under their components'
        names as known: a Job component's with its podSet's pods, a JobSet component's Jobs
        ``<jobset>-<replicatedJob>-<index>`` with ``min(parallelism, completions)`` each (a
        ``generateName`` component's once its name is recorded). Raises
        ``WorkloadSpecError``."""
        return {f"{name}{suffix}": pods for i, suffix, pods, _ in _component_jobs(obj)
                if (name := _component_name(obj, i))}

    def child_shares_changed(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        """``status.componentStatus`` changed: a ``generateName`` component's name recorded
        (again), so which of its Jobs has a share (``child_job_pods``) changed."""
        def status(obj: Mapping[str, Any]) -> Any:
            return (obj.get("status") or {}).get("componentStatus")
        return status(old) != status(new)

    def child_job_pods(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> int:
        """The pods batch Job ``job`` may run at once under ``obj``'s admission
        (``child_jobs``): controlled by the AppWrapper, a Job component's; controlled by a
        JobSet, that JobSet component's Job of its name; a ``generateName`` component's
        under its recorded name only, never by its prefix (the Jobs' shares are not
        exclusive, so a tenant's prefixed Jobs would each take one for as long as a create
        the tenant makes fail is retried, brk30b; until the name is recorded the
        controller's Job has no share and the child-Job rule may lower it: a known gap,
        docs/security.md); 0 for any other Job. Raises ``WorkloadSpecError``."""
        found = self._child_job(obj, job)
        return found[0] if found is not None else 0

    def child_job_template(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> Any:
        """The pod template the component gives batch Job ``job`` (the one
        ``child_job_pods`` gives a share) as the controller (and the JobSet operator) makes
        it under ``obj``'s admission (``_component_jobs``), None when it has no share.
        Raises ``WorkloadSpecError``."""
        found = self._child_job(obj, job)
        return found[1] if found is not None else None

    def _child_job(self, obj: Mapping[str, Any], job: Mapping[str, Any]
                   ) -> tuple[int, Any] | None:
        """(pods, pod template) of the component Job ``job`` is (``child_job_pods``)."""
        name = str((job.get("metadata") or {}).get("name", ""))
        ref = controller_of_object(job)
        if ref is None:
            return None
        owner = str(ref.name) if ref.kind == "JobSet" else ""
        if not owner and (ref.kind != self.kind
                          or ref.uid != (obj.get("metadata") or {}).get("uid")):
            return None
        for i, suffix, pods, template in _component_jobs(obj):
            if owner:
                if suffix and name == f"{owner}{suffix}" and _component_name(obj, i) == owner:
                    return pods, template
            elif not suffix and name and _component_name(obj, i) == name:
                return pods, template
        return None

    def child_object_errors(self, obj: Mapping[str, Any], kind: str,
                            child: Mapping[str, Any]) -> list[str]:
        """Errors for ``child`` (an object of ``kind``, created or resumed under AppWrapper
        ``obj``) running other pods than the component of its name (recorded or fixed,
        ``_component_name``): for a JobSet, its replicatedJobs by name, each with its Jobs
        (``replicas``), pods at once (``_min_pods``) and per-pod requests
        (``template_requests``: milli-CPU, bytes, counts), must be the JobSet component's,
        whose Jobs get a share of the admission (``child_job_pods``), and each
        replicatedJob's pods must claim its DRA devices and be placed as the controller
        places them under the admission (``_replicated_job_differences``). A JobSet of a
        tenant's, adopted by the controller by name (brk30b H3), would run pods no quota
        covers, or on a flavor not admitted (brk31 M1, M2). ``[]`` for anything else (a
        JobSet that is no component: its Jobs have no share)."""
        if kind != "JobSet":
            return []
        meta = child.get("metadata") or {}
        name = str(meta.get("name", ""))
        for i, comp in enumerate(components(obj)):
            tpl = comp["template"]
            if (tpl.get("apiVersion"), tpl.get("kind")) != ("jobset.x-k8s.io/v1alpha2",
                                                             "JobSet") \
                    or not name or _component_name(obj, i) != name:
                continue
            want, have = _replicated_jobs(tpl), _replicated_jobs(child)
            aw = f"AppWrapper {meta.get('namespace', '')}/{(obj.get('metadata') or {}).get('name')}"
            if want != have:
                return [f"spec.replicatedJobs: JobSet {name} is controlled by {aw}, whose "
                        f"Workload was sized for its JobSet component's replicatedJobs {want} "
                        f"(Jobs, pods at once, per-pod requests in milli-CPU, bytes, counts); "
                        f"these are {have}: only the JobSet its controller makes from that "
                        "component may run there"]
            return _replicated_job_differences(made_component(obj, i), child, name, aw)
        return []

    def wrapped_replicas(self, obj: Mapping[str, Any], kind: str, name: str) -> int | None:
        """``wrapped_replicas`` (module function) of AppWrapper ``obj``."""
        return wrapped_replicas(obj, kind, name)

    def made_via(self, parent: Mapping[str, Any], ref: Mapping[str, Any]) -> bool:
        """A Job controlled by a JobSet component of ``parent`` is made for it."""
        return ref.get("kind") == "JobSet" and any(
            (c["template"].get("kind") == "JobSet"
             and ref.get("name") and ref.get("name") == _component_name(parent, i))
            for i, c in enumerate(components(parent)))

    # ---------------------------------------------------------------- the writes

    def injected(self, obj: Mapping[str, Any], scheduling: Mapping[str, tuple[Mapping[str, str],
                 list[Obj]]], *, inject_node_selector: bool = True) -> Obj:
        """``obj`` started: its podSetInfos (module doc), the start record, the lever false.
        Raises ``InjectionConflict`` when a flavor's node label contradicts a template's
        nodeSelector (the controller would fail the AppWrapper)."""
        infos: list[list[Obj]] = [[] for _ in components(obj)]
        for t in self.checked_templates(obj):
            selector, tolerations = scheduling.get(t.name, ({}, []))
            info: Obj = {"labels": {PODSET_LABEL: t.name}}
            if inject_node_selector and selector:
                own = ((get_in(obj, t.path) or {}).get("spec") or {}).get("nodeSelector") or {}
                merged_node_selector(own, selector, "AppWrapper component")
                info["nodeSelector"] = dict(selector)
            if tolerations:
                info["tolerations"] = copy.deepcopy(list(tolerations))
            infos[int(t.path[2])].append(info)  # path: spec, components, <i>, template...
        out = with_pod_set_infos(obj, infos)
        mark_started(out, True)
        out["spec"]["suspend"] = False
        return out

    def restored(self, obj: Mapping[str, Any]) -> Obj:
        """``obj`` suspended, its podSetInfos and start record removed."""
        out = with_pod_set_infos(obj, None)
        out.setdefault("spec", {})["suspend"] = True
        mark_started(out, False)
        return out


def _replicated_job_differences(made: Mapping[str, Any], child: Mapping[str, Any], name: str,
                                aw: str) -> list[str]:
    """Errors for each replicatedJob of JobSet ``child`` whose pods would run elsewhere, or
    on other devices, than those of the JobSet its AppWrapper's controller ``made``
    (``template_differences``: nodeSelector, affinity, tolerations, nodeName, DRA claims);
    the replicatedJobs are the same by name (``_replicated_jobs``)."""
    def pod(rj: Any) -> Any:
        return get_in(rj, ("template", "spec", "template")) if isinstance(rj, Mapping) else None

    def rjobs(obj: Mapping[str, Any]) -> list[Any]:
        found = (obj.get("spec") or {}).get("replicatedJobs")
        return found if isinstance(found, list) else []
    theirs = {str(rj.get("name")): (k, rj) for k, rj in enumerate(rjobs(child))
              if isinstance(rj, Mapping)}
    errors = []
    for rj in rjobs(made):
        k, other = theirs.get(str(rj.get("name")), (None, None))
        if k is None:
            continue
        for field, want, have in template_differences(pod(rj), pod(other)):
            errors.append(
                f"spec.replicatedJobs[{k}].template.spec.template.{field}: JobSet {name} is "
                f"controlled by {aw}, whose admission was given for its JobSet component's "
                f"pods with {field} {want!r} (the component's, with the nodeSelector and "
                f"tolerations of the flavors it was admitted on); these are {have!r}: only "
                "the JobSet its controller makes from that component may run there")
    return errors


def suspended_by_controller(aw: Mapping[str, Any]) -> bool:
    """Whether AppWrapper ``aw`` is suspended (``spec.suspend``) in phase ``Suspended``:
    appwrapper v1.2.0 enters it once its components and every pod labelled with its name
    are gone (or before it ever deployed them), and deploys nothing in it until
    ``spec.suspend`` is false."""
    return (aw.get("spec") or {}).get("suspend") is True \
        and (aw.get("status") or {}).get("phase") == "Suspended"


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    return any(isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _component_name(aw: Mapping[str, Any], i: int) -> str:
    """The name of component ``i``'s object: its template's, else the one the controller
    recorded (``status.componentStatus[i].name``, for a ``generateName``)."""
    name = _template_meta(components(aw)[i]).get("name") or _component_status(aw, i).get("name")
    return str(name or "")


def _component_status(aw: Mapping[str, Any], i: int) -> Mapping[str, Any]:
    """``status.componentStatus[i]`` as the controller wrote it, ``{}`` when absent or no
    object."""
    status = (aw.get("status") or {}).get("componentStatus") or []
    entry = status[i] if isinstance(status, list) and i < len(status) else None
    return entry if isinstance(entry, Mapping) else {}


def _deployed(aw: Mapping[str, Any], i: int) -> bool:
    """Whether component ``i``'s object is deployed under the name the controller recorded:
    ``status.componentStatus[i]`` names it and its condition ``ResourcesDeployed`` is True
    (appwrapper v1.2.0 sets it Unknown when a create starts, True once it succeeded, False
    when the create failed or the object was deleted)."""
    entry = _component_status(aw, i)
    conditions = entry.get("conditions")
    if not entry.get("name") or not isinstance(conditions, list):
        return False
    return any(isinstance(c, Mapping) and c.get("type") == "ResourcesDeployed"
               and c.get("status") == "True" for c in conditions)


def component_queue_errors(aw: Mapping[str, Any]) -> list[str]:
    """Errors for a component whose template carries a queue-name label that is no valid
    LocalQueue name (empty, or not a DNS-1123 subdomain). Kueue v0.17.1's webhook of every
    kind refuses such an object at CREATE (``ValidateQueueName``), and so do pykueue's for a
    batch Job and the operators' kinds (for a Pod, Deployment or StatefulSet: an empty one),
    the AppWrapper controller's create of the component too, with 403, which appwrapper
    v1.2.0 retries as not fatal for the AppWrapper's
    ``admissionGracePeriodDuration`` (the tenant's annotation, up to 24 h) and again after
    each reset, in phase ``Resuming`` with no later component created: a ``generateName``
    component's prefix then stays open (``names_component``) for as long as the tenant likes
    (brk30b H1). Such an AppWrapper can never run, so it is refused when it is queued
    (created, or made queued by an update) rather than admitted. Beyond Kueue v0.17.1,
    whose AppWrapper webhook does not read the components' labels."""
    errors = []
    for i, comp in enumerate((aw.get("spec") or {}).get("components") or []):
        tpl = comp.get("template") if isinstance(comp, Mapping) else None
        meta = tpl.get("metadata") if isinstance(tpl, Mapping) else None
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        if not isinstance(labels, Mapping) or QUEUE_NAME_LABEL not in labels:
            continue
        value = labels[QUEUE_NAME_LABEL]
        found = queue_name_format_errors(value, QUEUE_NAME_LABEL) \
            if isinstance(value, str) and value \
            else [f"{label_field(QUEUE_NAME_LABEL)}: {value!r} is not a valid LocalQueue name"]
        errors += [f"spec.components[{i}].template.{e}: the component's own webhook refuses "
                   "it, so its controller could never create it" for e in found]
    return errors


def _components_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """A change to a component's template or declared podSets (path, replicas) of a queued
    AppWrapper (the operator's webhook ``validateAppWrapperUpdate`` refuses the same)."""
    def shape(aw: Mapping[str, Any]) -> list[Any]:
        comps = (aw.get("spec") or {}).get("components")
        return [(c.get("template"), [(d.get("path"), d.get("replicas", 1))
                                     for d in c.get("podSets") or [] if isinstance(d, Mapping)])
                if isinstance(c, Mapping) else c for c in comps or []] \
            if isinstance(comps, list) else [comps]
    if shape(old) == shape(new):
        return []
    return ["spec.components: a queued AppWrapper's components (their templates and declared "
            "podSets) are immutable, as the AppWrapper operator's webhook has them; its "
            "Workload was sized from them. Delete and re-create it to change them"]


KIND = AppWrapper()
