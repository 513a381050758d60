"""brk35 (session 35, against 3d84fce): the Pod webhook's check at CREATE of a pod made under a
queued object (``app.controllers.pod_create_check``), under the strict setup of
docs/security.md ("Keeping every unqueued pod off flavor GPUs"), with DeviceClass
``gpu.example.com`` counted as ``example.com/gpu`` (8 devices on a100-0), as the tenant
(``edit`` in its namespace). The unit twins are ``tests/unit/test_brk35_findings.py``.

H1: Job ``j`` (1 pod claiming ResourceClaimTemplate ``one``, 1 device) admitted on 1
``example.com/gpu``; the tenant creates 3 pods with ``j`` as controller, the same spec and
claim, without the Job's selector labels: all allowed (a batch Job's pods are held to its
claims, not counted), the Job controller releases them (ownerReference removed) and they run
on: 4 devices allocated to Running pods on an admission of 1 (lab, brk35).

H2: RayJob ``rj`` (head + worker group ``gpu`` of 1 claiming ``one``) admitted on 1 device;
the tenant creates RayClusters ``fake``, ``fake2``, ``fake3`` (copies of the cluster, a
controller ownerReference to ``rj``, ``suspend: true``: KubeRay makes no pod) and one pod of
podSet ``gpu`` under each: all allowed (the count is per controller uid) and Running: 4 devices
on an admission of 1; the RayJob's own worker, deleted then, stayed Pending ("cannot allocate
all claims") while the devices were taken.

H3: AppWrapper ``aw`` wrapping Job ``aw-job`` (1 one-``nvidia.com/gpu`` pod) admitted on a
queue of 1 GPU; the tenant creates 3 copies of the Job's pod with ``aw`` as their controller:
all allowed (an AppWrapper's ``direct_podsets`` is None: neither label nor count is checked;
the extender checks the size only) and Running: 4 GPUs on an admission of 1, no DRA needed.

H4: Job ``j`` (1 pod of 100m CPU, no DRA) admitted; the tenant's pod under ``j`` asking 4 of
``deviceclass.resource.kubernetes.io/gpu.example.com`` (``DRAExtendedResource``, on in the
lab's Kubernetes 1.36: the scheduler makes its claim), no ``spec.resourceClaims``: allowed
(the claims rule reads ``spec.resourceClaims`` only; the extender is called for
``nvidia.com/gpu`` only) and Running with 4 devices on an admission of none.

H5: the same RayJob, its worker running with 1 device; the tenant deletes ResourceClaimTemplate
``one`` and creates it again asking 4 devices (``edit`` may), then deletes the worker: KubeRay's
replacement (the same ``resourceClaims`` entry, so the create check's claims rule, which
compares the entries, passes it) runs with 4 devices while the ClusterQueue counts 1
(docs/dra.md lists "a template changed or recreated after admission" as not done, as in
Kueue #13842; under the strict setup it undoes the claims rule).

F1: the same RayJob; its worker deleted 1 s after KubeRay made it: the replacement is refused
("podSet gpu ... admitted for 1 pod(s) and 1 not terminal already run", the deleted pod's
ledger place) until 30 s after the first create, and made after 41.9 s (KubeRay's back-off);
a worker older than 30 s deleted the same way is replaced at once. The same with a
PyTorchJob's worker (training-operator v1.9.3): deleted 1 s after its creation, replaced
41.8 s later (2 ``FailedCreatePod`` refusals)."""

from __future__ import annotations

import copy
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.test_appwrapper import appwrapper
from tests.e2e.test_brk34b_findings import strict_dra
from tests.e2e.test_jobset import admitted, drop, tenant
from tests.e2e.test_ray_dra_gap import _devices_running, dra_rayjob
from tests.e2e.test_workload_kinds import gpu_queue
from tests.integration.test_reconciler_dra import claim_template, dra_job, queue
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402

pytestmark = pytest.mark.lab
PODSET = "kueue.x-k8s.io/podset"
EXTENDED = "deviceclass.resource.kubernetes.io/gpu.example.com"


@pytest.fixture(scope="module")
def strict_ray_dra(lab: LabHandle) -> Iterator[labmod.Lab]:
    """KubeRay, appwrapper and JobSet under ``tests/e2e/test_brk34b_findings.py``'s strict
    setup with DRA."""
    with strict_dra(lab, "kuberay", "appwrapper", "jobset") as handle:
        yield handle


