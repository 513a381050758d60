"""brk35 (session 35, against 3d84fce): the Pod webhook's check at CREATE of a pod made under a
queued object (``app.controllers.pod_create_check``), as a tenant with ``edit`` in its
namespace under the strict setup of docs/security.md. Lab twins (numbers) in
``tests/e2e/test_brk35_findings.py``.

- H1: a pod under an admitted batch Job is held to the Job's claims but not counted ("the Job
  controller counts its pods"): the Job controller trims only pods its selector matches, and
  *releases* (removes the ownerReference from) one it does not, which keeps running. A DRA-only
  pod never reaches the extender, so each copy claiming the Job's ResourceClaimTemplate runs
  (lab: 4 devices allocated to Running pods on an admission of 1).
- H2: the count is per controller uid, the admission per Workload: a RayCluster a tenant makes
  with a controller ownerReference to an admitted RayJob (suspended by KubeRay at once, as
  pykueue wants such copies) gives a fresh budget of each podSet's admitted count for pods the
  tenant makes under it (lab: 3 copies, 4 devices Running on an admission of 1).
- H3: the same for nvidia.com/gpu pods, no DRA needed: an AppWrapper's ``direct_podsets`` is
  None (the default: "not known"), so pods a tenant makes with an admitted AppWrapper as
  their controller are neither labelled nor counted, and the extender checks only their size
  (lab: an AppWrapper wrapping a Job of 1 one-GPU pod, 3 copies of its pod under the
  AppWrapper: 4 GPUs Running on an admission of 1). appwrapper v1.2.0 makes only its Pod
  components' pods controlled by the AppWrapper; a Job component's run under the Job.
- H4: DRA devices asked through the extended-resource path (``DRAExtendedResource``, on in the
  lab's Kubernetes 1.36: a container requesting ``deviceclass.resource.kubernetes.io/<class>``
  or a DeviceClass's ``extendedResourceName`` gets a claim the scheduler makes) are seen by
  neither the claims rule (``spec.resourceClaims`` only) nor the extender (``nvidia.com/gpu``
  only): under an admitted CPU-only batch Job, the tenant's pod asking 4 of
  ``deviceclass.resource.kubernetes.io/gpu.example.com`` ran with 4 devices (lab); under a
  counted kind the pod a tenant makes in place of a deleted one (the count allows it) may ask
  any number.
- F1: a pod allowed at CREATE keeps its ledger place for ``LEDGER_SECONDS`` once it has left
  the Pod store (deleted): the ledger drops a place only while the store shows the pod, so a
  pod deleted within 30 s of its creation is counted again after it is gone, and its
  operator's replacement is refused until the place lapses (lab: a Ray worker deleted 1 s
  after its creation was replaced after 41.9 s; one older than 30 s at once).
- F2 (not from 3d84fce: the strict setup's Pod rules): a SparkApplication's executor, which
  Spark 4.0 makes controlled by its driver pod (a core Pod, itself controlled by the admitted
  SparkApplication), is no managed kind's pod, so with ``manage_jobs_without_queue_name`` the
  Pod webhook gates it as a plain Pod of its own: the executors of an admitted application
  wait for a second admission (a Workload of their own, none without a queue name), though
  the application's ``executor`` podSet already counts them (``pods_make_pods``). Closed in
  session 36, with the same under the default setup (spark-operator v2.5.0 gives executors
  the application's queue-name label): ``tests/unit/test_spark_executor_admission.py``.
"""

from __future__ import annotations

from typing import Any

from app.integrations.appwrapper import KIND as APPWRAPPER
from app.integrations.batchjob.job import KIND as BATCH_JOB
from app.integrations.ray.ray import RAYCLUSTER, RAYJOB
from app.kube.context import JOB, WL
from tests.unit.test_pod_create_check import (
    NS,
    QUEUE,
    Stores,
    _pod,
    _pytorch_stores,
    _template,
    _workload,
)


def test_copies_of_an_admitted_batch_jobs_dra_pod_beyond_its_parallelism_are_refused() -> None:
    """Job ``j`` (parallelism 1, its pod claiming ResourceClaimTemplate ``one``) admitted,
    its pod running; the tenant's pods under ``j`` with the same claim and none of the Job's
    selector labels (the Job controller releases them, they keep running): refused."""
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"namespace": NS, "name": "j", "uid": "j-uid", "labels": QUEUE},
           "spec": {"parallelism": 1, "completions": 1, "template": _template(),
                    # What the API server sets (the Job controller labels its pods so).
                    "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "j-uid"}}}}
    s = Stores({JOB: [job], WL: [_workload(BATCH_JOB, job, {"main": (1, _template())})]})
    owner = ("batch/v1", "Job", "j", "j-uid")
    own = _pod("j-0", "main", owner=owner)
    own["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = "j-uid"
    assert s.check.errors(own) == []
    s.add_pod(own)
    extra = _pod("extra0", None, owner=owner)
    extra["metadata"]["labels"] = {}
    assert s.check.errors(extra), "a second pod claiming devices under a Job admitted for 1"


def _ray_stores() -> tuple[Stores, dict[str, Any]]:
    """RayJob ``rj`` (head + worker group ``gpu`` of 1, the worker claiming ``one``) admitted,
    its cluster ``rj-abc`` (KubeRay's, named in ``status.rayClusterName``) and ``fake``, a
    suspended copy the tenant made with a controller ownerReference to ``rj``."""
    head, worker = _template(None), _template()
    cluster_spec = {"headGroupSpec": {"rayStartParams": {}, "template": head},
                    "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "minReplicas": 0,
                                          "maxReplicas": 1, "rayStartParams": {},
                                          "template": worker}]}
    rj = {"apiVersion": "ray.io/v1", "kind": "RayJob",
          "metadata": {"namespace": NS, "name": "rj", "uid": "rj-uid", "labels": QUEUE},
          "spec": {"entrypoint": "x", "rayClusterSpec": cluster_spec},
          "status": {"rayClusterName": "rj-abc"}}
    ref = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "uid": "rj-uid",
            "controller": True}]
    real = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"namespace": NS, "name": "rj-abc", "uid": "abc-uid",
                         "ownerReferences": ref}, "spec": cluster_spec}
    fake = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"namespace": NS, "name": "fake", "uid": "fake-uid",
                         "ownerReferences": ref}, "spec": {**cluster_spec, "suspend": True}}
    wl = _workload(RAYJOB, rj, {"head": (1, head), "gpu": (1, worker)})
    s = Stores({RAYJOB.key: [rj], RAYCLUSTER.key: [real, fake], WL: [wl]})
    s.add_pod(_pod("rj-abc-gpu-worker-x", "gpu",
                   owner=("ray.io/v1", "RayCluster", "rj-abc", "abc-uid")))
    return s, fake


