"""brk34b (session 34, against b531f16): a pod whose controller ownerReference names an
admitted queued object of another kind than a batch Job (here a PyTorchJob) is held to the GPUs
of a pod of its podSet by the scheduler extender (``_beyond_workload_podset``), but only the
``nvidia.com/gpu`` count is compared, and kube-scheduler calls the extender only for pods that
request ``nvidia.com/gpu`` (``managedResources``). A tenant's pod made under the PyTorchJob's
name that claims DRA devices (a ResourceClaimTemplate of the DeviceClass pykueue counts as
``example.com/gpu``) instead is neither gated (it has a managed controller) nor seen by the
extender, so it runs beside the admitted pods on the devices of the flavor's node, under the
strict setup of docs/security.md ("Keeping every unqueued pod off flavor GPUs"), where a bare
pod with the same claim stays gated.

Lab run (brk34b): PyTorchJob ``ddp`` (Master 1 pod claiming 1 device) admitted on a queue of
1 ``example.com/gpu``; the tenant's pod ``big`` (controller: ``ddp``, 4 devices) Running on
a100-0: 5 devices allocated to running pods on an admission of 1, for the 40 s sampled. The
same pod without the ownerReference: gated (``kueue.x-k8s.io/admission``), 1 device.

Also (the documented open gap "how many such pods run is still left to the object's
operator", docs/security.md): training-operator v1.9.3 keeps pods that duplicate a replica
index (it only logs "too many pods"), so copies of an admitted worker made under the
PyTorchJob's name, each no bigger than a worker, all run: 5 GPUs Running on an admission of 2
for the 40 s sampled (3 copies of a 1-GPU worker; default settings and the strict setup
alike).

Both closed in session 35: the Pod webhook refuses at CREATE a pod under a queued object
whose DRA claims are not its podSet's, or one more than its podSet's admitted count
(``app.controllers.pod_create_check``)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.e2e.test_jobset import QUEUE, drop, gpu_queue, tenant
from tests.e2e.test_kubeflow import admitted, pytorchjob, running_pods, template
from tests.e2e.test_ray import webhook_removed
from tests.e2e.test_ray_dra_gap import _devices_running
from tests.integration.test_operators import operators_running
from tests.integration.test_reconciler_dra import CLASS, GPU, claim_template, queue
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import scenario  # noqa: E402

pytestmark = pytest.mark.lab
# docs/security.md's strict setup, with DeviceClass gpu.example.com counted as example.com/gpu.
STRICT_DRA_ENV = {
    "PYKUEUE_RESOURCES__DEVICE_CLASS_MAPPINGS": json.dumps(
        [{"name": GPU, "deviceClassNames": [CLASS]}]),
    "PYKUEUE_JOBS__MANAGE_JOBS_WITHOUT_QUEUE_NAME": "true",
    "PYKUEUE_EXTENDER__FLAVOR_NODES_FOR_ADMITTED_ONLY": "true"}


@contextmanager
def strict_dra(lab: LabHandle, *operators: str) -> Iterator[labmod.Lab]:
    """``operators`` (skipped when one is not built), the lab's DeviceClass and ResourceSlices, and
    pykueue counting them, with unlabelled objects managed, its webhooks seeing them, and the
    extender keeping flavor nodes for admitted pods (docs/security.md's strict setup)."""
    with operators_running(lab, list(operators)) as (running, _):
        if missing := set(operators) - running:
            pytest.skip(f"{', '.join(sorted(missing))} not built: run `make operators`")
        handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
        lab.lab_cmd("dra")
        for step in (labmod.pykueue_down, scenario.prepare):
            step(handle)
        labmod.pykueue_up(handle, unlabelled=True, extra_env=STRICT_DRA_ENV)
        try:
            yield handle
        finally:
            labmod.pykueue_down(handle)


@pytest.fixture(scope="module")
def strict_dra_pykueue(lab: LabHandle) -> Iterator[labmod.Lab]:
    """The training-operator under ``strict_dra``."""
    with strict_dra(lab, "training-operator") as handle:
        yield handle


def _make_under(lab: LabHandle, ns: str, name: str, uid: str, meta: dict, spec: dict
                ) -> subprocess.CompletedProcess[str]:
    """As the tenant, Pod ``name`` with PyTorchJob ``ddp`` (``uid``) as its controller,
    ``meta``'s labels and annotations and ``spec``; the create's result (a refusal does
    not raise)."""
    return lab.kubectl(*tenant(lab, ns), "create", "-f", "-", check=False, input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": ns, "labels": meta.get("labels") or {},
            "annotations": meta.get("annotations") or {},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                 "name": "ddp", "uid": uid, "controller": True}]},
        "spec": spec}))


def _claiming(claim: str) -> dict:
    """A pod template of one 100m-CPU container claiming ResourceClaimTemplate ``claim``."""
    t = template(0, name="pytorch")
    t["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"},
                                               "claims": [{"name": "gpus"}]}
    t["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": claim}]
    return t


