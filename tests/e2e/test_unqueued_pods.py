"""Issue 31: no unqueued pod on a flavor's GPUs, with the setup docs/security.md describes
("Keeping every unqueued pod off flavor GPUs"): ``jobs.manage_jobs_without_queue_name`` on,
the Job/Pod/Deployment/StatefulSet webhooks seeing unlabelled objects (the unlabelled-jobs
overlay; ``hack/render_webhooks.py --unlabelled`` here) and
``extender.flavor_nodes_for_admitted_only`` on. Before: a bare 2-GPU Pod with the A100
flavor's nodeSelector and toleration, one with ``nodeName: a100-0`` and a Deployment's pod
ran on a100-0 with usage 0. Now they are gated (the ``nodeName`` one refused at create), and
so are an unlabelled StatefulSet's pods, as one group. Also: a relabelled
``kueue.x-k8s.io/priority-class`` moves the Workload's priority, pending and admitted; and an
unqueued Job's ``kueue.x-k8s.io/prebuilt-workload-name`` must be a Workload name."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator

import pytest

from app.wire.workload import workload_name_for_job, workload_name_for_owner
from tests.e2e.test_workload_kinds import gated, gpu_container, gpu_queue
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import scenario  # noqa: E402

pytestmark = pytest.mark.lab
MANAGED = "kueue.x-k8s.io/managed"
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture(scope="module")
def strict_pykueue(lab: LabHandle) -> Iterator[labmod.Lab]:
    """pykueue with unlabelled objects managed, its webhooks seeing them, and the extender
    keeping flavor nodes for admitted pods."""
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    labmod.pykueue_down(handle)
    scenario.prepare(handle)
    labmod.pykueue_up(handle, unlabelled=True, extra_env={
        "PYKUEUE_JOBS__MANAGE_JOBS_WITHOUT_QUEUE_NAME": "true",
        "PYKUEUE_EXTENDER__FLAVOR_NODES_FOR_ADMITTED_ONLY": "true"})
    try:
        yield handle
    finally:
        labmod.pykueue_down(handle)


def gpu_pod(name: str, ns: str, *, gpus: int = 2, **spec: object) -> dict:
    """A Pod of ``gpus`` GPUs with the A100 flavor's nodeSelector and toleration, no queue."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"nodeSelector": A100, "tolerations": TOLERATE,
                     "containers": [gpu_container(gpus)], **spec}}


