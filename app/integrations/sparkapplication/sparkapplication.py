"""sparkoperator.k8s.io/v1beta2 SparkApplication as a job kind (Kueue v0.17.1
``pkg/controller/jobs/sparkapplication``, kueue-integrations.md table; alpha in Kueue behind the
gate ``SparkApplicationIntegration``, absent from its shipped frameworks list), on the shared
base of the operators' kinds (``app.integrations.templated``).

The spark-operator (kubeflow/spark-operator v2.5.0) runs ``spark-submit`` in cluster mode once
the SparkApplication is not suspended; Spark creates the driver pod, and the driver creates the
executors. Neither role has a full pod template in the object: a role is a ``SparkPodSpec``
(``spec.driver``, ``spec.executor``: ``cores``, ``coreRequest``, ``memory``, ``nodeSelector``,
``tolerations``, ``labels``, an optional ``template``, ...).

PodSets (Kueue ``PodSets``): ``driver`` (count 1) and ``executor`` (count
``spec.executor.instances``, default 0), each a pod template built from the role's resource
fields as Kueue's ``mutateSparkPod`` does (``role_template``): one container
(``spark-kubernetes-driver`` / ``spark-kubernetes-executor``) with requests ``cpu`` =
``coreRequest`` and ``memory`` = ``memory`` (a Java size, ``512m`` = ``512Mi``), limits ``cpu``
= ``coreLimit``, ``memory`` = ``memoryLimit`` and the role's ``gpu`` (``name``: ``quantity``);
the role's ``nodeSelector``, ``tolerations``, ``affinity``, ``priorityClassName``,
``initContainers``, ``sidecars``, volumes it mounts, and the metadata of its ``template`` with
its ``labels`` and ``annotations``. ``cores`` (Spark's task slots) and the memory overhead Spark
adds to the pod are not counted, as in Kueue.

Webhook (Kueue ``validateCreate``, on create and update of a queued one): ``spec.mode`` must be
``cluster``; ``spec.dynamicAllocation.enabled`` is refused (Kueue allows it only for elastic
jobs, which pykueue does not run). Beyond Kueue, so that a tenant never runs more than
admitted (``_uncounted_errors``): ``spec.sparkConf`` keys through which Spark would ask GPUs,
cores or memory, or run executors, that the podSets do not count, and resources in a role's
``template``, are refused (on update, those the stored object did not have). An admitted
SparkApplication whose roles are edited (more executors, more memory) no longer matches its
Workload: the reconciler stops it and queues a new Workload (Kueue ``NoMatchingWorkload``).

Suspend lever ``spec.suspend``. Start (Kueue ``RunWithPodSetsInfo``): per role, the flavor's
node labels merged into the role's ``nodeSelector`` (into ``spec.nodeSelector`` instead when
the object sets that one: the two are mutually exclusive), its tolerations appended to the
role's ``tolerations`` and the ``kueue.x-k8s.io/podset`` label into the role's ``labels``; what
the user wrote is kept in ``ORIGINAL_ANNOTATION`` (per role, and ``app`` for
``spec.nodeSelector``) and restored on stop (Kueue ``RestorePodSetsInfo``). The spark-operator
applies a role's fields to its pods through its pod webhook. Finished (Kueue ``Finished``):
``status.applicationState.state`` ``COMPLETED`` (succeeded), ``FAILED`` or ``SUBMISSION_FAILED``
(its ``errorMessage``). Pods ready and active (Kueue ``PodsReady``, ``IsActive``): state
``RUNNING``. The driver pod carries ``sparkoperator.k8s.io/app-name`` and a controller owner
reference to the SparkApplication (``pod_labels``). The executors carry the same label (and
Spark's ``spark-role: executor``, ``spark-app-selector``), and Spark 4.0 makes the driver pod
their controller: they count as the application's pods through that driver only
(``pods_make_pods``, ``framework.pod_of``), so a Workload whose release waits on the Pod store
(the application deleted, or orphaned) waits for them too. No ``managedBy``: Kueue v0.17.1
has no MultiKueue adapter for the kind.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.integrations.crdrules import CrdRules
from app.integrations.framework import own_stored
from app.integrations.podsets import (
    apply_record,
    inject_template,
    read_record,
    record_text,
    template_record,
)
from app.integrations.templated import Template, TemplatedKind, stored_records
from app.kube.client import Resource
from app.wire.fields import Obj, WorkloadSpecError
from app.wire.names import ORIGINAL_ANNOTATION

if TYPE_CHECKING:
    from app.kube.context import Context

GROUP, VERSION = "sparkoperator.k8s.io", "v1beta2"
SPARKAPPLICATIONS = Resource(GROUP, VERSION, "sparkapplications", "SparkApplication")
APP_NAME_LABEL = "sparkoperator.k8s.io/app-name"  # on every pod the operator launches
SPARK_ROLE_LABEL = "spark-role"  # Spark 4.0: driver or executor
ROLES = (("driver", "spark-kubernetes-driver"), ("executor", "spark-kubernetes-executor"))
FINISHED_STATES = {"COMPLETED": "Succeeded", "FAILED": "Failed",
                   "SUBMISSION_FAILED": "Failed"}
# spark-operator ``ConvertJavaMemoryStringToK8sMemoryString``: a Java size suffix -> Kubernetes.
_JAVA_UNITS = {"k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti", "p": "Pi"}


def java_memory(value: str) -> str:
    """A Java memory size as a Kubernetes quantity (``"512m"`` -> ``"512Mi"``, ``"2g"`` ->
    ``"2Gi"``); a value without a Java suffix is returned as is."""
    for unit, k8s in _JAVA_UNITS.items():
        if value.lower().endswith(unit):
            return value[: -len(unit)] + k8s
    return value


def _role(obj: Mapping[str, Any], role: str) -> Mapping[str, Any]:
    value = (obj.get("spec") or {}).get(role)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise WorkloadSpecError(f"spec.{role}", "expected an object")
    return value


def _string(sps: Mapping[str, Any], key: str, where: str) -> str | None:
    value = sps.get(key)
    if value is None:
        return None
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise WorkloadSpecError(f"{where}.{key}", "expected a string")
    return str(value)


def role_template(obj: Mapping[str, Any], role: str) -> Obj:
    """The pod template of ``role`` (``driver`` or ``executor``) that its podSet counts (module
    doc; Kueue ``buildDriverPodTemplateSpec`` / ``buildExecutorPodTemplateSpec``). Raises
    ``WorkloadSpecError`` naming the field."""
    sps = _role(obj, role)
    where = f"spec.{role}"
    container: Obj = {"name": dict(ROLES)[role]}
    requests: Obj = {}
    limits: Obj = {}
    if (v := _string(sps, "coreRequest", where)) is not None:
        requests["cpu"] = v
    if (v := _string(sps, "coreLimit", where)) is not None:
        limits["cpu"] = v
    if (v := _string(sps, "memory", where)) is not None:
        requests["memory"] = java_memory(v)
    if (v := _string(sps, "memoryLimit", where)) is not None:
        limits["memory"] = java_memory(v)
    gpu = sps.get("gpu")
    if isinstance(gpu, Mapping) and gpu.get("name") and isinstance(gpu.get("quantity"), int) \
            and gpu["quantity"] > 0:
        limits[str(gpu["name"])] = gpu["quantity"]
    if requests or limits:
        container["resources"] = {k: v for k, v in (("requests", requests),
                                                     ("limits", limits)) if v}
    volumes = {v.get("name"): v for v in (obj.get("spec") or {}).get("volumes") or []
               if isinstance(v, Mapping)}
    pod_volumes, mounts = [], []
    for m in sps.get("volumeMounts") or []:
        name = m.get("name") if isinstance(m, Mapping) else None
        if not name or str(name).startswith("spark-local-dir-") or name not in volumes:
            continue
        if all(v.get("name") != name for v in pod_volumes):
            pod_volumes.append(copy.deepcopy(volumes[name]))
        mounts.append(copy.deepcopy(m))
    if mounts:
        container["volumeMounts"] = mounts
    containers = [container] + [copy.deepcopy(c) for c in sps.get("sidecars") or []
                                if isinstance(c, Mapping) and c.get("name") != container["name"]]
    spec: Obj = {"containers": containers}
    if pod_volumes:
        spec["volumes"] = pod_volumes
    if sps.get("initContainers"):
        spec["initContainers"] = copy.deepcopy(sps["initContainers"])
    if sps.get("priorityClassName"):
        spec["priorityClassName"] = sps["priorityClassName"]
    if sps.get("nodeSelector"):
        spec["nodeSelector"] = dict(sps["nodeSelector"])
    if sps.get("affinity"):
        spec["affinity"] = copy.deepcopy(sps["affinity"])
    if sps.get("tolerations"):
        spec["tolerations"] = copy.deepcopy(sps["tolerations"])
    base = sps.get("template") if isinstance(sps.get("template"), Mapping) else None
    meta = copy.deepcopy(dict((base or {}).get("metadata") or {}))
    labels = {**(meta.get("labels") or {}), **(sps.get("labels") or {})}
    annotations = {**(meta.get("annotations") or {}), **(sps.get("annotations") or {})}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec} if meta else {"spec": spec}


def _view(sps: Mapping[str, Any]) -> Obj:
    """A role's scheduling fields shaped as a pod template (``labels``, ``nodeSelector``,
    ``tolerations``), for the shared start-record helpers."""
    view: Obj = {"spec": {k: copy.deepcopy(sps[k]) for k in ("nodeSelector", "tolerations")
                          if sps.get(k) is not None}}
    if sps.get("labels") is not None:
        view["metadata"] = {"labels": dict(sps["labels"])}
    return view


def _write_view(sps: Obj, view: Mapping[str, Any]) -> None:
    for key in ("nodeSelector", "tolerations"):
        if key in (view.get("spec") or {}):
            sps[key] = view["spec"][key]
        else:
            sps.pop(key, None)
    labels = (view.get("metadata") or {}).get("labels")
    if labels is not None:
        sps["labels"] = labels
    else:
        sps.pop("labels", None)


def apply_record_to(view: Obj, text: str) -> None:
    """Set ``view``'s fields to the stored record ``text`` when it can be read."""
    if (rec := read_record(text)) is not None:
        apply_record(view, rec)


