"""Scheduler extender on the lab (issue 7): the real kube-scheduler, configured from
manifests/scheduler/kube-scheduler-config.yaml, calls the real extender over TLS.

The extender runs in this process (uvicorn in a thread) over an ``InMemoryExtenderState`` that
the test seeds the way the reconciler would: the lab's Nodes (as from the Node watch), the
flavors, and the Workload view of each Job. No nodeSelector is injected into the Jobs (as with
nodeSelector injection switched off), only what pykueue always adds: the flavor's tolerations
and the ``kueue.x-k8s.io/podset`` label. The Jobs are created unsuspended, so no webhook or
reconciler is involved: this checks the scheduler <-> extender contract on its own.

kube-scheduler is restarted with the extender configuration and, at the end, with the plain
one again.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from app.config import ServerSettings, Settings
from app.core.workload import Toleration
from app.extender.nodestore import InMemoryExtenderState, NodeStore
from app.extender.placement import FlavorView, PodWorkloadView
from app.main import create_app
from app.serving import uvicorn_config
from certs.pki import ensure_certs, ensure_client_cert
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
GPU_TOLERATION = Toleration(key=GPU, operator="Exists", effect="NoSchedule")
A100 = FlavorView.of("a100-flavor", {PRODUCT: "NVIDIA-A100-SXM4-80GB"}, [GPU_TOLERATION])
L4 = FlavorView.of("l4-flavor", {PRODUCT: "NVIDIA-L4"}, [GPU_TOLERATION])
WAIT_REASON = "insufficient unused quota for nvidia.com/gpu in flavor a100-flavor"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def extender(lab: LabHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        InMemoryExtenderState]:
    tmp = tmp_path_factory.mktemp("extender")
    certs = ensure_certs(tmp / "certs", hosts=["127.0.0.1"])
    client = ensure_client_cert(tmp / "certs", "scheduler", "system:kube-scheduler")
    state = InMemoryExtenderState(nodes=NodeStore(GPU), known_flavors=(A100, L4))
    for node in lab.get("nodes")["items"]:
        state.nodes.add(node)
    port = _free_port()
    # Served as `pykueue serve` serves it, answering only kube-scheduler's client certificate.
    server_settings = ServerSettings(host="127.0.0.1", port=port, cert_file=certs.cert,
                                     key_file=certs.key, client_ca_file=certs.ca_cert)
    app = create_app(Settings(controllers_enabled=False, server=server_settings))
    app.state.extender_state = state
    server = uvicorn.Server(uvicorn_config(app, server_settings, "warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 30, "the extender's HTTPS listener")
    template = (ROOT / "manifests/scheduler/kube-scheduler-config.yaml").read_text()
    assert "https://127.0.0.1:9443/scheduler" in template
    config = tmp / "kube-scheduler-config.yaml"
    config.write_text(template.replace("https://127.0.0.1:9443/scheduler",
                                       f"https://127.0.0.1:{port}/scheduler")
                      .replace("${PYKUEUE_CA_FILE}", str(certs.ca_cert))
                      .replace("${EXTENDER_CLIENT_CERT}", str(client.cert))
                      .replace("${EXTENDER_CLIENT_KEY}", str(client.key)))
    lab.lab_cmd("scheduler", "--config", str(config))
    state.scheduler_config = config  # type: ignore[attr-defined] - for the DRA test below
    try:
        yield state
    finally:
        lab.lab_cmd("scheduler", "--config",
                    str(ROOT / "manifests/scheduler/kube-scheduler-config-plain.yaml"),
                    check=False)
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def namespace(lab: LabHandle) -> Iterator[str]:
    name = f"ext-{uuid.uuid4().hex[:6]}"
    lab.create_namespace(name)
    yield name
    lab.kubectl("delete", "namespace", name, "--wait=false", check=False)


def job(namespace: str, name: str, *, pods: int = 2, gpus: int = 1,
        pykueue_labels: bool = True, claim_template: str | None = None) -> str:
    """A running batch/v1 Job whose pods request ``gpus`` GPUs each and tolerate the GPU taint
    (as pykueue injects from the flavor); no nodeSelector. With ``claim_template`` the GPUs
    come from DRA instead: each pod claims that ResourceClaimTemplate."""
    labels = {"kueue.x-k8s.io/podset": "main"} if pykueue_labels else {}
    requests = {"cpu": "100m", GPU: str(gpus)} if claim_template is None else {"cpu": "100m"}
    resources: dict[str, Any] = {"requests": requests}
    claims: dict[str, Any] = {}
    if claim_template is None:
        resources["limits"] = {GPU: str(gpus)}
    else:
        resources["claims"] = [{"name": "gpu"}]
        claims = {"resourceClaims": [{"name": "gpu",
                                      "resourceClaimTemplateName": claim_template}]}
    return json.dumps({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "main", "image": "busybox",
                                    "resources": resources}],
                    **claims,
                },
            },
        },
    })


def pods_of(lab: LabHandle, namespace: str, job_name: str) -> list[dict[str, Any]]:
    return lab.get("pods", "-n", namespace, "-l",
                   f"batch.kubernetes.io/job-name={job_name}")["items"]


def bound_nodes(lab: LabHandle, namespace: str, job_name: str, count: int) -> set[str]:
    def all_bound() -> set[str] | None:
        pods = pods_of(lab, namespace, job_name)
        nodes = {p["spec"].get("nodeName") for p in pods}
        return nodes if len(pods) == count and None not in nodes else None

    return wait_for(all_bound, 90, f"{count} pods of Job {namespace}/{job_name} bound")


@pytest.mark.parametrize(("flavor", "node"), [(A100, "a100-0"), (L4, "l4-0")],
                         ids=["a100-job-lands-only-on-a100-0", "l4-job-lands-only-on-l4-0"])
def test_admitted_job_pods_land_only_on_nodes_of_their_flavor(lab, extender, namespace,
                                                              flavor, node):
    extender.set_workload(namespace, "train", PodWorkloadView(
        f"{namespace}/job-train-abcde", True, "", {"main": (flavor,)}))
    lab.apply(job(namespace, "train", pods=3))
    assert bound_nodes(lab, namespace, "train", 3) == {node}


@pytest.mark.parametrize(("flavor", "node"), [(A100, "a100-0"), (L4, "l4-0")],
                         ids=["dra-a100-job-on-a100-0", "dra-l4-job-on-l4-0"])
def test_dra_job_pods_land_on_their_flavor_with_claims_allocated_there(lab, extender,
                                                                       namespace, flavor, node):
    """Issue 21: GPUs claimed through DRA (the lab's DeviceClass gpu.example.com, 8 devices
    on each GPU node) are pinned to the flavor's node as extended-resource GPUs are, and
    kube-scheduler allocates each pod's claim from that node's ResourceSlice."""
    # The shipped configuration calls the extender only for pods requesting nvidia.com/gpu
    # (managedResources), which DRA pods do not: for them pykueue's injected nodeSelector is
    # the fence (docs/dra.md). Here kube-scheduler calls the extender for every pod, to show
    # its rules pin DRA pods as they pin extended-resource ones.
    config = extender.scheduler_config
    every_pod = config.with_name("kube-scheduler-config-every-pod.yaml")
    text = config.read_text()
    managed = "  managedResources:\n  - name: nvidia.com/gpu\n    ignoredByScheduler: false\n"
    assert managed in text
    every_pod.write_text(text.replace(managed, ""))
    lab.lab_cmd("scheduler", "--config", str(every_pod))
    try:
        _dra_job_lands_on(lab, extender, namespace, flavor, node)
    finally:
        lab.lab_cmd("scheduler", "--config", str(config))


def _dra_job_lands_on(lab, extender, namespace, flavor, node) -> None:
    lab.lab_cmd("dra")
    lab.apply(json.dumps({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-gpus", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}}]}}}}))
    extender.set_workload(namespace, "dra", PodWorkloadView(
        f"{namespace}/job-dra-abcde", True, "", {"main": (flavor,)}))
    lab.apply(job(namespace, "dra", pods=3, claim_template="two-gpus"))
    assert bound_nodes(lab, namespace, "dra", 3) == {node}
    pools = set()
    for p in pods_of(lab, namespace, "dra"):
        (st,) = wait_for(lambda p=p: lab.get("pod", p["metadata"]["name"], "-n", namespace)
                         ["status"].get("resourceClaimStatuses"), 30, "claim status")
        claim = lab.get("resourceclaims.resource.k8s.io", st["resourceClaimName"], "-n",
                        namespace)
        pools |= {r["pool"] for r in claim["status"]["allocation"]["devices"]["results"]}
    assert pools == {node}


def test_not_admitted_job_pods_stay_pending_with_the_extender_reason(lab, extender, namespace):
    extender.set_workload(namespace, "waiting", PodWorkloadView(
        f"{namespace}/job-waiting-abcde", False, WAIT_REASON))
    lab.apply(job(namespace, "waiting", pods=1))
    expected = f"Workload {namespace}/job-waiting-abcde is not admitted: {WAIT_REASON}"

    def failed_scheduling() -> str | None:
        events = lab.get("events", "-n", namespace,
                         "--field-selector", "reason=FailedScheduling")["items"]
        return next((e["message"] for e in events if expected in e.get("message", "")), None)

    message = wait_for(failed_scheduling, 90, "a FailedScheduling event with the reason")
    assert "node(s) withheld by pykueue" in message
    assert all(not p["spec"].get("nodeName") for p in pods_of(lab, namespace, "waiting"))


def test_unmanaged_job_pods_schedule_as_before(lab, extender, namespace):
    lab.apply(job(namespace, "plain", pods=2, pykueue_labels=False))
    assert bound_nodes(lab, namespace, "plain", 2) <= {"a100-0", "l4-0"}
