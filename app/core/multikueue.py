"""MultiKueue's decisions, pure (Kueue v0.17.1 ``pkg/controller/admissionchecks/multikueue``):
whether a MultiKueue AdmissionCheck is Active, whether a worker's kubeconfig may be used,
which worker won a Workload, the job kinds MultiKueue dispatches (``ADAPTERS``: batch/v1 Job,
JobSet, the Kubeflow jobs and MPIJob, KubeRay's RayJob, RayCluster and RayService, Kubeflow
Trainer's TrainJob, AppWrapper) and the copy of a job sent to the workers.

Objects are the plain JSON ``dict``s the API server sends; nothing here does I/O.
"""

from __future__ import annotations

import copy
import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from app.core.eta import COMPUTING, OVERDUE, UNKNOWN

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
KUBECONFIG_KEY = "kubeconfig"
PREBUILT_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# Workload conditions read on the workers' copies.
ADMITTED, EVICTED = "Admitted", "Evicted"
# pykueue's start record on a started object (app.wire.names.ORIGINAL_ANNOTATION).
START_RECORD = "pykueue.dev/original-pod-scheduling"
CONFIG_GROUP, CONFIG_KIND = "kueue.x-k8s.io", "MultiKueueConfig"
ALL_AT_ONCE = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
INCREMENTAL = "kueue.x-k8s.io/multikueue-dispatcher-incremental"
# pykueue's own dispatcher (kueue#10768): the worker whose pykueue expects to start the copy
# soonest (``soonest_keep``).
SOONEST = "pykueue.dev/multikueue-dispatcher-soonest"
# On a MultiKueueCluster: the base URL of its worker's pykueue status API (read by SOONEST);
# the bearer token (and optionally the CA of the API's serving certificate) sit in the
# cluster's kubeconfig Secret under these keys.
STATUS_API_ANNOTATION = "pykueue.dev/status-api"
STATUS_TOKEN_KEY = "status-api-token"
STATUS_CA_KEY = "status-api-ca.crt"
# Labels the Job controller stamps on a Job's pod template; the worker's Job gets its own.
_JOB_CONTROLLER_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name",
                          "batch.kubernetes.io/job-name")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Verdict:
    """One ``Active`` condition: ``status`` True/False, CamelCase ``reason``, ``message``."""

    active: bool
    reason: str
    message: str


def parameters_problem(parameters: Mapping[str, Any] | None) -> str | None:
    """Why an AdmissionCheck's ``spec.parameters`` cannot name a MultiKueueConfig, or None.
    Kueue ``admissioncheck.refValidForGK`` messages."""
    if not parameters:
        return "missing parameters reference"
    if not parameters.get("name"):
        return "empty name: bad parameters reference"
    group, kind = parameters.get("apiGroup", ""), parameters.get("kind", "")
    if group != CONFIG_GROUP:
        return f'wrong group "{group}", expecting "{CONFIG_GROUP}": bad parameters reference'
    if kind != CONFIG_KIND:
        return f'wrong kind "{kind}", expecting "{CONFIG_KIND}": bad parameters reference'
    return None


def check_active(config_problem: str | None, clusters: Sequence[str],
                 cluster_active: Mapping[str, bool]) -> Verdict:
    """The ``Active`` condition of a MultiKueue AdmissionCheck (Kueue ``ACReconciler``).

    ``config_problem``: why its MultiKueueConfig cannot be read (bad reference, not found),
    None when it was; ``clusters``: the config's ``spec.clusters``; ``cluster_active``:
    MultiKueueCluster name -> its ``Active`` condition is True (a name absent is missing).
    Active with reason ``SomeActiveClusters`` while at least one cluster is usable;
    ``NoUsableClusters`` (False) when none is; ``BadConfig`` (False) without a config."""
    if config_problem is not None:
        return Verdict(False, "BadConfig",
                       f"Cannot load the AdmissionChecks parameters: {config_problem}")
    missing = [c for c in clusters if c not in cluster_active]
    inactive = [c for c in clusters if c in cluster_active and not cluster_active[c]]
    if not missing and not inactive:
        return Verdict(True, "Active", "The admission check is active")
    parts = []
    if missing:
        parts.append(f"Missing clusters: [{' '.join(missing)}]")
    if inactive:
        parts.append(f"Inactive clusters: [{' '.join(inactive)}]")
    usable = len(missing) + len(inactive) < len(clusters)
    return Verdict(usable, "SomeActiveClusters" if usable else "NoUsableClusters",
                   ", ".join(parts))