def _mode_errors(obj: Mapping[str, Any]) -> list[str]:
    """Kueue ``validateCreate``'s refusals of a queued SparkApplication."""
    spec = obj.get("spec") or {}
    out = []
    if spec.get("mode") != "cluster":
        out.append(f"spec.mode: Invalid value: {spec.get('mode')!r}: only Cluster mode is "
                   "supported for a kueue managed job")
    dyn = spec.get("dynamicAllocation")
    if isinstance(dyn, Mapping) and dyn.get("enabled") is True:
        out.append("spec.dynamicAllocation.enabled: Invalid value: true: a kueue managed job "
                   "can use dynamicAllocation only when the ElasticJobsViaWorkloadSlices "
                   "feature gate is on and the job is an elastic job (pykueue runs no elastic "
                   "jobs)")
    return out


# spark-submit properties (``spec.sparkConf``) that decide how many executors Spark runs or
# what its pods ask, where the Workload counts the roles' typed fields only (Kueue v0.17.1
# ``PodSets``): a key, or a prefix ending in ``.``, and the typed field to set instead.
_UNCOUNTED_CONF = (
    ("spark.executor.instances", "spec.executor.instances"),
    ("spark.dynamicAllocation.", "nothing: dynamic allocation is refused"),
    ("spark.driver.resource.", "spec.driver.gpu"),
    ("spark.executor.resource.", "spec.executor.gpu"),
    ("spark.kubernetes.driver.podTemplateFile", "spec.driver.template"),
    ("spark.kubernetes.executor.podTemplateFile", "spec.executor.template"),
    ("spark.kubernetes.driver.request.cores", "spec.driver.coreRequest"),
    ("spark.kubernetes.executor.request.cores", "spec.executor.coreRequest"),
    ("spark.driver.memory", "spec.driver.memory"),
    ("spark.executor.memory", "spec.executor.memory"),
)