def _namespace(lab: LabHandle, prefix: str) -> tuple[str, str]:
    ns, cq = f"{prefix}-{uuid.uuid4().hex[:6]}", f"{prefix}-cq-{uuid.uuid4().hex[:6]}"
    lab.create_namespace(ns)
    queue(lab, cq, ns, gpus=1)
    lab.apply(json.dumps(claim_template(ns, "one", 1)))
    return ns, cq


def _spec_of(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod``'s spec as a tenant can create it again: no node, no injected token volume."""
    spec = copy.deepcopy(pod["spec"])
    for key in ("nodeName", "hostname", "subdomain", "schedulingGates"):
        spec.pop(key, None)
    spec["volumes"] = [v for v in spec.get("volumes") or []
                       if not v["name"].startswith("kube-api-access")]
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        c["volumeMounts"] = [m for m in c.get("volumeMounts") or []
                             if not m["name"].startswith("kube-api-access")]
    return spec


def _create_under(lab: LabHandle, ns: str, name: str, owner: dict[str, Any],
                  labels: dict[str, str], spec: dict[str, Any]) -> Any:
    """As the tenant, Pod ``name`` controlled by ``owner`` (an object as read); the create's
    result (a refusal does not raise)."""
    meta = owner["metadata"]
    return lab.kubectl(*tenant(lab, ns), "create", "-f", "-", check=False, input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": ns, "labels": labels,
            "annotations": {"lab.pykueue.dev/run-duration": "1h"},
            "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                 "name": meta["name"], "uid": meta["uid"],
                                 "controller": True}]},
        "spec": spec}))


def _none_allowed(lab: LabHandle, ns: str, made: list[Any], under: str,
                  running: Callable[[LabHandle, str], int] = _devices_running,
                  what: str = "devices") -> None:
    """Every create of ``made`` refused, and no more than the 1 admitted device (``running``:
    GPUs) runs (the allowed pods waited for first, so that the count is of them running)."""
    allowed = [i for i, r in enumerate(made) if r.returncode == 0]
    if allowed:
        wait_for(lambda: running(lab, ns) >= 1 + len(allowed), 60, "the allowed pods running")
    print(f"\n{len(allowed)} of {len(made)} pods allowed under {under}; {what} running "
          f"{running(lab, ns)} on an admission of 1")
    assert not allowed, f"pods {allowed} created under {under}"
    assert running(lab, ns) <= 1


def _gpus_running(lab: LabHandle, ns: str) -> int:
    return sum(int(c["resources"].get("requests", {}).get("nvidia.com/gpu", 0))
               for p in lab.get("pods", "-n", ns)["items"]
               if p["status"].get("phase") == "Running" for c in p["spec"]["containers"])


def test_pods_under_an_admitted_batch_job_claim_no_more_dra_devices(
        lab: LabHandle, strict_ray_dra: labmod.Lab) -> None:
    """H1 (module doc): each of the tenant's 3 pods under Job ``j`` is refused, and no more
    than the 1 admitted device is allocated to running pods."""
    ns, cq = _namespace(lab, "b35-job")
    try:
        tenant(lab, ns)
        lab.apply(json.dumps(dra_job("j", ns, 1, {"resourceClaimTemplateName": "one"}, "1h")))
        wait_for(lambda: _devices_running(lab, ns) == 1, 90, "j's pod running, 1 device")
        job = lab.get("job", "j", "-n", ns)
        (pod,) = lab.get("pods", "-n", ns)["items"]
        made = [_create_under(lab, ns, f"extra{i}", job, {}, _spec_of(pod)) for i in range(3)]
        _none_allowed(lab, ns, made, "Job j")
    finally:
        drop(lab, ns, cq)


