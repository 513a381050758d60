"""brk35b (session 35, second round, against 4a782c4): the Pod webhook's CREATE rule for pods
under a queued object (``app.controllers.pod_create_check``) under the strict setup of
docs/security.md, DeviceClass ``gpu.example.com`` counted as ``example.com/gpu`` (8 devices on
a100-0), as the tenant (``edit`` in its namespace).

H1: a pod whose controller ownerReference names a RayCluster that does not exist (name
``ghost``, a random uid), with the A100 nodeSelector, the GPU toleration and either
``spec.resourceClaims`` (ResourceClaimTemplate ``one``, 1 device) or
``deviceclass.resource.kubernetes.io/gpu.example.com: 1``: both allowed, neither gated (the
Pod webhooks' ``controlled_by`` takes any controller of a managed kind, stored or not, as
its owner's, so the pod is not queued; ``PodCreateCheck.errors`` returns [] for a controller
no store holds: "other rules' business"), and kube-scheduler never asks the extender (no
``nvidia.com/gpu``): both Running on a100-0 with 1 device each, 2 devices on no admission,
still Running and not being deleted 8 s later (the garbage collector did not remove them in
that time; a ``batch/v1`` Job ``ghost``'s pods were deleted at once). A PyTorchJob ghost was
gated only because the training-operator was not installed in that run (kind not served).
A second run with KubeRay, the training-operator and JobSet installed: pods claiming ``one``
under RayCluster ``ghost``, RayCluster ``real`` (exists, another uid), PyTorchJob ``ghost`` and
JobSet ``ghost``, each with a finalizer of the tenant's and the lab's ``stops-slowly`` (a pod
that ignores SIGTERM, ``terminationGracePeriodSeconds: 3600``): all 4 Running on a100-0 with
4 devices within 1 s; the garbage collector deleted them at 5-6 s, and they ran on with the
4 devices through the grace period (21 s sampled). Without the long grace the tenant can make
such pods again and again (about 5 s of devices each, as many at once as it likes).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_brk34b_findings import strict_dra
from tests.e2e.test_brk35_findings import _namespace
from tests.e2e.test_jobset import drop, tenant
from tests.e2e.test_ray_dra_gap import _devices_running
from tests.e2e.test_workload_kinds import TOLERATION
from tests.integration.test_reconciler_dra import A100
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
EXTENDED = "deviceclass.resource.kubernetes.io/gpu.example.com"


@pytest.fixture(scope="module")
def strict_kuberay_dra(lab: LabHandle) -> Iterator[Any]:
    """KubeRay under ``tests/e2e/test_brk34b_findings.py``'s strict setup with DRA."""
    with strict_dra(lab, "kuberay") as handle:
        yield handle


def _ghost_pod(ns: str, name: str, claims: bool) -> dict[str, Any]:
    """Pod ``name`` controlled by RayCluster ``ghost`` (no such object), asking 1 device by
    a claim (``claims``) or by the DeviceClass's extended resource."""
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    spec: dict[str, Any] = {"restartPolicy": "Never", "tolerations": [TOLERATION],
                            "nodeSelector": {"nvidia.com/gpu.product": A100},
                            "containers": [container]}
    if claims:
        spec["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "one"}]
        container["resources"] = {"requests": {"cpu": "100m"}, "claims": [{"name": "g"}]}
    else:
        container["resources"] = {"requests": {EXTENDED: "1"}, "limits": {EXTENDED: "1"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": ns,
        "annotations": {"lab.pykueue.dev/run-duration": "1h"},
        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "ghost",
                             "uid": str(uuid.uuid4()), "controller": True}]},
        "spec": spec}


def test_a_pod_under_a_raycluster_that_does_not_exist_runs_no_dra_device(
        lab: LabHandle, strict_kuberay_dra: Any) -> None:
    """H1 (module doc): each create is refused, or gated, or its pod never runs with a
    device (waited for until the pods are Running, gated, or gone)."""
    ns, cq = _namespace(lab, "b35b-gh")
    try:
        made = [lab.kubectl(*tenant(lab, ns), "create", "-f", "-", check=False,
                            input=json.dumps(_ghost_pod(ns, f"g-{kind}", kind == "claims")))
                for kind in ("claims", "ext")]
        names = {f"g-{k}" for k, r in zip(("claims", "ext"), made, strict=True)
                 if r.returncode == 0}

        def settled() -> Any:
            pods = {p["metadata"]["name"]: p for p in lab.get("pods", "-n", ns)["items"]}
            return all(n not in pods or pods[n]["spec"].get("schedulingGates")
                       or pods[n]["metadata"].get("deletionTimestamp")
                       or pods[n]["status"].get("phase") == "Running" for n in names)
        wait_for(settled, 60, "the ghost pods Running, gated or gone")
        devices = _devices_running(lab, ns)
        print(f"\nbrk35b H1: {len(names)} of 2 ghost pods created; {devices} devices "
              "allocated to running pods on no admission")
        assert devices == 0, f"{devices} DRA devices run under a RayCluster that does not exist"
    finally:
        drop(lab, ns, cq)