def test_a_pod_under_an_admitted_pytorchjob_claims_no_more_dra_devices(
        lab: LabHandle, strict_dra_pykueue: labmod.Lab) -> None:
    """PyTorchJob ``ddp`` (Master: 1 pod claiming 1 device) admitted on 1 example.com/gpu;
    the tenant creates pod ``big`` with ``ddp`` as its controller claiming 4 devices: the
    Pod webhook refuses it (``pod_create_check``: its claims are not its podSet's), and no
    more than the 1 admitted device is allocated to running pods."""
    ns, cq = f"b34b-dra-{uuid.uuid4().hex[:6]}", f"b34b-dra-cq-{uuid.uuid4().hex[:6]}"
    lab.create_namespace(ns)
    queue(lab, cq, ns, gpus=1)
    try:
        lab.apply(json.dumps(claim_template(ns, "one", 1)))
        lab.apply(json.dumps(claim_template(ns, "four", 4)))
        lab.apply(json.dumps({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "ddp", "namespace": ns, "labels": {QUEUE: "lq"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {
                "replicas": 1, "restartPolicy": "OnFailure", "template": _claiming("one")}}}}))
        admitted(lab, ns, "PyTorchJob", "ddp")
        wait_for(lambda: _devices_running(lab, ns) == 1, 90, "ddp's master running, 1 device")
        (master,) = lab.get("pods", "-n", ns)["items"]
        uid = lab.get("pytorchjob", "ddp", "-n", ns)["metadata"]["uid"]
        spec = _claiming("four")["spec"]
        spec["nodeSelector"] = master["spec"].get("nodeSelector") or {}
        spec["tolerations"] = master["spec"].get("tolerations") or []
        made = _make_under(lab, ns, "big", uid,
                           {"labels": {"kueue.x-k8s.io/podset": "master"},
                            "annotations": {"lab.pykueue.dev/run-duration": "1h"}}, spec)
        assert made.returncode != 0, "big was created"
        assert "spec.resourceClaims: the pod claims" in made.stderr \
            and "beyond the claims of podSet master's template" in made.stderr, made.stderr
        assert _devices_running(lab, ns) <= 1
    finally:
        drop(lab, ns, cq)


def _running_ddp(lab: LabHandle, ns: str) -> tuple[dict, str, dict]:
    """PyTorchJob ``ddp`` (Master 1 + Worker 1, 1 GPU each) created in ``ns``, admitted and
    running: (its worker pod, the PyTorchJob's uid, the worker's spec without what the
    scheduler and the operator set per pod)."""
    lab.apply(pytorchjob("ddp", ns, 1))
    admitted(lab, ns, "PyTorchJob", "ddp")
    worker = next(p for p in running_pods(lab, ns, 2)
                  if p["metadata"]["labels"].get("kueue.x-k8s.io/podset") == "worker")
    uid = lab.get("pytorchjob", "ddp", "-n", ns)["metadata"]["uid"]
    spec = copy.deepcopy(worker["spec"])
    for key in ("nodeName", "hostname", "subdomain"):
        spec.pop(key, None)
    return worker, uid, spec


def test_copies_of_an_admitted_pytorchjobs_worker_run_no_more_gpus(
        lab: LabHandle, strict_dra_pykueue: labmod.Lab) -> None:
    """PyTorchJob ``ddp`` (Master 1 + Worker 1, 1 GPU each) admitted on 2 GPUs; the tenant
    makes 3 copies of its worker pod (labels, spec, the PyTorchJob as controller), each no
    bigger than a worker, so ``_beyond_workload_podset`` passes them: the Pod webhook
    refuses each (``pod_create_check``: podSet worker is admitted for 1 pod, which runs)."""
    ns, cq = gpu_queue(lab, "b34b-count", 2)
    try:
        worker, uid, spec = _running_ddp(lab, ns)
        for i in range(3):
            made = _make_under(lab, ns, f"copy{i}", uid, worker["metadata"], spec)
            assert made.returncode != 0, f"copy{i} was created"
            assert "podSet worker of PyTorchJob" in made.stderr \
                and "is admitted for 1 pod(s)" in made.stderr, made.stderr
        assert len(running_pods(lab, ns, 2)) == 2
    finally:
        drop(lab, ns, cq)


def test_copies_made_behind_the_webhooks_back_are_deleted(
        lab: LabHandle, strict_dra_pykueue: labmod.Lab) -> None:
    """The reconciler's backstop of the count (``JobReconciler._delete_excess``; the Pod
    webhook's count is each pykueue replica's own, and is not called while unregistered):
    PyTorchJob ``ddp`` (Master 1 + Worker 1, 1 GPU each) admitted on 2 GPUs; with the
    Pod webhook unregistered the tenant makes 2 copies of its worker; both are deleted
    (event ``DeletedExcessPods``) and the admitted worker runs on."""
    ns, cq = gpu_queue(lab, "b34b-excess", 2)
    try:
        worker, uid, spec = _running_ddp(lab, ns)
        with webhook_removed(lab, "vpod.pykueue.io"):
            for i in range(2):
                made = _make_under(lab, ns, f"copy{i}", uid, worker["metadata"], spec)
                assert made.returncode == 0, made.stderr

        def copies_left() -> list[str]:
            return [p["metadata"]["name"] for p in lab.get("pods", "-n", ns)["items"]
                    if p["metadata"]["name"].startswith("copy")
                    and not p["metadata"].get("deletionTimestamp")]
        wait_for(lambda: copies_left() == [], 60, "the copies deleted")
        reasons = [e.get("reason") for e in lab.get("events", "-n", ns)["items"]]
        assert "DeletedExcessPods" in reasons, reasons
        alive = lab.get("pod", worker["metadata"]["name"], "-n", ns)
        assert not alive["metadata"].get("deletionTimestamp") \
            and alive["status"].get("phase") == "Running"
    finally:
        drop(lab, ns, cq)