def test_a_pod_under_an_admitted_job_asks_no_dra_devices_as_an_extended_resource(
        lab: LabHandle, strict_ray_dra: labmod.Lab) -> None:
    """H4 (module doc): the tenant's pod under CPU-only Job ``j`` asking 4 devices through
    the DeviceClass's implicit extended resource is refused; no device runs."""
    ns, cq = _namespace(lab, "b35-ext")
    try:
        tenant(lab, ns)
        job = dra_job("j", ns, 1, {"resourceClaimTemplateName": "one"}, "1h")
        spec = job["spec"]["template"]["spec"]
        del spec["resourceClaims"], spec["containers"][0]["resources"]["claims"]
        lab.apply(json.dumps(job))
        (pod,) = wait_for(lambda: [p for p in lab.get("pods", "-n", ns)["items"]
                                   if p["status"].get("phase") == "Running"], 90, "j running")
        spec = _spec_of(pod)
        spec["containers"][0]["resources"] = {
            "requests": {"cpu": "100m", EXTENDED: "4"}, "limits": {EXTENDED: "4"}}
        made = _create_under(lab, ns, "ext0", lab.get("job", "j", "-n", ns), {}, spec)
        if made.returncode == 0:
            wait_for(lambda: _devices_running(lab, ns) >= 4, 60, "ext0 running, 4 devices")
        print(f"\nH4: ext0 allowed: {made.returncode == 0}; devices running "
              f"{_devices_running(lab, ns)} on an admission of none")
        assert made.returncode != 0, "ext0 created under Job j"
    finally:
        drop(lab, ns, cq)


def _rayjob(lab: LabHandle, ns: str) -> None:
    lab.kubectl(*tenant(lab, ns), "apply", "-f", "-", input=json.dumps(dra_rayjob(ns)))


