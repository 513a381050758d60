"""Kubeflow's training jobs as job kinds (Kueue ``pkg/controller/jobs/kubeflow``: the shared
``kubeflowjob`` and one folder per kind, kueue-integrations.md 6.1 and 6.2): PyTorchJob, TFJob,
XGBoostJob, PaddleJob and JAXJob (``kubeflow.org/v1``, training-operator), and MPIJob
(``kubeflow.org/v2beta1``, mpi-operator), which has the same shape.

PodSets: one per replica type present in ``spec.<kind>ReplicaSpecs``, in the kind's fixed order
(PyTorchJob, XGBoostJob, PaddleJob ``Master, Worker``; TFJob ``Chief, Master, PS, Worker,
Evaluator``; JAXJob ``Worker``; MPIJob ``Launcher, Worker``), named after it lower-cased,
``count = replicas`` (default 1). A replica type outside that order is refused (Kueue would
leave its pods out of the Workload, so they would run on no quota). Suspend lever:
``spec.runPolicy.suspend``. Finished: the condition ``Succeeded`` or ``Failed``. Active: the sum
of ``status.replicaStatuses[*].active``. Pods ready (waitForPodsReady): the condition ``Running``
is True, which the operator sets from its pods (the training-operator once the Master or Chief
runs, or the workers when there is none; the mpi-operator once the launcher and every worker
run). Priority: ``spec.runPolicy.schedulingPolicy
.priorityClass``, else the first replica template (in order) with a ``priorityClassName``.
Start and stop: ``app.integrations.templated`` (each podSet's flavor into its replica type's
``template``); the operators re-read the templates when they create pods after a resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.core.multikueue import adapter_for
from app.integrations.crdrules import CrdRules
from app.integrations.framework import controlled_by, job_finished
from app.integrations.templated import Template, TemplatedKind
from app.kube.client import Resource
from app.wire.fields import WorkloadSpecError, integer, mapping, string
from app.wire.owners import controller_of_object

if TYPE_CHECKING:
    from app.kube.context import Context

GROUP = "kubeflow.org"
SUSPEND = ("spec", "runPolicy", "suspend")
# mpi-operator v0.8.0 (``defaultLabels``) labels the launcher's pods with this role.
ROLE_LABEL = "training.kubeflow.org/job-role"
# training-operator v1.9.3 (``GenLabels``) and mpi-operator v0.8.0 (``defaultLabels``) label
# every pod they make with the operator's name too.
OPERATOR_LABEL = "training.kubeflow.org/operator-name"


class KubeflowJob(TemplatedKind):
    """One Kubeflow job kind (module doc): ``kind``, its ``plural``, the ``field`` under
    ``spec`` holding its replica specs, the replica types in Kueue's ``order``, the API
    ``version``; ``rules``: its webhook's (``app.integrations.crdrules``, lever
    ``spec.runPolicy.suspend``; what cannot have a Workload, e.g. an unknown replica type, is
    refused at create)."""

    api_group = GROUP
    suspend = SUSPEND
    # training-operator v1.9 and mpi-operator v0.8 label every pod with the job's name (no
    # uid label: a pod's controller ownerReference gives it while the job exists).
    pod_labels = ("training.kubeflow.org/job-name", "")
    # training-operator v1.9.3 (``reconcile cancelled ... has been deleted``) and mpi-operator
    # v0.8.0 (``for mpi job that is terminating, just return``) skip a job being deleted.
    ignored_once_deleted = True

    def __init__(self, kind: str, plural: str, field: str, order: tuple[str, ...],
                 version: str = "v1") -> None:
        self.kind = kind
        self.key = kind.lower()
        self.resource = Resource(GROUP, version, plural, kind)
        self.field = field
        self.order = order
        # mpi-operator v0.8.0 runs an MPIJob's launcher through a batch Job, which it makes
        # again from the launcher template when it is deleted (``syncHandler``: no launcher
        # found, ``newLauncherJob``) and syncs only in scheduling fields on resume
        # (``syncLauncherSchedulingDirectives``).
        self.runs_batch_jobs = self.remakes_deleted_child_jobs = "Launcher" in order
        self.rules = CrdRules(GROUP, version, plural, kind, SUSPEND, extra_create=self.spec_errors,
                              multikueue=adapter_for(f"{GROUP}/{version}", kind))

    def templates(self, obj: Mapping[str, Any]) -> list[Template]:
        """One per replica type present, in ``order``. Raises ``WorkloadSpecError``."""
        where = f"spec.{self.field}"
        specs = mapping(mapping(obj.get("spec"), "spec", required=True).get(self.field), where,
                        required=True)
        unknown = sorted(str(k) for k in specs if k not in self.order)
        if unknown:
            raise WorkloadSpecError(where, f"replica type(s) {', '.join(unknown)} unknown: a "
                                    f"{self.kind} has {', '.join(self.order)}")
        out = []
        for rtype in self.order:
            if rtype not in specs:
                continue
            spec = mapping(specs[rtype], f"{where}.{rtype}", required=True)
            count = integer(spec.get("replicas"), f"{where}.{rtype}.replicas", default=1,
                            minimum=0)
            out.append(Template(rtype.lower(), count, ("spec", self.field, rtype, "template"),
                                rtype))
        return out

    def direct_podsets(self, obj: Mapping[str, Any]) -> frozenset[str] | None:
        """Every replica type's podSet but an MPIJob's launcher (a batch Job's pod):
        training-operator v1.9.3 and mpi-operator v0.8.0 make the others' pods controlled
        by the job, ``replicas`` of each. Raises ``WorkloadSpecError``."""
        return frozenset(t.name for t in self.templates(obj) if t.name != "launcher")

    def child_jobs(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """MPIJob: its launcher, the Job ``<name>-launcher`` (mpi-operator v0.8.0
        ``newLauncherJob``), with the ``launcher`` podSet's count; the training-operator's
        kinds make no Job. Raises ``WorkloadSpecError``."""
        return self._podset_child(obj, "launcher", "-launcher") if "Launcher" in self.order \
            else {}

    def child_job_sized_by(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> Any:
        """MPIJob: the launcher's pod template for its Job ``<name>-launcher`` (mpi-operator
        v0.8.0 makes it from ``mpiReplicaSpecs.Launcher.template``), None for any other Job
        and for the training-operator's kinds. Raises ``WorkloadSpecError``."""
        return self._podset_child_template(obj, job, "launcher", "-launcher") \
            if "Launcher" in self.order else None

    def child_job_podset(self, obj: Mapping[str, Any], job: Mapping[str, Any]) -> str | None:
        """MPIJob: ``launcher`` for its Job ``<name>-launcher``, else None. Raises
        ``WorkloadSpecError``."""
        return self._podset_child_name(obj, job, "launcher", "-launcher") \
            if "Launcher" in self.order else None

    def runs_pods_through(self, ctx: Context, job: Mapping[str, Any] | None,
                          pod: Mapping[str, Any], name: str, uid: str, *,
                          owner_gone: bool = False) -> bool:
        """MPIJob: its launcher, the Job ``<name>-launcher`` that mpi-operator v0.8.0
        (``newLauncherJob``) makes controlled by the MPIJob (and uses only while it is:
        ``getLauncherJob``), its pods labelled ``training.kubeflow.org/job-role: launcher``;
        gone (``job`` None), the Job of that name the pod's controller reference names.
        The training-operator's kinds run every pod themselves: none."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if "Launcher" not in self.order or labels.get(ROLE_LABEL) != "launcher":
            return False
        if job is None:
            ref = controller_of_object(pod)
            return ref is not None and ref.name == f"{name}-launcher"
        return (job.get("metadata") or {}).get("name") == f"{name}-launcher" \
            and controlled_by(job, self, name, uid, owner_gone=owner_gone)

    def leaves_orphans(self, ctx: Context, pod: Mapping[str, Any], name: str,
                       uid: str) -> bool:
        """MPIJob: its launcher's pod (``training.kubeflow.org/job-role: launcher``,
        ``operator-name: mpi-operator``): mpi-operator v0.8.0 (``getLauncherJob``) makes the
        Job ``<name>-launcher`` again once it is gone (one deleted with
        ``--cascade=orphan``), and adopts no pod (a worker it does not control stops it:
        ``IsControlledBy``). The training-operator's kinds: never, as v1.9.3
        (``GetPodsForJob``, ``ClaimPods``) adopts a pod its selector takes while the job
        lives and is not being deleted."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return "Launcher" in self.order and labels.get(ROLE_LABEL) == "launcher" \
            and labels.get(OPERATOR_LABEL) == "mpi-operator"

    def selects_own_pod(self, ctx: Context | None, pod: Mapping[str, Any], name: str) -> bool:
        """Whether ``pod``, controlled by the job ``name`` itself, is one its operator deletes
        while the job is suspended. training-operator v1.9.3 (``GetPodsForJob``,
        ``CleanUpResources``) claims and deletes the pods its selector (``GenLabels``) takes:
        ``training.kubeflow.org/job-name`` and ``training.kubeflow.org/operator-name:
        <kind>-controller`` (it releases any other it controls). mpi-operator v0.8.0
        (``deleteWorkerPods``) deletes the workers by name, ``<name>-worker-<i>`` for ``i``
        below the worker count (its launcher runs through a batch Job), labelled
        ``operator-name: mpi-operator``; the job not stored (or no ``ctx``): any index."""
        meta = pod.get("metadata") or {}
        operator = str((meta.get("labels") or {}).get(OPERATOR_LABEL) or "")
        if "Launcher" not in self.order:
            return operator == f"{self.kind.lower()}-controller"
        index = str(meta.get("name") or "").removeprefix(f"{name}-worker-")
        if operator != "mpi-operator" or not index.isdigit() or str(int(index)) != index \
                or index == str(meta.get("name") or ""):
            return False
        job = None
        if ctx is not None and self.key in ctx.informers.informers:
            job = ctx.store(self.key).get(f"{meta.get('namespace', '')}/{name}")
        if job is None:
            return True
        try:
            workers = {t.name: t.count for t in self.templates(job)}.get("worker", 0)
        except WorkloadSpecError:
            return True
        return int(index) < workers

    def label_kin(self) -> tuple[Any, ...]:
        """The other Kubeflow kinds: every one labels its pods
        ``training.kubeflow.org/job-name``."""
        return tuple(k for k in KUBEFLOW_KINDS if k is not self)

    def finished(self, obj: Mapping[str, Any]) -> tuple[bool, str, str]:
        """(finished, ``Succeeded``/``Failed``, message) from those conditions."""
        return job_finished(obj, complete="Succeeded", kind=self.kind)

    def active_pods(self, obj: Mapping[str, Any]) -> int:
        """Active pods over all replica types (``status.replicaStatuses[*].active``)."""
        statuses = (obj.get("status") or {}).get("replicaStatuses") or {}
        return sum(int((s or {}).get("active") or 0) for s in statuses.values()
                   if isinstance(s, Mapping))

    def pods_ready(self, obj: Mapping[str, Any]) -> bool:
        """True when the condition ``Running`` is True (Kueue v0.17.1 ``KubeflowJob.PodsReady``
        and ``MPIJob.PodsReady``: the operator's ``JobRunning``)."""
        return any(isinstance(c, Mapping) and c.get("type") == "Running"
                   and c.get("status") == "True"
                   for c in (obj.get("status") or {}).get("conditions") or [])

    def priority_class(self, obj: Mapping[str, Any]) -> tuple[str, str]:
        """``spec.runPolicy.schedulingPolicy.priorityClass`` (read first, as Kueue)."""
        where = "spec.runPolicy.schedulingPolicy.priorityClass"
        run = mapping(mapping(obj.get("spec"), "spec").get("runPolicy"), "spec.runPolicy")
        policy = mapping(run.get("schedulingPolicy"), "spec.runPolicy.schedulingPolicy")
        return string(policy.get("priorityClass"), where), where


PYTORCHJOB = KubeflowJob("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs", ("Master", "Worker"))
TFJOB = KubeflowJob("TFJob", "tfjobs", "tfReplicaSpecs",
                    ("Chief", "Master", "PS", "Worker", "Evaluator"))
XGBOOSTJOB = KubeflowJob("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs", ("Master", "Worker"))
PADDLEJOB = KubeflowJob("PaddleJob", "paddlejobs", "paddleReplicaSpecs", ("Master", "Worker"))
JAXJOB = KubeflowJob("JAXJob", "jaxjobs", "jaxReplicaSpecs", ("Worker",))
# mpi-operator (Kueue ``pkg/controller/jobs/mpijob``, kueue-integrations.md 6.2): the same shape
# with podSets ``launcher`` then ``worker``.
MPIJOB = KubeflowJob("MPIJob", "mpijobs", "mpiReplicaSpecs", ("Launcher", "Worker"),
                     version="v2beta1")
KUBEFLOW_KINDS = (PYTORCHJOB, TFJOB, XGBOOSTJOB, PADDLEJOB, JAXJOB, MPIJOB)