NOT_SERVED = ("multikueueconfigs.kueue.x-k8s.io is not served by the API server (the "
              "MultiKueueCluster and MultiKueueConfig CRDs are not installed): MultiKueue is "
              "off until they are")


def check_active_while_off(parameters: Mapping[str, Any] | None) -> Verdict:
    """The ``Active`` condition of a MultiKueue AdmissionCheck while MultiKueue is off (its
    CRDs not served): False with Kueue's reason for a config it cannot load, ``BadConfig``,
    saying why (``parameters`` that name no MultiKueueConfig first, as Kueue's reference
    check comes before the read; else ``NOT_SERVED``)."""
    return check_active(parameters_problem(parameters) or NOT_SERVED, (), {})


def cluster_source_problem(spec: Mapping[str, Any] | None,
                           allow_path: bool) -> tuple[str, str] | None:
    """(reason, message) when a MultiKueueCluster's ``spec.clusterSource`` cannot be used
    before any kubeconfig is read, else None. A ``clusterProfileRef`` is not supported
    (Kueue's reason when its ``MultiKueueClusterProfile`` gate is off); a ``Path`` location
    only with ``allow_path`` (pykueue's setting ``multikueue.allow_kubeconfig_path``: Kueue
    reads any file of its pod, pykueue does not unless told)."""
    source = (spec or {}).get("clusterSource") or {}
    if source.get("clusterProfileRef"):
        return ("MultiKueueClusterProfileFeatureDisabled",
                "load client config failed: ClusterProfile credentials are not supported by "
                "pykueue")
    ref = source.get("kubeConfig")
    if not ref:
        return "BadKubeConfig", "load client config failed: kubeconfig reference is nil"
    if ref.get("locationType", "Secret") == "Path":
        if not allow_path:
            return ("BadKubeConfig",
                    "load client config failed: locationType Path is refused (set "
                    "multikueue.allow_kubeconfig_path to read kubeconfig files from pykueue's "
                    "disk)")
        return None
    location = str(ref.get("location") or "")
    if len(location) > 253 or not _DNS1123_SUBDOMAIN.match(location):
        # A Secret's name: "../../<ns>/secrets/<name>" would reach another namespace's
        # Secret through the URL path (pykueue's Role denies it: a 403 every pass).
        return ("BadKubeConfig",
                f'load client config failed: location "{location[:64]}" is not a Secret name '
                "(a DNS-1123 subdomain)")
    return None


def _valid_host(server: str) -> bool:
    """Kueue ``isValidHostname``: the server URL's host is an IP address or a DNS-1123
    subdomain."""
    try:
        host = urlsplit(server.lower()).hostname or ""
    except ValueError:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(host) and len(host) <= 253 and bool(_DNS1123_SUBDOMAIN.match(host))


def kubeconfig_problem(cfg: Any) -> str | None:
    """Why a parsed kubeconfig may not be used to reach a worker, or None. Kueue
    ``validateKubeconfig`` (gate ``MultiKueueAllowInsecureKubeconfigs`` off): no token file,
    no TLS verification skipped, no certificate-authority file, a server for every cluster
    whose host is an IP or a DNS name, no basic auth, exec plugin or auth provider. pykueue
    refuses client certificate and key files too (data only): a kubeconfig in a Secret must
    not make pykueue read its own disk."""
    if not isinstance(cfg, Mapping):
        return "failed to parse kubeconfig: not a mapping"
    clusters = {c.get("name"): c.get("cluster") or {} for c in cfg.get("clusters") or []
                if isinstance(c, Mapping)}
    users = {u.get("name"): u.get("user") or {} for u in cfg.get("users") or []
             if isinstance(u, Mapping)}
    for user in users.values():
        if user.get("tokenFile"):
            return "tokenFile is not allowed"
    for name, cluster in clusters.items():
        if cluster.get("insecure-skip-tls-verify"):
            return f"insecure TLS verification is not allowed for cluster {name}"
        if cluster.get("certificate-authority"):
            return ("certificate-authority file paths are not allowed, use "
                    f"certificate-authority-data for cluster {name}")
        if not cluster.get("server"):
            return f"server URL is required for cluster {name}"
    contexts = {c.get("name"): c.get("context") or {} for c in cfg.get("contexts") or []
                if isinstance(c, Mapping)}
    current = contexts.get(cfg.get("current-context"))
    if current is None:
        return "invalid configuration: no current context"
    cluster = clusters.get(current.get("cluster"))
    user = users.get(current.get("user"), {})
    if cluster is None:
        return "invalid configuration: the current context names no cluster"
    if not _valid_host(str(cluster.get("server"))):
        return "untrusted server endpoint"
    if user.get("username") or user.get("password"):
        return "basic auth is not allowed"
    if user.get("exec"):
        return "exec plugins are not allowed"
    if user.get("auth-provider"):
        return "auth providers are not allowed"
    if user.get("client-certificate") or user.get("client-key"):
        return "client certificate and key file paths are not allowed, use the -data fields"
    return None


