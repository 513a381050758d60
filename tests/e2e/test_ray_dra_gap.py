"""A RayJob whose workers claim DRA devices (``resources.deviceClassMappings``: DeviceClass
``gpu.example.com`` counted as ``example.com/gpu``, the lab's ResourceSlices: 8 devices on
a100-0): the tenant points the worker template of its admitted RayJob's RayCluster at a
ResourceClaimTemplate of more devices: refused, or set back and stopped (the unit twin is
``tests/unit/test_ray_cluster_checks.py``)."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_jobset import QUEUE, admitted, drop, tenant
from tests.e2e.test_ray import kuberay, rayjob  # noqa: F401 - fixture
from tests.e2e.test_workload_kinds import live
from tests.integration.test_reconciler_dra import CLASS, FLAVOR, GPU, claim_template, queue
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import scenario  # noqa: E402

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def dra_pykueue(lab: LabHandle, kuberay: set[str]) -> Iterator[labmod.Lab]:  # noqa: F811
    """The lab's DeviceClass and ResourceSlices, and pykueue counting them."""
    if "kuberay" not in kuberay:
        pytest.skip("kuberay v1.6.0 not built: run `make operators`")
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    lab.lab_cmd("dra")
    labmod.pykueue_down(handle)
    scenario.prepare(handle)
    labmod.pykueue_up(handle, extra_env={"PYKUEUE_RESOURCES__DEVICE_CLASS_MAPPINGS": json.dumps(
        [{"name": GPU, "deviceClassNames": [CLASS]}])})
    try:
        yield handle
    finally:
        labmod.pykueue_down(handle)


def _devices_running(lab: LabHandle, ns: str) -> int:
    """Devices allocated to the namespace's claims whose pods run (reserved for a live pod)."""
    out = 0
    for c in lab.get("resourceclaims.resource.k8s.io", "-n", ns)["items"]:
        if (c.get("status") or {}).get("reservedFor"):
            out += len(((c["status"].get("allocation") or {}).get("devices") or {})
                       .get("results") or [])
    return out


def dra_rayjob(ns: str) -> dict[str, Any]:
    """RayJob ``rj`` queued in ``lq``: a head (1 CPU) and worker group ``gpu`` of 1 pod
    claiming ResourceClaimTemplate ``one``; its submitter runs for an hour."""
    job = json.loads(rayjob("rj", ns, 1))
    job["metadata"]["labels"] = {QUEUE: "lq"}
    job["spec"]["submitterPodTemplate"] = {
        "metadata": {"annotations": {"lab.pykueue.dev/run-duration": "1h"}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "ray-job-submitter", "image": "rayproject/ray:2.46.0",
            "resources": {"requests": {"cpu": "500m"}}}]}}
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    worker["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    worker["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "one"}]
    return job


def test_a_rayjob_clusters_claim_switched_to_more_devices_does_not_run(
        lab: LabHandle, dra_pykueue: labmod.Lab) -> None:
    """RayJob ``rj``: head (1 CPU) + 1 worker claiming 1 device, admitted on a queue of 4
    ``example.com/gpu``. The tenant adds ResourceClaimTemplate ``four`` (4 devices), points
    the cluster's worker template at it: refused while the cluster carries the queue label;
    with the label removed first, accepted, and once the worker pod is deleted the template
    is set back and the cluster stopped: never 4 devices allocated to a running worker."""
    ns, cq = f"b11-dra-{uuid.uuid4().hex[:6]}", f"b11-dra-cq-{uuid.uuid4().hex[:6]}"
    lab.create_namespace(ns)
    queue(lab, cq, ns, gpus=4)
    try:
        as_tenant = tenant(lab, ns)
        lab.apply(json.dumps(claim_template(ns, "one", 1)))
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=json.dumps(dra_rayjob(ns)))
        wait_for(lambda: admitted(lab, ns, "RayJob", "rj"), 60, "rj admitted")
        wait_for(lambda: _devices_running(lab, ns) == 1, 90, "rj's worker running with 1 device")
        lab.apply(json.dumps(claim_template(ns, "four", 4)))
        (rc,) = lab.get("rayclusters", "-n", ns)["items"]
        name = rc["metadata"]["name"]
        switch = ("patch", "raycluster", name, "-n", ns, "--type=json", "-p",
                  json.dumps([{"op": "replace", "value": "four", "path": "/spec/"
                               "workerGroupSpecs/0/template/spec/resourceClaims/0/"
                               "resourceClaimTemplateName"}]))
        r = lab.kubectl(*as_tenant, *switch, check=False)
        assert r.returncode != 0 and "requests" in r.stderr, "the webhook took the switch"
        # Without the queue label the webhook lets it through: the reconciler holds it.
        lab.kubectl(*as_tenant, "label", "raycluster", name, "-n", ns, f"{QUEUE}-")
        lab.kubectl(*as_tenant, *switch)
        lab.kubectl(*as_tenant, "delete", "pod", "-n", ns, "-l",
                    f"ray.io/cluster={name},ray.io/node-type=worker", "--wait=false")
        seen = [1]

        def four_or_stopped() -> bool:
            seen.append(_devices_running(lab, ns))
            return seen[-1] >= 4 or lab.get("raycluster", name, "-n", ns)["spec"].get(
                "suspend") is True
        try:
            wait_for(four_or_stopped, 90, "4 devices on a worker, or the cluster stopped")
            assert max(seen) <= 1, f"{max(seen)} devices allocated on an admission of 1"
        finally:
            pods = [p["metadata"]["name"] for p in live(lab.get("pods", "-n", ns)["items"])
                    if p["status"].get("phase") == "Running"]
            print(f"\nRayCluster claim switched to 4 devices: at most {max(seen)} devices "
                  f"allocated, admission of 1 (flavor {FLAVOR}); Running {pods}")
    finally:
        drop(lab, ns, cq)