def _rayjob_running(lab: LabHandle, ns: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``_rayjob`` admitted, its worker running with 1 device: its cluster and worker."""
    _rayjob(lab, ns)
    wait_for(lambda: admitted(lab, ns, "RayJob", "rj"), 60, "rj admitted")
    wait_for(lambda: _devices_running(lab, ns) == 1, 90, "rj's worker running, 1 device")
    (rc,) = lab.get("rayclusters", "-n", ns)["items"]
    (worker,) = _workers(lab, ns, rc["metadata"]["name"])
    return rc, worker


def _workers(lab: LabHandle, ns: str, cluster: str) -> list[dict[str, Any]]:
    return [p for p in lab.get("pods", "-n", ns, "-l",
                               f"ray.io/cluster={cluster},ray.io/node-type=worker")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def test_pods_under_copies_of_a_rayjobs_cluster_claim_no_more_dra_devices(
        lab: LabHandle, strict_ray_dra: labmod.Lab) -> None:
    """H2 (module doc): the pod under each of the tenant's suspended copies of ``rj``'s
    cluster is refused, and no more than the 1 admitted device runs."""
    ns, cq = _namespace(lab, "b35-ray")
    try:
        rc, worker = _rayjob_running(lab, ns)
        made = []
        for name in ("fake", "fake2", "fake3"):
            lab.kubectl(*tenant(lab, ns), "create", "-f", "-", input=json.dumps({
                "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {
                    "name": name, "namespace": ns,
                    "ownerReferences": rc["metadata"]["ownerReferences"]},
                "spec": {**copy.deepcopy(rc["spec"]), "suspend": True}}))
            fake = lab.get("raycluster", name, "-n", ns)
            made.append(_create_under(lab, ns, f"{name}-w", fake,
                                      {PODSET: worker["metadata"]["labels"][PODSET]},
                                      _spec_of(worker)))
        _none_allowed(lab, ns, made, "copies of rj's cluster")
    finally:
        drop(lab, ns, cq)


def test_gpu_pods_under_an_admitted_appwrapper_run_no_more_gpus(
        lab: LabHandle, strict_ray_dra: labmod.Lab) -> None:
    """H3 (module doc): each copy of ``aw``'s pod under ``aw`` is refused, and no more than
    the 1 admitted GPU runs."""
    ns, cq = gpu_queue(lab, "b35-aw", 1)
    try:
        tenant(lab, ns)
        lab.apply(appwrapper("aw", ns, 1))
        wait_for(lambda: _gpus_running(lab, ns) == 1, 90, "aw's pod running")
        aw = lab.get("appwrapper", "aw", "-n", ns)
        (pod,) = lab.get("pods", "-n", ns)["items"]
        made = [_create_under(lab, ns, f"x{i}", aw, {PODSET: pod["metadata"]["labels"][PODSET]},
                              _spec_of(pod)) for i in range(3)]
        _none_allowed(lab, ns, made, "AppWrapper aw", _gpus_running, "GPUs")
    finally:
        drop(lab, ns, cq)


def test_a_recreated_claim_template_runs_no_more_devices(
        lab: LabHandle, strict_ray_dra: labmod.Lab) -> None:
    """H5 (module doc): once ``one`` is recreated with 4 devices and the worker deleted,
    the recreate is refused, or KubeRay's replacement worker is refused by pykueue's Pod
    webhook (its claims take 4 devices now), or it runs with no more than 1 device."""
    ns, cq = _namespace(lab, "b35-rct")
    try:
        rc, first = _rayjob_running(lab, ns)
        as_tenant = tenant(lab, ns)
        lab.kubectl(*as_tenant, "delete", "resourceclaimtemplate", "one", "-n", ns)
        made = lab.kubectl(*as_tenant, "create", "-f", "-", check=False,
                           input=json.dumps(claim_template(ns, "one", 4)))
        after = (datetime.now(UTC) - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        lab.kubectl(*as_tenant, "delete", "pod", first["metadata"]["name"], "-n", ns,
                    "--wait=false")

        def replaced_or_refused() -> Any:
            return [p for p in _workers(lab, ns, rc["metadata"]["name"])
                    if p["metadata"]["name"] != first["metadata"]["name"]
                    and p["status"].get("phase") == "Running"] \
                or _refused_worker_event(lab, ns, after)
        seen = wait_for(replaced_or_refused, 90, "the replacement worker running, or refused")
        if isinstance(seen, dict):  # refused: its claims now take 4 devices, admitted for 1
            assert "ResourceClaimTemplates as they are now" in seen.get("message", ""), seen
        devices = _devices_running(lab, ns)
        print(f"\nH5: template recreated with 4 devices: {made.returncode == 0}; devices "
              f"running {devices} on an admission of 1")
        assert made.returncode != 0 or devices <= 1, f"{devices} devices on an admission of 1"
    finally:
        drop(lab, ns, cq)


def _refused_worker_event(lab: LabHandle, ns: str, after: str) -> dict[str, Any] | None:
    """KubeRay's event of a worker create refused by pykueue's Pod webhook, last seen at or
    after ``after`` (RFC 3339, seconds)."""
    for e in lab.get("events", "-n", ns)["items"]:
        if e.get("reason") == "FailedToCreateWorkerPod" and "vpod.pykueue.io" in e.get(
                "message", "") and (e.get("lastTimestamp") or "") >= after:
            return e
    return None


def test_a_ray_worker_deleted_soon_after_its_create_is_replaced(
        lab: LabHandle, strict_ray_dra: labmod.Lab) -> None:
    """F1 (module doc): ``rj``'s worker deleted as soon as KubeRay made it; once it is gone
    (a second later, so pykueue's Pod store shows it gone), KubeRay's replacement is not
    refused by pykueue's webhook (no ``FailedToCreateWorkerPod`` from then on)."""
    ns, cq = _namespace(lab, "b35-f1")
    try:
        _rayjob(lab, ns)
        wait_for(lambda: admitted(lab, ns, "RayJob", "rj"), 60, "rj admitted")
        cluster = wait_for(lambda: lab.get("rayclusters", "-n", ns)["items"], 60,
                           "rj's cluster")[0]["metadata"]["name"]
        (first,) = wait_for(lambda: _workers(lab, ns, cluster), 60, "rj's worker made")
        name = first["metadata"]["name"]
        lab.kubectl(*tenant(lab, ns), "delete", "pod", name, "-n", ns, "--wait=false")
        wait_for(lambda: name not in {p["metadata"]["name"]
                                      for p in lab.get("pods", "-n", ns)["items"]},
                 30, f"{name} gone")
        after = (datetime.now(UTC) + timedelta(seconds=1)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")

        def replaced_or_refused() -> Any:
            again = [p for p in _workers(lab, ns, cluster) if p["metadata"]["name"] != name]
            return again or _refused_worker_event(lab, ns, after)
        seen = wait_for(replaced_or_refused, 90, "a replacement worker, or its refusal")
        assert isinstance(seen, list), f"replacement refused: {seen.get('message')}"
    finally:
        drop(lab, ns, cq)