def _true_since(obj: Mapping[str, Any] | None, ctype: str) -> str | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype and c.get("status") == "True":
            return str(c.get("lastTransitionTime") or "")
    return None


def first_with(remotes: Mapping[str, Mapping[str, Any] | None], ctype: str) -> str | None:
    """The worker whose Workload has condition ``ctype`` True for the longest (earliest
    ``lastTransitionTime``; RFC 3339 UTC strings sort in time order; ties by worker name),
    None when none has. Kueue ``wlGroup.bestMatchByCondition``."""
    since = {name: t for name, wl in remotes.items()
             if (t := _true_since(wl, ctype)) is not None}
    return min(since, key=lambda n: (since[n], n)) if since else None


def placed_copies(remotes: Mapping[str, Any], cluster_name: str | None) -> Mapping[str, Any]:
    """The workers' copies that may decide a Workload (finish it, win it): once its
    ``status.clusterName`` names a worker, only that worker's; before, every worker's. A
    worker that was lost, and comes back after the Workload moved elsewhere, holds a stale
    copy that reserved earlier: ``first_with`` over every worker would give it the Workload
    (Kueue v0.17.1 does, then fails to change the immutable ``clusterName``, after deleting
    the copies on the worker the Workload runs on); it is deleted as a loser instead."""
    if not cluster_name:
        return remotes
    return {cluster_name: remotes.get(cluster_name)}


def admitted_worker(remotes: Mapping[str, Any], cluster_name: str | None) -> str | None:
    """The worker that holds the Workload: among ``placed_copies``, the one whose copy has
    been ``Admitted`` longest (``first_with``), None when no copy is. Kueue v0.17.1 with
    ``MultiKueueWaitForWorkloadAdmitted`` (beta, on by default since v0.16): a copy holding
    quota on a worker whose own admission checks (a ProvisioningRequest...) are not all
    Ready has ``QuotaReserved`` but not ``Admitted``, and does not win yet. Once a worker
    holds it, the same condition says whether it still does: none, while the check is
    Ready, is a lost worker (``worker_lost``)."""
    return first_with(placed_copies(remotes, cluster_name), ADMITTED)


def evicted_on_worker(check_state: str | None, cluster_name: str | None,
                      remotes: Mapping[str, Any]) -> str | None:
    """The message the MultiKueue check goes Retry with when the Workload's copy was evicted
    on the worker that holds it (preempted there, its pods-ready timeout, deactivated
    there...), None otherwise. Kueue v0.17.1 ``MultiKueueRedoAdmissionOnEvictionInWorker``
    (beta, on by default since v0.16): only while the check is ``Ready``; the manager then
    evicts and requeues its Workload, which removes the copies, and dispatches it afresh
    (instead of waiting ``workerLostTimeout``). Kueue looks at an ``Evicted`` copy on any
    worker; pykueue at the copy on ``status.clusterName``'s only (``placed_copies``): a
    stale copy on a worker that came back after the Workload moved is deleted as a loser,
    not taken for an eviction of the running one."""
    if check_state != "Ready" or not cluster_name:
        return None
    if first_with(placed_copies(remotes, cluster_name), EVICTED) is None:
        return None
    return (f'Workload evicted on worker cluster: "{cluster_name}", resetting for '
            're-admission. Previously: "Ready"')