def test_a_pod_under_a_tenants_copy_of_a_rayjobs_cluster_is_refused() -> None:
    """The RayJob's worker podSet is admitted for 1 pod, which runs under its cluster; a pod
    of that podSet (its claim) under the tenant's cluster ``fake``: refused."""
    s, _ = _ray_stores()
    pod = _pod("fake-w", "gpu", owner=("ray.io/v1", "RayCluster", "fake", "fake-uid"))
    assert s.check.errors(pod), "a second gpu worker claiming a device under RayJob rj"


def test_a_gpu_pod_under_an_admitted_appwrapper_wrapping_a_job_is_refused() -> None:
    """AppWrapper ``aw`` wrapping Job ``aw-job`` (1 one-GPU pod), admitted, its Job's pod
    running; the tenant's copy of that pod with ``aw`` as its controller: refused (no
    operator makes a pod of a Job component under the AppWrapper itself)."""
    gpu = {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    template = {"spec": {"restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "busybox", "resources": gpu}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "aw-job"},
           "spec": {"parallelism": 1, "completions": 1, "template": template}}
    aw = {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
          "metadata": {"namespace": NS, "name": "aw", "uid": "aw-uid", "labels": QUEUE},
          "spec": {"suspend": False, "components": [{"template": job}]}}
    s = Stores({APPWRAPPER.key: [aw], WL: [_workload(APPWRAPPER, aw, {"aw-0": (1, template)})]})
    jobs_pod = _pod("aw-job-x", "aw-0", claim=None,
                    owner=("batch/v1", "Job", "aw-job", "job-uid"))
    copy_ = _pod("x0", "aw-0", claim=None,
                 owner=("workload.codeflare.dev/v1beta2", "AppWrapper", "aw", "aw-uid"))
    jobs_pod["spec"] = copy_["spec"] = template["spec"]
    s.add_pod(jobs_pod)
    assert s.check.errors(copy_), "a second one-GPU pod under an AppWrapper admitted for 1"


EXTENDED = "deviceclass.resource.kubernetes.io/gpu.example.com"


def _asking_devices(pod: dict[str, Any], devices: int) -> dict[str, Any]:
    """``pod`` without ``spec.resourceClaims``, its container asking ``devices`` of the
    DeviceClass through its implicit extended resource."""
    pod["spec"].pop("resourceClaims", None)
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", EXTENDED: str(devices)}, "limits": {EXTENDED: str(devices)}}
    return pod


def test_a_pod_asking_dra_devices_as_an_extended_resource_is_held_to_its_template() -> None:
    """PyTorchJob ``ddp``'s worker podSet admitted for 2 (each claiming ``one``), one
    running: a worker asking 4 devices through the extended-resource path (no claim of its
    own) is refused, as one claiming a template of 4 is."""
    s = _pytorch_stores()
    s.add_pod(_pod("ddp-worker-0", "worker"))
    assert s.check.errors(_pod("ddp-worker-1", "worker", claim="four"))
    assert s.check.errors(_asking_devices(_pod("ddp-worker-1", "worker", claim=None), 4)), \
        "4 devices asked as an extended resource"


def test_the_replacement_of_a_pod_deleted_soon_after_its_create_is_allowed() -> None:
    """PyTorchJob ``ddp``'s worker podSet admitted for 2: both workers allowed at CREATE and
    shown by the Pod store; worker-1 is deleted 1 s later (gone from the store): its
    operator's replacement is allowed (2 pods would run, as admitted)."""
    s = _pytorch_stores()
    for name in ("ddp-worker-0", "ddp-worker-1"):
        assert s.check.errors(_pod(name, "worker")) == []
        s.add_pod(_pod(name, "worker"))
    assert s.check.errors(_pod("copy", "worker"))  # both run: the count holds
    s.now += 1
    s.remove_pod(f"{NS}/ddp-worker-1")
    assert s.check.errors(_pod("ddp-worker-1b", "worker")) == [], \
        "the deleted worker's ledger place still counts"