def _uncounted_errors(obj: Mapping[str, Any]) -> list[str]:
    """What a queued SparkApplication may not ask outside the fields its podSets count
    (beyond Kueue v0.17.1, which counts those fields and lets Spark read the rest, so a driver
    asking 4 GPUs through ``sparkConf`` ran on an admission of none): the
    ``_UNCOUNTED_CONF`` keys of ``spec.sparkConf``, and resources or resource claims in a
    role's ``template`` (Spark keeps a template container's resources beside its own)."""
    spec = obj.get("spec") or {}
    out = []
    conf = spec.get("sparkConf")
    for key in sorted(conf) if isinstance(conf, Mapping) else []:
        for name, instead in _UNCOUNTED_CONF:
            if key == name or (name.endswith(".") and str(key).startswith(name)):
                out.append(f"spec.sparkConf[{key}]: Forbidden: decides what Spark's pods ask or "
                           f"how many run, which the Workload of a queued SparkApplication does "
                           f"not count; set {instead} instead")
                break
    for role, _ in ROLES:
        sps = spec.get(role)
        tmpl = sps.get("template") if isinstance(sps, Mapping) else None
        pod = tmpl.get("spec") if isinstance(tmpl, Mapping) else None
        if not isinstance(pod, Mapping):
            continue
        where = f"spec.{role}.template.spec"
        if pod.get("resourceClaims"):
            out.append(f"{where}.resourceClaims: Forbidden: not counted by the Workload of a "
                       "queued SparkApplication")
        for field in ("containers", "initContainers"):
            for i, c in enumerate(pod.get(field) or []):
                if isinstance(c, Mapping) and c.get("resources"):
                    out.append(f"{where}.{field}[{i}].resources: Forbidden: not counted by the "
                               f"Workload of a queued SparkApplication; set spec.{role}'s "
                               "coreRequest, memory and gpu instead")
    return out