def condition_of(obj: Mapping[str, Any] | None, ctype: str) -> Mapping[str, Any] | None:
    """Condition ``ctype`` of ``obj``'s ``status.conditions``, or None."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def _clone_meta(meta: Mapping[str, Any], origin: str) -> Obj:
    """Name, namespace, labels and annotations (Kueue ``CloneObjectMetaForCreation``), with
    label ``kueue.x-k8s.io/multikueue-origin: <origin>``."""
    out: Obj = {"name": meta.get("name"), "namespace": meta.get("namespace")}
    labels = dict(meta.get("labels") or {})
    labels[ORIGIN_LABEL] = origin
    out["labels"] = labels
    if meta.get("annotations"):
        out["annotations"] = dict(meta["annotations"])
    return out


def remote_workload(local: Mapping[str, Any], origin: str) -> Obj:
    """The copy of the manager's Workload ``local`` created on every nominated worker (Kueue
    ``cloneForCreate``): same name, namespace, labels, annotations and ``spec``, label
    ``kueue.x-k8s.io/multikueue-origin``; no owner (the worker's Job adopts it later) and
    without the manager Job's ``kueue.x-k8s.io/job-uid`` label (on a worker it would name an
    object that is not there)."""
    meta = _clone_meta(local.get("metadata") or {}, origin)
    meta["labels"].pop(JOB_UID_LABEL, None)
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta,
            "spec": copy.deepcopy(local.get("spec") or {})}


def remote_job(local: Mapping[str, Any], origin: str, workload: str) -> Obj:
    """The batch/v1 Job created on the worker that won, once its copy of the Workload
    ``workload`` holds quota there (Kueue's Job MultiKueue adapter ``SyncJob``): name,
    namespace, labels and annotations kept, label ``kueue.x-k8s.io/prebuilt-workload-name:
    <workload>`` (the worker's Job adopts that Workload instead of making one) and the origin
    label added, ``spec`` copied without ``selector`` and ``managedBy`` (the worker's Job
    controller runs it), the Job controller's labels dropped from the pod template and
    ``spec.suspend`` true (the worker's Kueue starts it)."""
    meta = _clone_meta(local.get("metadata") or {}, origin)
    meta["labels"][PREBUILT_LABEL] = workload
    # The manager's pykueue start record (its Job is started once the check is Ready) is
    # not the worker Job's: a Job re-created after that would never start there (its
    # "original" template names the manager Job's controller-uid: 422 on every start).
    (meta.get("annotations") or {}).pop(START_RECORD, None)
    spec = copy.deepcopy(local.get("spec") or {})
    spec.pop("selector", None)
    spec.pop("managedBy", None)
    spec["suspend"] = True
    tmeta = (spec.get("template") or {}).get("metadata") or {}
    for key in _JOB_CONTROLLER_LABELS:
        (tmeta.get("labels") or {}).pop(key, None)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


@dataclass(frozen=True, slots=True)
class Adapter:
    """What MultiKueue needs of one job kind (Kueue v0.17.1 ``*_multikueue_adapter.go``):
    its API (``group``, ``version``, ``plural``, ``kind``), where its ``managedBy`` sits
    (``managed_by``, a path), the value its own operator answers to (``operator``: Kueue
    ``CanDefaultManagedBy`` accepts unset or this), its suspend lever (``suspend``), and the
    ``status`` fields that count running pods (cleared on the manager after an eviction
    there, so the manager's quota is released). ``job_rules``: batch/v1 Job's own copy rules
    (``remote_job``, ``job_status_to_mirror``); other kinds copy their spec as it is and
    mirror the worker's whole status (Kueue's JobSet adapter). ``prune``: what else the
    kind's adapter removes from the copy, in place (a TrainJob: Kueue's runtime patch)."""

    group: str
    version: str
    plural: str
    kind: str
    managed_by: tuple[str, ...]
    operator: str
    suspend: tuple[str, ...]
    running_status: tuple[str, ...]
    job_rules: bool = False
    prune: Callable[[Obj], None] | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def takes(self, api_version: str, kind: str) -> bool:
        """Whether an object (or ownerReference) of ``api_version``/``kind`` is this kind."""
        return kind == self.kind and api_version == self.api_version

    def managed_by_of(self, obj: Mapping[str, Any]) -> str:
        """The object's ``managedBy`` ("" when unset)."""
        cur: Any = obj
        for key in self.managed_by:
            cur = cur.get(key) if isinstance(cur, Mapping) else None
        return cur if isinstance(cur, str) else ""

    def can_default_managed_by(self, obj: Mapping[str, Any]) -> bool:
        """Kueue ``CanDefaultManagedBy``: ``managedBy`` unset or the kind's own operator's."""
        return self.managed_by_of(obj) in ("", self.operator)

    def not_managed_message(self, obj: Mapping[str, Any]) -> str | None:
        """Why the dispatch is refused (Kueue ``IsJobManagedByKueue``'s message), or None when
        ``managedBy`` is ``kueue.x-k8s.io/multikueue``."""
        got = self.managed_by_of(obj)
        if got == MULTIKUEUE_CONTROLLER:
            return None
        # Kueue's adapters say spec.managedBy, the kubeflowjob one (spec.runPolicy.managedBy)
        # too; its MPIJob adapter names the path.
        where = ".".join(self.managed_by) if self.kind == "MPIJob" else "spec.managedBy"
        return (f"The owner is not managed by Kueue: Expecting {where} to be "
                f'"{MULTIKUEUE_CONTROLLER}" not "{got}"')

    def remote(self, local: Mapping[str, Any], origin: str, workload: str) -> Obj:
        """The copy created on the worker that won (Kueue's adapter ``SyncJob``): metadata
        cloned with labels ``kueue.x-k8s.io/prebuilt-workload-name: <workload>`` and the
        origin label, ``spec`` copied without ``managedBy`` (the worker's operator runs it)
        and suspended (the worker's Kueue starts it). batch/v1 Job: ``remote_job``."""
        if self.job_rules:
            return remote_job(local, origin, workload)
        meta = _clone_meta(local.get("metadata") or {}, origin)
        meta["labels"][PREBUILT_LABEL] = workload
        (meta.get("annotations") or {}).pop(START_RECORD, None)  # as ``remote_job``
        out = {"apiVersion": self.api_version, "kind": self.kind, "metadata": meta,
               "spec": copy.deepcopy(local.get("spec") or {})}
        _pop_path(out, self.managed_by)
        _set_path(out, self.suspend, True)
        if self.prune is not None:
            self.prune(out)
        return out

    def status_to_mirror(self, local: Mapping[str, Any], remote: Mapping[str, Any]
                         ) -> Obj | None:
        """The merge patch of ``status`` making the manager's object's the worker's, or None
        when equal (batch/v1 Job: ``job_status_to_mirror``; other kinds always, as Kueue)."""
        if self.job_rules:
            return job_status_to_mirror(local, remote)
        return merge_patch(local.get("status") or {}, remote.get("status") or {}) or None


def _pop_path(obj: Obj, path: tuple[str, ...]) -> None:
    cur: Any = obj
    for key in path[:-1]:
        cur = cur.get(key) if isinstance(cur, dict) else None
    if isinstance(cur, dict):
        cur.pop(path[-1], None)


def _set_path(obj: Obj, path: tuple[str, ...], value: Any) -> None:
    cur = obj
    for key in path[:-1]:
        nxt = cur.get(key)
        if not isinstance(nxt, dict):
            nxt = cur[key] = {}
        cur = nxt
    cur[path[-1]] = value


BATCH_JOB = Adapter("batch", "v1", "jobs", "Job", ("spec", "managedBy"),
                    "kubernetes.io/job-controller", ("spec", "suspend"),
                    ("active", "ready", "terminating"), job_rules=True)
JOBSET = Adapter("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", ("spec", "managedBy"),
                 "jobset.sigs.k8s.io/jobset-controller", ("spec", "suspend"),
                 ("replicatedJobsStatus",))


def _kubeflow(kind: str, plural: str, version: str = "v1",
              operator: str = "kubeflow.org/training-operator") -> Adapter:
    """Kueue v0.17.1 ``kubeflowjob_multikueue_adapter.go``: ``spec.runPolicy.managedBy``,
    lever ``spec.runPolicy.suspend``, status copied whole (``replicaStatuses`` count the
    running pods). training-operator v1.9.3 leaves a job whose managedBy is not
    ``kubeflow.org/training-operator`` alone; mpi-operator v0.8.0 likewise for
    ``kubeflow.org/mpi-operator``."""
    return Adapter("kubeflow.org", version, plural, kind, ("spec", "runPolicy", "managedBy"),
                   operator, ("spec", "runPolicy", "suspend"), ("replicaStatuses",))


KUBEFLOW = (_kubeflow("PyTorchJob", "pytorchjobs"), _kubeflow("TFJob", "tfjobs"),
            _kubeflow("XGBoostJob", "xgboostjobs"), _kubeflow("PaddleJob", "paddlejobs"),
            _kubeflow("JAXJob", "jaxjobs"),
            _kubeflow("MPIJob", "mpijobs", "v2beta1", "kubeflow.org/mpi-operator"))
KUBERAY_OPERATOR = "ray.io/kuberay-operator"


def _ray(kind: str, plural: str, suspend: tuple[str, ...],
         running_status: tuple[str, ...]) -> Adapter:
    """Kueue v0.17.1 ``jobs/ray/ray_multikueue_adapter.go`` (RayJob, RayCluster, RayService):
    ``spec.managedBy``, metadata cloned with the prebuilt and origin labels, ``spec`` copied
    with ``managedBy`` removed, the worker's whole ``status`` copied back. KubeRay v1.6.0's
    CRDs allow ``spec.managedBy`` to be only ``ray.io/kuberay-operator`` or
    ``kueue.x-k8s.io/multikueue`` and make it immutable (so it is defaulted at create only),
    and its controllers skip an object whose ``managedBy`` is set to anything but
    ``ray.io/kuberay-operator`` (``utils.ManagedByExternalController``). ``running_status``:
    what the kind's ``active_pods`` reads in ``app.integrations.ray`` (a RayJob's
    deployment status, a RayCluster's ``state``, a RayService's ``Ready`` condition)."""
    return Adapter("ray.io", "v1", plural, kind, ("spec", "managedBy"), KUBERAY_OPERATOR,
                   suspend, running_status)


RAY = (_ray("RayJob", "rayjobs", ("spec", "suspend"),
            ("jobDeploymentStatus", "rayClusterStatus")),
       _ray("RayCluster", "rayclusters", ("spec", "suspend"),
            ("state", "readyWorkerReplicas", "availableWorkerReplicas")),
       _ray("RayService", "rayservices", ("spec", "rayClusterConfig", "suspend"),
            ("conditions",)))
# Kueue's manager of a TrainJob's runtime patch (``spec.runtimePatches[].manager``, trainer
# v2.2.0), where the admission's scheduling goes (app.integrations.trainjob).
TRAINJOB_PATCH_MANAGER = "kueue.x-k8s.io/manager"


def _without_kueue_runtime_patch(trainjob: Obj) -> None:
    """Remove Kueue's runtime patch from a TrainJob copy (Kueue v0.17.1
    ``trainjob_multikueue_adapter.go``: "so the remote webhook can add its own"): a copy made
    after the manager started its TrainJob would carry the manager's flavor. Other managers'
    patches stay, in order."""
    spec = trainjob.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("runtimePatches"), list):
        return
    kept = [p for p in spec["runtimePatches"]
            if not (isinstance(p, Mapping) and p.get("manager") == TRAINJOB_PATCH_MANAGER)]
    if kept:
        spec["runtimePatches"] = kept
    else:
        del spec["runtimePatches"]


# Kueue v0.17.1 ``jobs/trainjob/trainjob_multikueue_adapter.go`` (Kubeflow Trainer v2.2.0):
# ``spec.managedBy`` (the trainer's CRD defaults it to its own controller's name, allows only
# that or ``kueue.x-k8s.io/multikueue``, immutable), metadata cloned with the prebuilt and
# origin labels, ``spec`` copied without ``managedBy`` and Kueue's runtime patch, the worker's
# whole ``status`` copied back; ``status.jobsStatus`` counts the running Jobs (the TrainJob's
# ``active_pods``). Trainer v2.2.0's controller does not read ``managedBy``: a trainer on the
# manager would make the manager's TrainJob's JobSet (docs/multikueue.md).
TRAINJOB = Adapter("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob",
                   ("spec", "managedBy"), "trainer.kubeflow.org/trainjob-controller",
                   ("spec", "suspend"), ("jobsStatus",), prune=_without_kueue_runtime_patch)
# Kueue v0.17.1 ``jobs/appwrapper/appwrapper_multikueue_adapter.go`` (AppWrapper v1.2.0):
# ``spec.managedBy``, the copy as the JobSet's, the whole ``status`` copied back. AppWrapper
# v1.2.0's controller skips an AppWrapper whose ``managedBy`` is set and not
# ``workload.codeflare.dev/appwrapper-controller``. ``running_status``: the ``QuotaReserved``
# condition is what its ``active_pods`` reads; ``phase`` goes with it (a ``Failed`` phase
# without ``ResourcesDeployed`` would read as finished), and the worker's ``componentStatus``.
APPWRAPPER = Adapter("workload.codeflare.dev", "v1beta2", "appwrappers", "AppWrapper",
                     ("spec", "managedBy"), "workload.codeflare.dev/appwrapper-controller",
                     ("spec", "suspend"), ("phase", "conditions", "componentStatus"))
# The kinds MultiKueue dispatches; any other owner's Workload gets its check Rejected.
ADAPTERS: tuple[Adapter, ...] = (BATCH_JOB, JOBSET, *KUBEFLOW, *RAY, TRAINJOB, APPWRAPPER)


def adapter_for(api_version: str, kind: str) -> Adapter | None:
    """The adapter of ``api_version``/``kind`` (an object's or an ownerReference's), or None
    (Kueue: "No multikueue adapter found")."""
    return next((a for a in ADAPTERS if a.takes(api_version, kind)), None)


def job_status_to_mirror(local: Mapping[str, Any], remote: Mapping[str, Any]) -> Obj | None:
    """The JSON merge patch of ``status`` that makes the manager's Job's status the worker
    Job's (fields the worker's lacks set to null: the API server omits zero counts, and a
    left-over ``active`` on a finished Job is invalid), once the manager's Job runs (Kueue
    skips a local Job still suspended with no active pods); None when nothing differs, and
    while the worker's Job is suspended (its copy waits for quota there, or was evicted: it
    has no ``startTime``, and the API server refuses removing the ``startTime`` of the
    unsuspended manager's Job, 422). ``startTime`` is never set to null for that reason."""
    spec, status = local.get("spec") or {}, local.get("status") or {}
    if spec.get("suspend") and not status.get("active"):
        return None
    if (remote.get("spec") or {}).get("suspend"):
        return None
    patch = merge_patch(status, remote.get("status") or {})
    if patch.get("startTime", "") is None:
        del patch["startTime"]
    return patch or None


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> Obj:
    """The JSON merge patch (RFC 7386) turning object ``old`` into ``new``: changed values,
    nested objects diffed the same way, keys ``new`` lacks set to null (an empty object in
    ``new`` clears the keys of ``old``'s, which ``{}`` alone would not). ``{}`` when equal."""
    out: Obj = {}
    for k, v in new.items():
        was = old.get(k)
        if isinstance(v, Mapping) and isinstance(was, Mapping):
            sub = merge_patch(was, v)
            if sub:
                out[k] = sub
        elif was != v or k not in old:
            out[k] = copy.deepcopy(v)
    out.update({k: None for k in old if k not in new})
    return out


def worker_lost(ready_since: float | None, now: float, timeout: float) -> bool:
    """Whether a Workload whose check has been Ready since ``ready_since`` (seconds since the
    epoch; None: unknown, never lost) and whose worker lost its reserved copy has waited
    ``timeout`` seconds (Kueue ``workerLostTimeout``, default 15 min)."""
    return ready_since is not None and now - ready_since >= timeout


def next_nominees(clusters: Sequence[str], nominated: Sequence[str], batch: int = 3
                  ) -> list[str]:
    """The workers the Incremental dispatcher adds in its next round: up to ``batch`` of the
    config's ``clusters`` not yet ``nominated``, in name order ([] when none is left). Kueue
    v0.17.1 ``workloaddispatcher.getNextNominatedWorkers`` (batch 3, appended to
    ``status.nominatedClusterNames``)."""
    done = set(nominated)
    return sorted({c for c in clusters if c not in done})[:batch]


def round_due(started: float | None, now: float, round_seconds: float) -> bool:
    """Whether the Incremental dispatcher starts a new round: none started yet (``started``
    None) or the last started more than ``round_seconds`` ago (Kueue: 5 min,
    ``incrementalDispatcherRoundTimeout``; seconds on one clock)."""
    return started is None or now - started > round_seconds


def status_api_problem(url: str) -> str | None:
    """Why ``url`` (a MultiKueueCluster's ``pykueue.dev/status-api`` annotation) may not be
    sent the worker's status API token, or None: ``https`` only (the token travels in a
    header), a host that is an IP or a DNS name (as a kubeconfig's server), no user info,
    query or fragment."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError on a bad port
    except ValueError as exc:
        return f"not a URL: {exc}"
    if parts.scheme != "https":
        return "the status API URL must be https"
    if parts.username is not None or parts.password is not None:
        return "the status API URL must not carry user info"
    if parts.query or parts.fragment:
        return "the status API URL must have no query or fragment"
    if not _valid_host(url):
        return "untrusted status API endpoint"
    return None


@dataclass(frozen=True, slots=True)
class WorkerEta:
    """What one worker said of when its copy of a Workload would start (the soonest
    dispatcher): ``wait`` seconds from its answer (0: due now), or None with ``why`` it gave
    none (no status API, no answer, ``unknown``); ``later``: it is still computing it (asked
    again next pass, until the dispatcher's patience runs out)."""

    wait: float | None
    why: str = ""
    later: bool = False


_TRANSIENT = frozenset({"not computed yet", COMPUTING, OVERDUE})


def worker_eta(body: Any) -> WorkerEta:
    """The ``WorkerEta`` in a pykueue status API answer to ``GET /api/v1/namespaces/{ns}/
    workloads/{name}`` (``eta.waitSeconds``, ``eta.confidence``, ``eta.basis``); None (no
    answer) gives none. ``waitSeconds`` is counted from the worker's answer, so clocks need
    not agree across workers (``eta.start`` would need them to)."""
    if not isinstance(body, Mapping):
        return WorkerEta(None, "no answer")
    eta = body.get("eta")
    if not isinstance(eta, Mapping):
        return WorkerEta(None, f"no ETA (state {body.get('state', '?')})")
    wait = eta.get("waitSeconds")
    if eta.get("confidence") != UNKNOWN and isinstance(wait, int | float) \
            and not isinstance(wait, bool) and wait >= 0:
        return WorkerEta(float(wait))
    basis = str(eta.get("basis") or "unknown")
    return WorkerEta(None, basis, later=basis in _TRANSIENT)


def soonest_keep(etas: Mapping[str, WorkerEta], waited: float, patience: float
                 ) -> list[str] | None:
    """The workers that keep their copy of a Workload under the soonest dispatcher, in name
    order, or None to ask again later. ``etas``: each worker that has a copy -> what it said;
    ``waited``: seconds since the copies were sent this round; ``patience``: how long a
    worker still computing its ETA is waited for (then it counts as giving none).

    The worker with the smallest wait keeps its copy (ties: the first name); every worker
    that gives no ETA keeps its copy too (AllAtOnce for it: a Kueue worker, or a pykueue one
    that cannot say, still gets the work, so nothing stalls on a missing ETA). Without any
    ETA every worker keeps its copy. None while a worker is still computing, within
    ``patience``."""
    if waited < patience and any(e.later for e in etas.values()):
        return None
    known = {n: e.wait for n, e in etas.items() if e.wait is not None}
    keep = {n for n, e in etas.items() if e.wait is None}
    if known:
        keep.add(min(known, key=lambda n: (known[n], n)))
    return sorted(keep)


def gc_keeps(local: Mapping[str, Any] | None) -> bool:
    """Whether the garbage collection leaves a worker's copy whose manager Workload is
    ``local`` (None: gone): it exists, is not being deleted and is not Finished. Kueue's
    ``runGC`` deletes the first two; a Finished one's copies Kueue's workload reconciler
    deletes on every worker of the config once the worker's watch reports them (also after a
    worker comes back); pykueue, without those watches, deletes them here (a worker down
    when the Workload was requeued elsewhere and finished there kept its copies once back:
    follow16)."""
    if local is None or (local.get("metadata") or {}).get("deletionTimestamp"):
        return False
    finished = condition_of(local, "Finished")
    return not (finished is not None and finished.get("status") == "True")


def gc_orphans(remote_workloads: Sequence[Mapping[str, Any]], origin: str,
               local_alive: Callable[[str], bool]
               ) -> list[tuple[str, str, tuple[Adapter, str] | None]]:
    """The worker's Workloads the garbage collection deletes (Kueue v0.17.1
    ``remoteClient.runGC``): those labelled ``kueue.x-k8s.io/multikueue-origin: <origin>``
    whose manager Workload (same namespace and name) is gone or being deleted, or Finished
    (``local_alive("ns/name")`` False: ``gc_keeps``). Each as (namespace, name, its
    controller's adapter and name, None without one or of a kind without an adapter: only
    the Workload goes)."""
    out: list[tuple[str, str, tuple[Adapter, str] | None]] = []
    for wl in remote_workloads:
        meta = wl.get("metadata") or {}
        if (meta.get("labels") or {}).get(ORIGIN_LABEL) != origin:
            continue
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        if local_alive(f"{ns}/{name}"):
            continue
        owner = None
        for ref in meta.get("ownerReferences") or []:
            if ref.get("controller"):
                a = adapter_for(str(ref.get("apiVersion", "")), str(ref.get("kind", "")))
                owner = (a, str(ref.get("name"))) if a is not None else None
        out.append((ns, name, owner))
    return out


NO_WORKER = "MultiKueueNoWorker"


def no_worker_condition(reserved_since: float | None, now: float, limit: float | None,
                        nominated: Sequence[str]) -> tuple[str, str] | None:
    """(reason, message) of condition ``MultiKueueNoWorker`` True for a Workload that has held
    quota on the manager since ``reserved_since`` (s since the epoch; None: unknown) with no
    worker reserving it, once ``limit`` seconds passed (pykueue's
    ``multikueue.no_worker_timeout_seconds`` of its ClusterQueue; None: no limit, Kueue waits
    without a word); None before. The Workload keeps waiting either way."""
    if limit is None or reserved_since is None or now - reserved_since < limit:
        return None
    tried = ", ".join(nominated) or "none active"
    return ("NoWorkerReserved",
            f"No worker reserved quota for this Workload within {limit:g}s of its quota "
            f"reservation on the manager (workers nominated: {tried}); it keeps waiting")
