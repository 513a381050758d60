"""Issue 17 e2e: a Deployment and a plain Pod queued through pykueue's real webhooks and
reconciler on the lab, landing on their flavor's GPU node; what does not fit waits gated."""

from __future__ import annotations

import json
import sys
import uuid

import pytest

from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402

pytestmark = pytest.mark.lab
GATE = "kueue.x-k8s.io/admission"
QUEUE = "kueue.x-k8s.io/queue-name"
IN_USE = "kueue.x-k8s.io/resource-in-use"



def gpu_container(gpus: int = 1) -> dict:
    return {"name": "c", "image": "busybox",
            "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                          "limits": {"nvidia.com/gpu": str(gpus)}}}


def gpu_queue(lab: LabHandle, prefix: str, gpus: int) -> tuple[str, str]:
    """A fresh namespace with LocalQueue ``lq`` to a new ClusterQueue of ``gpus`` A100s."""
    ns, cq = f"{prefix}-{uuid.uuid4().hex[:6]}", f"{prefix}-cq-{uuid.uuid4().hex[:6]}"
    lab.create_namespace(ns)
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {}, "resourceGroups": [
             {"coveredResources": ["nvidia.com/gpu"], "flavors": [
                 {"name": "a100-flavor", "resources": [
                     {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}}]}))
    return ns, cq


def pods(lab: LabHandle, ns: str, selector: str) -> list[dict]:
    return lab.get("pods", "-n", ns, "-l", selector)["items"]


def live(items: list[dict]) -> list[dict]:
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def gated(p: dict) -> bool:
    return GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []]

# The lab's pods of a Job succeed after 3 s unless they say how long they run (hack/lab).
LONG = {"annotations": {"lab.pykueue.dev/run-duration": "1h"}}
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def running_pods(lab: LabHandle, ns: str, job: str) -> int:
    """Live Pending or Running pods of Job ``job``."""
    return len([p for p in live(lab.get("pods", "-n", ns, "-l",
                                        f"batch.kubernetes.io/job-name={job}")["items"])
                if p["status"].get("phase") in ("Pending", "Running")])


def long_job(name: str, ns: str, labels: dict[str, str]) -> str:
    """A Job of one 1-GPU pod that runs an hour, with ``labels``."""
    return json.dumps({"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": name, "namespace": ns, "labels": labels},
                       "spec": {"template": {"metadata": LONG, "spec": {
                           "restartPolicy": "Never", "containers": [gpu_container()],
                           "tolerations": [TOLERATION]}}}})