def pod_workload(lab: LabHandle, ns: str, pod: dict) -> dict | None:
    name = workload_name_for_owner("Pod", "", pod["metadata"]["name"], pod["metadata"]["uid"])
    r = lab.kubectl("get", "workloads.kueue.x-k8s.io", name, "-n", ns, "-o", "json",
                    check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def reserved_message(wl: dict | None) -> str:
    for c in (wl or {}).get("status", {}).get("conditions") or []:
        if c["type"] == "QuotaReserved" and c["status"] == "False":
            return str(c.get("message", ""))
    return ""


def admitted(wl: dict | None) -> bool:
    return any(c["type"] == "Admitted" and c["status"] == "True"
               for c in (wl or {}).get("status", {}).get("conditions") or [])


def test_no_unqueued_pod_reaches_a_flavor_gpu(lab: LabHandle,
                                              strict_pykueue: labmod.Lab) -> None:
    ns, cq = gpu_queue(lab, "unqueued", 4)
    sys_pod = f"unqueued-{uuid.uuid4().hex[:6]}"
    try:
        # 1. A bare Pod with the flavor's nodeSelector and toleration: gated, its Workload
        #    waits for a LocalQueue.
        lab.apply(json.dumps(gpu_pod("bare", ns)))
        bare = lab.get("pod", "bare", "-n", ns)
        assert gated(bare) and bare["metadata"]["labels"][MANAGED] == "true"
        wait_for(lambda: "doesn't exist" in reserved_message(pod_workload(lab, ns, bare)), 30,
                 "the bare Pod's Workload pending without a LocalQueue")
        # 2. nodeName skips kube-scheduler: the gate makes the API server refuse the Pod.
        r = lab.kubectl("apply", "-f", "-", check=False,
                        input=json.dumps(gpu_pod("pinned", ns, nodeName="a100-0")))
        assert r.returncode != 0 and "schedulingGates" in r.stderr, r.stderr
        # 3. An unlabelled Deployment: its pod is gated the same way.
        lab.apply(json.dumps({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web",
                                                                          "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": gpu_pod("x", ns)["spec"]}}}))
        web = wait_for(lambda: lab.get("pods", "-n", ns, "-l", "app=web")["items"], 60,
                       "the Deployment's pod")[0]
        assert gated(web) and web["metadata"]["labels"][MANAGED] == "true"
        #    An unlabelled StatefulSet: its pods form one gated group, waiting as one.
        lab.apply(json.dumps({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "ring",
                                                                           "namespace": ns},
            "spec": {"replicas": 2, "serviceName": "ring",
                     "selector": {"matchLabels": {"app": "ring"}},
                     "template": {"metadata": {"labels": {"app": "ring"}},
                                  "spec": gpu_pod("x", ns, gpus=1)["spec"]}}}))
        ring = wait_for(lambda: lab.get("pods", "-n", ns, "-l", "app=ring")["items"], 60,
                        "the StatefulSet's first pod")[0]
        assert gated(ring) and ring["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] \
            == "statefulset-ring"
        wait_for(lambda: "doesn't exist" in reserved_message(json.loads(lab.kubectl(
            "get", "workloads.kueue.x-k8s.io", "statefulset-ring", "-n", ns, "-o", "json",
            check=False).stdout or "{}")), 30, "the StatefulSet's group Workload pending")
        # 4. A namespace pykueue does not manage (kube-system, for cluster services): the
        #    extender keeps flavor nodes for admitted pods.
        lab.apply(json.dumps(gpu_pod(sys_pod, "kube-system")))
        why = wait_for(lambda: next((c.get("message", "") for c in lab.get(
            "pod", sys_pod, "-n", "kube-system").get("status", {}).get("conditions") or []
            if c["type"] == "PodScheduled" and c["status"] == "False"), ""), 60,
            "the kube-system Pod unschedulable")
        assert "run only pods of admitted Workloads" in why, why
        # 5. Queued, the bare Pod is admitted and placed on the A100 node (the extender
        #    vouches for its own Workload).
        lab.kubectl("label", "pod", "bare", "-n", ns, "kueue.x-k8s.io/queue-name=lq")
        wait_for(lambda: admitted(pod_workload(lab, ns, bare)), 30, "bare admitted")
        placed = wait_for(lambda: (p := lab.get("pod", "bare", "-n", ns))["spec"].get(
            "nodeName") and p, 60, "bare placed")
        assert placed["spec"]["nodeName"] == "a100-0" and not gated(placed)
        running = [p["metadata"]["name"] for p in lab.get("pods", "-A")["items"]
                   if p["spec"].get("nodeName") == "a100-0"
                   and p["metadata"]["namespace"] in (ns, "kube-system")]
        assert running == ["bare"]  # 2 GPUs running, 2 admitted
    finally:
        lab.kubectl("delete", "pod", sys_pod, "-n", "kube-system", "--ignore-not-found",
                    "--wait=false")
        lab.kubectl("delete", "namespace", ns, "--wait=false")
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def test_a_relabelled_priority_class_moves_the_workloads_priority(
        lab: LabHandle, strict_pykueue: labmod.Lab) -> None:
    ns, cq = gpu_queue(lab, "relabel", 1)
    wpcs = [f"{p}-{uuid.uuid4().hex[:6]}" for p in ("low", "high")]
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
         "metadata": {"name": n}, "value": v} for n, v in zip(wpcs, (10, 1000), strict=True)]}))

    def job(name: str, label: str | None) -> dict:
        labels = {"kueue.x-k8s.io/queue-name": "lq"}
        if label:
            labels["kueue.x-k8s.io/priority-class"] = label
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": {"template": {"spec": {"restartPolicy": "Never", "tolerations": TOLERATE,
                                               "containers": [gpu_container(1)]}}}}

    def workload(name: str) -> dict:
        uid = lab.get("job", name, "-n", ns)["metadata"]["uid"]
        return lab.get("workloads.kueue.x-k8s.io", workload_name_for_job(name, uid), "-n", ns)

    try:
        lab.apply(json.dumps(job("running", wpcs[0])))
        wait_for(lambda: admitted(workload("running")), 30, "running admitted")
        lab.apply(json.dumps(job("waiting", None)))
        wait_for(lambda: reserved_message(workload("waiting")), 30, "waiting pending")
        for name in ("running", "waiting"):
            lab.kubectl("label", "job", name, "-n", ns, "--overwrite",
                        f"kueue.x-k8s.io/priority-class={wpcs[1]}")
        for name in ("running", "waiting"):
            spec = wait_for(lambda n=name: (s := workload(n)["spec"]).get("priority") == 1000
                            and s, 30, f"{name}'s Workload at priority 1000")
            assert spec["priorityClassRef"]["name"] == wpcs[1]
        assert admitted(workload("running"))  # the change of class keeps the admission
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false")
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false")
        lab.kubectl("delete", "workloadpriorityclass", *wpcs, "--wait=false")


def test_an_unqueued_jobs_prebuilt_label_must_be_a_workload_name(
        lab: LabHandle, strict_pykueue: labmod.Lab) -> None:
    """Kueue v0.17.1 checks the label's format (``ValidateLabelAsCRDName``) on every object
    its webhooks see; here they see unlabelled Jobs, which pykueue manages and whose prebuilt
    label it follows. Before: only a queued Job's was checked, so an unqueued one naming
    ``Not_A_Name`` (a valid label value, no Workload name) was stored and waited for a
    Workload that cannot exist."""
    ns = f"prebuilt-{uuid.uuid4().hex[:6]}"
    lab.create_namespace(ns)

    def job(name: str, prebuilt: str) -> str:
        return json.dumps({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {
                "name": name, "namespace": ns,
                "labels": {"kueue.x-k8s.io/prebuilt-workload-name": prebuilt}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [gpu_container(0)]}}}})

    try:
        r = lab.kubectl("apply", "-f", "-", check=False, input=job("bad", "Not_A_Name"))
        assert r.returncode != 0 and "prebuilt-workload-name" in r.stderr \
            and "DNS-1123 subdomain" in r.stderr, r.stderr
        lab.apply(job("good", "a-workload"))  # a Workload name passes
        assert lab.get("job", "good", "-n", ns)["metadata"]["labels"][
            "kueue.x-k8s.io/prebuilt-workload-name"] == "a-workload"
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false")