class SparkApplication(TemplatedKind):
    """sparkoperator.k8s.io/v1beta2 SparkApplication (``JobKind``; module doc). ``optional``:
    its CRD may be absent; the manager then leaves the kind out at start-up."""

    key = "sparkapplication"
    resource = SPARKAPPLICATIONS
    api_group = GROUP
    kind = "SparkApplication"
    suspend = ("spec", "suspend")
    rules = CrdRules(GROUP, VERSION, "sparkapplications", "SparkApplication",
                     ("spec", "suspend"),
                     extra_create=lambda app: _mode_errors(app) + _uncounted_errors(app)
                     + KIND.spec_errors(app),
                     extra_update=lambda old, new: _mode_errors(new))
    pod_labels = (APP_NAME_LABEL, "")
    pods_make_pods = True  # the driver makes and controls the executors

    def leaves_orphans(self, ctx: Context, pod: Mapping[str, Any], name: str,
                       uid: str) -> bool:
        """An executor (``spark-role: executor``): Spark 4.0 makes it controlled by its
        driver, so ``kubectl delete pod <driver> --cascade=orphan`` leaves it running with no
        controller (brk27 M3's "Left") while the application lives (spark-operator v2.5.0
        fails it, or submits it again under its ``restartPolicy``); a new driver's allocator
        selects only its own submission's executors (``spark-app-selector``), and the
        operator lists executors for their status only (``getExecutorPods``)."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return labels.get(SPARK_ROLE_LABEL) == "executor"

    def direct_podsets(self, obj: Mapping[str, Any]) -> frozenset[str] | None:
        """The driver: spark-submit makes the driver pod controlled by the SparkApplication,
        and the driver makes its executors, each controlled by the driver pod."""
        return frozenset({"driver"})

    def made_podsets(self, obj: Mapping[str, Any]) -> frozenset[str]:
        """The executors: Spark 4.0's driver makes each controlled by the driver pod."""
        return frozenset({"executor"})

    def templates(self, obj: Mapping[str, Any]) -> list[Template]:
        """``driver`` (1) and ``executor`` (``spec.executor.instances``, default 0), each
        located at its role (``spec.driver``, ``spec.executor``). Raises
        ``WorkloadSpecError``."""
        executors = _role(obj, "executor").get("instances", 0)
        if executors is None:
            executors = 0
        if not isinstance(executors, int) or isinstance(executors, bool) or executors < 0:
            raise WorkloadSpecError("spec.executor.instances", "expected an integer >= 0")
        _role(obj, "driver")
        return [Template("driver", 1, ("spec", "driver"), "driver"),
                Template("executor", executors, ("spec", "executor"), "executor")]

    def template_of(self, obj: Mapping[str, Any], t: Template) -> Any:
        """The pod template Kueue builds for the role (``role_template``)."""
        return role_template(obj, t.key)

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        """State ``COMPLETED`` (succeeded), ``FAILED`` or ``SUBMISSION_FAILED`` (Kueue
        ``Finished``), with the state's ``errorMessage``."""
        state = (obj.get("status") or {}).get("applicationState") or {}
        reason = FINISHED_STATES.get(str(state.get("state") or ""))
        if reason is None:
            return False, "", ""
        message = str(state.get("errorMessage") or "")
        return True, reason, message or f"SparkApplication {str(state.get('state')).lower()}"

    def selects_own_pod(self, ctx: Context | None, pod: Mapping[str, Any], name: str) -> bool:
        """Whether ``pod``, controlled by the application ``name`` itself, is its driver as
        spark-operator v2.5.0 deletes it on a suspension (``deleteDriverPod``): the pod named
        ``status.driverInfo.podName``, else ``GetDriverPodName``'s (``spec.driver.podName``,
        the conf ``spark.kubernetes.driver.pod.name``, else ``<name>-driver``). The
        application not stored (or no ``ctx``): any name (the garbage collector deletes the
        pods of a gone owner). Once the application is ``SUSPENDED`` the operator deletes it
        no more: pykueue does (``operator_stopped``)."""
        meta = pod.get("metadata") or {}
        app = own_stored(ctx, self, pod, name)
        if app is None:
            return True
        status = app.get("status") or {}
        spec = app.get("spec") or {}
        conf = spec.get("sparkConf") or {}
        named = (str((spec.get("driver") or {}).get("podName") or "")
                 or str(conf.get("spark.kubernetes.driver.pod.name") or "") or f"{name}-driver")
        return meta.get("name") in {named, (status.get("driverInfo") or {}).get("podName")}

    def operator_stopped(self, obj: Mapping[str, Any]) -> bool:
        """``spec.suspend`` and state ``SUSPENDED`` (``_suspended``): spark-operator v2.5.0
        sets that state once it has asked for the driver's deletion
        (``reconcileSuspendingSparkApplication``), and in it only checks that the driver is
        gone (``validateSparkResourceDeletion``), deleting nothing until the application is
        resumed. A driver left then (one killed with a grace period beyond its Workload's, or
        one running under a state a tenant allowed to write ``sparkapplications/status``
        forged, brk28) is deleted by pykueue (``framework.stop_pods_left``) and counts until
        it is gone, as in any other state."""
        return (obj.get("spec") or {}).get("suspend") is True and _suspended(obj)

    def _running(self, obj: Mapping[str, Any]) -> bool:
        state = (obj.get("status") or {}).get("applicationState") or {}
        return state.get("state") == "RUNNING"

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        return self._running(obj)

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        """Every podSet's pods while the state is ``RUNNING`` (Kueue ``IsActive``), else 0;
        the reconciler also counts the pods themselves (``pod_labels``)."""
        if not self._running(obj):
            return 0
        try:
            return sum(t.count for t in self.templates(obj))
        except WorkloadSpecError:
            return 1

    # ---------------------------------------------------------------- the writes

    def injected(self, obj: Mapping[str, Any], scheduling: Mapping[str, tuple[Mapping[str, str],
                 list[Obj]]], *, inject_node_selector: bool = True) -> Obj:
        """``obj`` started (module doc): each role's scheduling fields, the records, the lever
        false. Idempotent. Raises ``InjectionConflict`` when a flavor's node label contradicts
        the user's nodeSelector."""
        self.checked_templates(obj)
        out = copy.deepcopy(dict(obj))
        spec = out.setdefault("spec", {})
        stored = stored_records(out)
        records: dict[str, str] = {}
        app_rec = template_record({"spec": {"nodeSelector": spec["nodeSelector"]}}
                                  if spec.get("nodeSelector") is not None else {},
                                  stored.get("app"))
        app_level = "nodeSelector" in app_rec
        app_selector = dict(app_rec.get("nodeSelector") or {})
        for role, _ in ROLES:
            selector, tolerations = scheduling.get(role, ({}, []))
            sps = spec.setdefault(role, {})
            view = _view(sps)
            rec = template_record(view, stored.get(role))
            inject_template(view, rec, role, {} if app_level else selector, tolerations,
                            inject_node_selector=inject_node_selector)
            if app_level and inject_node_selector and selector:
                app_view = {"spec": {"nodeSelector": app_selector}}
                inject_template(app_view, {"nodeSelector": app_selector}, role, selector, [])
                app_selector = app_view["spec"]["nodeSelector"]
            _write_view(sps, view)
            records[role] = record_text(rec)
        if app_level:
            spec["nodeSelector"] = app_selector
            records["app"] = record_text(app_rec)
        meta = out.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}),
                               ORIGINAL_ANNOTATION: json.dumps(records, sort_keys=True)}
        spec["suspend"] = False
        return out

    def restored(self, obj: Mapping[str, Any]) -> Obj:
        """``obj`` suspended, each role's (and ``spec.nodeSelector``'s) fields as the user
        wrote them, the record removed."""
        out = copy.deepcopy(dict(obj))
        spec = out.setdefault("spec", {})
        spec["suspend"] = True
        stored = stored_records(out)
        for role, _ in ROLES:
            if role in stored and isinstance(spec.get(role), dict):
                view = _view(spec[role])
                apply_record_to(view, stored[role])
                _write_view(spec[role], view)
        if "app" in stored:
            view = {"spec": {"nodeSelector": spec.get("nodeSelector")}}
            apply_record_to(view, stored["app"])
            if "nodeSelector" in view["spec"]:
                spec["nodeSelector"] = view["spec"]["nodeSelector"]
            else:
                spec.pop("nodeSelector", None)
        anns = dict((out.get("metadata") or {}).get("annotations") or {})
        if ORIGINAL_ANNOTATION in anns:
            anns.pop(ORIGINAL_ANNOTATION)
            if anns:
                out["metadata"]["annotations"] = anns
            else:
                out["metadata"].pop("annotations", None)
        return out


KIND = SparkApplication()


def _suspended(app: Mapping[str, Any]) -> bool:
    """Whether the SparkApplication ``app`` is in state ``SUSPENDED``: spark-operator v2.5.0
    sets it once it has asked for the driver's deletion, and deletes no pod again until the
    application is resumed."""
    return ((app.get("status") or {}).get("applicationState") or {}).get("state") == "SUSPENDED"