def test_a_deployment_and_a_plain_pod_are_queued_on_gpus(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    ns, cq = gpu_queue(lab, "kinds", 2)
    try:
        lab.apply(json.dumps({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "serve", "namespace": ns, "labels": {QUEUE: "lq"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "serve"}},
                     "template": {"metadata": {"labels": {"app": "serve"}},
                                  "spec": {"containers": [gpu_container()]}}}}))
        # 2 of 3 fit the 2-GPU queue: they run on the A100 node, the third waits gated.
        wait_for(lambda: len([p for p in live(pods(lab, ns, "app=serve"))
                              if p["spec"].get("nodeName") == "a100-0"
                              and p["status"].get("phase") == "Running"]) == 2, 90,
                 "2 serve pods Running on a100-0")
        (waiting,) = [p for p in live(pods(lab, ns, "app=serve")) if gated(p)]
        wls = lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]
        mine = next(w for w in wls if w["metadata"]["ownerReferences"][0]["name"]
                    == waiting["metadata"]["name"])
        qr = next(c for c in mine["status"]["conditions"] if c["type"] == "QuotaReserved")
        assert qr["status"] == "False" and "nvidia.com/gpu" in qr["message"], qr
        # Scale to 1: the waiting pod goes first, then one running; quota frees.
        lab.kubectl("scale", "deployment", "serve", "-n", ns, "--replicas=1")
        wait_for(lambda: len(live(pods(lab, ns, "app=serve"))) == 1
                 and len(lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]) == 1, 90,
                 "one serve pod and one Workload left")
        # The freed GPU takes a plain Pod, gated by the webhook and then admitted.
        lab.apply(json.dumps({"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": "solo", "namespace": ns,
                                           "labels": {QUEUE: "lq", "app": "solo"}},
                              "spec": {"containers": [gpu_container()]}}))
        wait_for(lambda: (p := lab.get("pod", "solo", "-n", ns))["spec"].get("nodeName")
                 == "a100-0" and not gated(p), 90, "solo admitted onto a100-0")
        solo = lab.get("pod", "solo", "-n", ns)
        assert solo["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)


def test_a_statefulset_is_admitted_whole_or_waits_whole(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    ns, cq = gpu_queue(lab, "sts", 4)

    def statefulset(name: str, replicas: int) -> str:
        return json.dumps({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
            "spec": {"replicas": replicas, "serviceName": name,
                     "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [gpu_container()]}}}})
    try:
        # 4 x 1 A100 in a 4-GPU queue: one group Workload for 4, its pods ungated as the
        # StatefulSet creates them one by one, all on a100-0.
        lab.apply(statefulset("train", 4))
        wait_for(lambda: len([p for p in live(pods(lab, ns, "app=train"))
                              if p["spec"].get("nodeName") == "a100-0"
                              and p["status"].get("phase") == "Running"]) == 4, 120,
                 "4 train pods Running on a100-0")
        wl = lab.get("workloads.kueue.x-k8s.io", "statefulset-train", "-n", ns)
        assert wl["spec"]["podSets"][0]["count"] == 4
        # A second one does not fit: its first pod waits gated, its Workload says why.
        lab.apply(statefulset("more", 2))
        qr = wait_for(lambda: (w := lab.kubectl("get", "workloads.kueue.x-k8s.io",
                                                "statefulset-more", "-n", ns, "-o", "json",
                                                check=False)).returncode == 0
                      and (c := next((c for c in json.loads(w.stdout)["status"].get(
                          "conditions", []) if c["type"] == "QuotaReserved"), None))
                      and c["status"] == "False" and c, 60, "statefulset-more pending")
        assert "nvidia.com/gpu" in qr["message"]
        assert all(gated(p) for p in live(pods(lab, ns, "app=more")))
        # Scaling a queued StatefulSet N -> M is refused; through 0 it is allowed.
        def scale(n: int, check: bool = True):
            return lab.kubectl("patch", "statefulset", "train", "-n", ns, "--type=merge", "-p",
                               json.dumps({"spec": {"replicas": n}}), check=check)

        r = scale(3, check=False)
        assert r.returncode != 0 and "scale it to 0 first" in r.stderr, r.stderr
        scale(0)
        wait_for(lambda: len([p for p in live(pods(lab, ns, "app=more"))
                              if p["status"].get("phase") == "Running"]) == 2, 120,
                 "more runs once train's quota is free")
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)


def test_only_the_api_servers_certificate_reaches_the_webhooks(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    """The lab's kube-apiserver presents its webhook client certificate (AdmissionConfiguration)
    and pykueue answers only it: a labelled Job created through the API server is stored
    suspended, while a forged review sent straight to the port (pykueue's own identity
    lifting a Pod's gate) gets 403 with or without another certificate of the same CA."""
    import ssl
    import urllib.error
    import urllib.request

    ns, cq = gpu_queue(lab, "callers", 1)
    try:
        lab.apply(json.dumps({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": ns, "labels": {QUEUE: "lq"}},
            "spec": {"suspend": False, "template": {"spec": {
                "restartPolicy": "Never", "containers": [gpu_container()]}}}}))
        job = lab.get("job", "j", "-n", ns)
        assert job["metadata"]["labels"][QUEUE] == "lq"
        pod = {"metadata": {"name": "p", "namespace": ns, "labels": {QUEUE: "lq"}},
               "spec": {"containers": [gpu_container()]}}
        forged = json.dumps({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "forged", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "UPDATE", "namespace": ns, "name": "p",
                "userInfo": {"username": "system:serviceaccount:pykueue-system:pykueue"},
                "object": pod,
                "oldObject": {**pod, "spec": {**pod["spec"], "schedulingGates": [{"name": GATE}]}},
            }}).encode()
        pki = pykueue_in_lab.pki
        for cert in (None, "admin"):
            ctx = ssl.create_default_context(cafile=str(ROOT / "certs" / "out" / "ca.crt"))
            if cert:
                ctx.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
            req = urllib.request.Request(
                f"https://127.0.0.1:{labmod.PYKUEUE_PORT}/validate--v1-pod", data=forged,
                headers={"Content-Type": "application/json"}, method="POST")
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req, context=ctx, timeout=10)
            assert err.value.code == 403, (cert, err.value.code)
            assert "kube-apiserver" in err.value.read().decode()
        # The API server's own calls pass (the webhooks fail closed, so a refused call would
        # have failed the create): the Job was queued and is admitted.
        wait_for(lambda: any(c["type"] == "Admitted" and c["status"] == "True"
                             for w in lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]
                             for c in (w.get("status") or {}).get("conditions", [])), 60,
                 "the Job's Workload admitted")
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
def test_the_queue_label_of_a_job_carrying_its_admissions_scheduling_stays(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    """Before: ``suspend: true`` + label removed in one write, then ``suspend: false``: the
    Job ran with the A100 nodeSelector and toleration pykueue had injected, usage 0. After:
    the first write is refused; the Job keeps running admitted."""
    ns, cq = gpu_queue(lab, "escape", 1)
    try:
        lab.apply(long_job("run", ns, {QUEUE: "lq"}))
        wait_for(lambda: running_pods(lab, ns, "run") == 1
                 and lab.get("job", "run", "-n", ns)["spec"].get("suspend") is False, 60,
                 "run admitted and running")
        r = lab.kubectl("patch", "job", "run", "-n", ns, "--type=merge", "-p", json.dumps(
            {"metadata": {"labels": {QUEUE: None}}, "spec": {"suspend": True}}), check=False)
        assert r.returncode != 0 and "pykueue injected" in r.stderr, r.stderr
        job = lab.get("job", "run", "-n", ns)
        assert job["metadata"]["labels"][QUEUE] == "lq" and job["spec"]["suspend"] is False
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)


def test_an_empty_queue_name_is_refused_at_create(lab: LabHandle,
                                                  pykueue_in_lab: labmod.Lab) -> None:
    """Before: a Job labelled ``queue-name: ""`` was created and ran unqueued. After: refused
    (Kueue: the label's value must be a DNS-1123 subdomain)."""
    ns = "empty-queue"
    lab.create_namespace(ns)
    try:
        r = lab.kubectl("create", "-f", "-", input=long_job("e", ns, {QUEUE: ""}), check=False)
        assert r.returncode != 0 and "must not be empty" in r.stderr, r.stderr
        assert lab.get("jobs", "-n", ns)["items"] == []
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_queues_and_flavors_are_created_with_the_resource_in_use_finalizer(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    """Kueue's ``kueue.x-k8s.io/resource-in-use`` is set by pykueue's mutating webhooks at
    CREATE (mclusterqueue/mresourceflavor.pykueue.io): it is in the API server's answer to the
    create itself, and in a server-side dry run, which no controller ever sees; a finalizer
    of the user's is kept. The finalizer controller still lifts it once the object is deleted
    and unused."""
    suffix = uuid.uuid4().hex[:6]
    cq, rf, hold = f"fin-cq-{suffix}", f"fin-rf-{suffix}", "lab.pykueue.dev/hold"

    def create(obj: dict, *extra: str) -> dict:
        return json.loads(lab.kubectl("create", "-f", "-", "-o", "json", *extra,
                                      input=json.dumps(obj)).stdout)

    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
              "metadata": {"name": rf}}
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
             "metadata": {"name": cq, "finalizers": [hold]},
             "spec": {"namespaceSelector": {}, "resourceGroups": [
                 {"coveredResources": ["cpu"], "flavors": [
                     {"name": rf, "resources": [{"name": "cpu", "nominalQuota": "1"}]}]}]}}
    dry = create({**queue, "metadata": {"name": f"fin-dry-{suffix}"}}, "--dry-run=server")
    assert dry["metadata"]["finalizers"] == [IN_USE]
    try:
        assert create(flavor)["metadata"]["finalizers"] == [IN_USE]
        assert create(queue)["metadata"]["finalizers"] == [hold, IN_USE]
    finally:
        lab.kubectl("patch", "clusterqueue", cq, "--type=json", "-p",
                    json.dumps([{"op": "remove", "path": "/metadata/finalizers/0"}]),
                    check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        lab.kubectl("delete", "resourceflavor", rf, "--wait=false", check=False)
    wait_for(lambda: lab.kubectl("get", "clusterqueue", cq, check=False).returncode != 0, 30,
             "the unused ClusterQueue gone (finalizer lifted by the controller)")
    wait_for(lambda: lab.kubectl("get", "resourceflavor", rf, check=False).returncode != 0, 30,
             "the ResourceFlavor gone once no queue names it")


def test_a_running_pod_of_an_admitted_job_cannot_be_released_from_it(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    """Before (breaker9): removing the Job's selector labels from its running pod made the Job
    controller release the pod and create another, 4 GPU pods on an admission of 2. After:
    the Pod webhook for pods of admitted jobs (``kueue.x-k8s.io/podset``) refuses it."""
    ns, cq = gpu_queue(lab, "owner", 1)
    try:
        lab.apply(long_job("j", ns, {QUEUE: "lq"}))
        wait_for(lambda: running_pods(lab, ns, "j") == 1
                 and all(p["status"].get("phase") == "Running"
                         for p in pods(lab, ns, "batch.kubernetes.io/job-name=j")), 90,
                 "the Job's pod Running")
        (pod,) = pods(lab, ns, "batch.kubernetes.io/job-name=j")
        r = lab.kubectl("label", "pod", pod["metadata"]["name"], "-n", ns,
                        "batch.kubernetes.io/controller-uid-", "controller-uid-", "job-name-",
                        "batch.kubernetes.io/job-name-", check=False)
        assert r.returncode != 0 and "cannot be removed or changed" in r.stderr, r.stderr
        r = lab.kubectl("label", "pod", pod["metadata"]["name"], "-n", ns, "team=a")
        assert r.returncode == 0  # adding a label is fine
        assert [p["metadata"]["name"] for p in live(lab.get("pods", "-n", ns)["items"])] \
            == [pod["metadata"]["name"]]
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)


def test_a_pod_no_controller_owns_does_not_hold_a_jobs_quota(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    """A tenant runs an admitted 1-GPU Job of 3 s and, beside it, a CPU-only Pod of its own
    labelled ``batch.kubernetes.io/job-name: <job>`` (no owner, no uid label; the Job
    controller does not adopt it). Seen (breaker10): the Job completes, its Workload is never
    Finished while that pod runs (Event ``WaitingForPods``), the GPU quota stays reserved
    with 0 GPU pods; in a cohort the same pod kept a preempted borrower's 4 GPUs reserved
    and another team's 2-GPU Job within its nominal quota pending for 72 s and more (admitted
    0.9 s after the pod was deleted). Now: Finished once the Job's own pods are done
    (``framework.pod_of`` needs the uid label or a controller while the Job exists)."""
    from tests.e2e.test_jobset import condition, owned_workload, queue, tenant

    with queue(lab, "fakepod", 2) as ns:
        as_tenant = tenant(lab, ns)
        job = json.loads(long_job("short", ns, {"kueue.x-k8s.io/queue-name": "lq"}))
        job["spec"]["template"]["metadata"] = {}  # the lab's pods end after 3 s
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=json.dumps(job))
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "not-short", "namespace": ns, **LONG,
                "labels": {"batch.kubernetes.io/job-name": "short"}},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox"}]}}))
        wait_for(lambda: any(c["type"] == "Complete" and c["status"] == "True" for c in
                             lab.get("job", "short", "-n", ns)["status"].get("conditions", [])),
                 60, "short complete")
        wait_for(lambda: (condition(owned_workload(lab, ns, "Job", "short"), "Finished")
                          or {}).get("status") == "True", 30,
                 "short's Workload Finished while a pod it does not own runs")
