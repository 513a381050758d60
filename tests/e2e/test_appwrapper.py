"""AppWrapper (project-codeflare v1.2.0) through pykueue with the real AppWrapper controller
(``make operators``): an AppWrapper wrapping a batch Job of 2 pods (1 GPU each) is admitted
whole and its pods land on the flavor's node with the flavor's nodeSelector and toleration
(through its ``podSetInfos``), the wrapped Job is not queued again, an edit making it bigger is
refused and so is the wrapped Job scaled directly past its share; one that does not fit
waits whole with no object made; deleting the running one lets the waiting one start, and its
finishing frees the quota for the next. A wrapped JobSet's Job scaled directly is refused, and
set back to its replicatedJob's share when no webhook saw the raise. A higher-priority Job
preempts an admitted AppWrapper whole; one managed by another controller (``spec.managedBy``)
is queued and admitted as Kueue v0.17.1 does, and the AppWrapper controller makes nothing for
it. An evicted AppWrapper of a ``generateName`` Deployment runs again under a new name, and
nothing joins it while it is suspended. Skipped when an operator is not built."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import gpu_queue, operators_running
from tests.e2e.test_jobset import A100, condition, drop, owned_workload
from tests.e2e.test_workload_kinds import LONG, TOLERATION
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
QUEUE = "kueue.x-k8s.io/queue-name"
AW_LABEL = "workload.codeflare.dev/appwrapper"
FLAVOR_TOLERATION = {"key": "pykueue.dev/appwrapper", "operator": "Exists",
                     "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def aw_operator(lab: LabHandle) -> Iterator[None]:
    """The AppWrapper and JobSet CRDs and controllers in the lab, before pykueue starts."""
    with operators_running(lab, "appwrapper", "jobset"):
        yield


@pytest.fixture(scope="module")
def aw_queue(lab: LabHandle, aw_operator: None, pykueue_in_lab: object) -> Iterator[str]:
    """A namespace with LocalQueue ``lq`` to a ClusterQueue of 2 GPUs on a flavor of the A100
    node that adds a toleration of its own."""
    suffix = uuid.uuid4().hex[:6]
    ns, cq, rf = f"aw-{suffix}", f"aw-cq-{suffix}", f"aw-rf-{suffix}"
    lab.create_namespace(ns)
    gpu_queue(lab, ns, cq, rf, 2, {"nodeLabels": A100, "tolerations": [FLAVOR_TOLERATION]})
    try:
        yield ns
    finally:
        drop(lab, ns, cq)
        lab.kubectl("delete", "resourceflavor", rf, "--wait=false", check=False)


def appwrapper(name: str, ns: str, pods: int, *, completions: int | None = None,
               run: dict | None = None) -> str:
    """An AppWrapper queued in ``lq``, created unsuspended (pykueue's webhook suspends it),
    wrapping the batch Job ``<name>-job`` of ``pods`` pods at once (1 GPU each)."""
    gpu = {"nvidia.com/gpu": "1"}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{name}-job"},
           "spec": {"parallelism": pods, "completions": completions or pods, "backoffLimit": 0,
                    "template": {"metadata": run or LONG, "spec": {
                        "restartPolicy": "Never", "tolerations": [TOLERATION],
                        "containers": [{"name": "c", "image": "busybox", "resources": {
                            "requests": gpu, "limits": gpu}}]}}}}
    return json.dumps({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                       "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"suspend": False, "components": [{"template": job}]}})


def wrapped_jobset(name: str, ns: str, jobset: str, *, replicas: int = 1, completions: int = 1,
                   annotations: dict | None = None) -> str:
    """An AppWrapper queued in ``lq`` wrapping JobSet ``jobset``: replicatedJob ``w`` of
    ``replicas`` Jobs, each 1 pod at once (1 GPU) of ``completions``."""
    gpu = {"nvidia.com/gpu": "1"}
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": jobset},
          "spec": {"replicatedJobs": [{"name": "w", "replicas": replicas, "template": {"spec": {
              "parallelism": 1, "completions": completions, "template": {
                  "metadata": LONG, "spec": {
                      "restartPolicy": "Never", "tolerations": [TOLERATION],
                      "containers": [{"name": "c", "image": "busybox", "resources": {
                          "requests": gpu, "limits": gpu}}]}}}}}]}}
    return json.dumps({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                       "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"},
                                    "annotations": annotations or {}},
                       "spec": {"suspend": False, "components": [{"template": js}]}})


def holding(lab: LabHandle, ns: str, name: str) -> list[dict]:
    """The pods of AppWrapper ``name`` that are bound and not finished."""
    return [p for p in lab.get("pods", "-n", ns, "-l", f"{AW_LABEL}={name}")["items"]
            if p["spec"].get("nodeName") and p["status"].get("phase") in ("Pending", "Running")]


def test_an_appwrapper_runs_whole_on_the_flavor_and_cannot_grow_past_its_admission(
        lab: LabHandle, aw_queue: str) -> None:
    ns = aw_queue
    # Parallelism 2 of 4 completions: 2 pods at once, the AppWrapper's one podSet.
    lab.apply(appwrapper("train", ns, 2, completions=4))
    wl = wait_for(lambda: (w := owned_workload(lab, ns, "AppWrapper", "train"))
                  and (c := condition(w, "Admitted")) and c["status"] == "True" and w,
                  60, "train's Workload admitted")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("train-0", 2)]
    pods = wait_for(lambda: len(r := [p for p in holding(lab, ns, "train")
                                      if p["status"].get("phase") == "Running"]) == 2 and r,
                    90, "the 2 pods of train running")
    for p in pods:
        assert p["spec"]["nodeName"] == "a100-0"
        assert p["spec"]["nodeSelector"] == A100
        assert p["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "train-0"
        assert FLAVOR_TOLERATION in p["spec"]["tolerations"]
    # The wrapped Job is the AppWrapper's child, not queued again.
    job = lab.get("job", "train-job", "-n", ns)
    assert [r["kind"] for r in job["metadata"]["ownerReferences"]] == ["AppWrapper"]
    wls = lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]
    assert [r["kind"] for w in wls for r in w["metadata"]["ownerReferences"]] == ["AppWrapper"]

    # Growing the admitted AppWrapper is refused.
    grow = lab.kubectl("patch", "appwrapper", "train", "-n", ns, "--type=json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/components/0/template/spec/parallelism", "value": 4}]),
        check=False)
    assert grow.returncode != 0 and "immutable" in grow.stderr, grow
    # The wrapped Job scaled directly past its share of the admission is refused (webhook
    # vappwrapper-wrapped-job: an unlabelled Job the AppWrapper controls); the reconciler's
    # set-back is test_a_wrapped_jobsets_job_scaled_directly_is_set_back_to_its_share's.
    raise_ = lab.kubectl("patch", "job", "train-job", "-n", ns, "--type=merge",
                         "-p", '{"spec":{"parallelism":4}}', check=False)
    assert raise_.returncode != 0 and "vappwrapper-wrapped-job.pykueue.io" in raise_.stderr \
        and "runs at most 2 pod(s) at once" in raise_.stderr, raise_.stderr
    assert lab.get("job", "train-job", "-n", ns)["spec"]["parallelism"] == 2

    # 3 GPUs > the 2-GPU queue: waits whole, nothing made.
    lab.apply(appwrapper("big", ns, 3))
    qr = wait_for(lambda: (c := condition(owned_workload(lab, ns, "AppWrapper", "big"),
                                          "QuotaReserved")) and c["status"] == "False" and c,
                  60, "big's Workload pending")
    assert "nvidia.com/gpu" in qr["message"] and "3" in qr["message"], qr
    assert lab.get("appwrapper", "big", "-n", ns)["spec"]["suspend"] is True
    assert lab.kubectl("get", "job", "big-job", "-n", ns, check=False).returncode != 0
    assert not holding(lab, ns, "big")

    # "short" (2 pods of 2 s) waits while train runs; deleting train lets it start.
    short = {"annotations": {"lab.pykueue.dev/run-duration": "2s"}}
    lab.apply(appwrapper("short", ns, 2, run=short))
    wait_for(lambda: (c := condition(owned_workload(lab, ns, "AppWrapper", "short"),
                                     "QuotaReserved")) and c["status"] == "False", 60,
             "short's Workload pending behind train")
    lab.kubectl("delete", "appwrapper", "train", "-n", ns, "--wait=false")
    wait_for(lambda: lab.get("appwrapper", "short", "-n", ns).get("status", {})
             .get("phase") == "Succeeded", 90, "short succeeded")
    # Its finishing frees the 2 GPUs: "after" (2 GPUs) runs.
    wait_for(lambda: (c := condition(owned_workload(lab, ns, "AppWrapper", "short"),
                                     "Finished")) and c["status"] == "True", 30,
             "short's Workload Finished")
    lab.apply(appwrapper("after", ns, 2))
    wait_for(lambda: len(holding(lab, ns, "after")) == 2, 90, "the 2 pods of after running")
    lab.kubectl("delete", "appwrapper", "after", "-n", ns, "--wait=false")


def test_a_wrapped_jobsets_job_scaled_directly_is_set_back_to_its_share(
        lab: LabHandle, aw_queue: str) -> None:
    ns = aw_queue
    lab.apply(wrapped_jobset("wjs", ns, "js", replicas=2, completions=4))
    wait_for(lambda: len(holding(lab, ns, "wjs")) == 2, 90, "the 2 pods of wjs running")
    # The wrapped JobSet is no queued JobSet: its Jobs' ancestor is the AppWrapper (found
    # through pykueue's store of every JobSet), and the raise is refused
    # (vappwrapper-wrapped-jobset-job: the Job's pod template carries the AppWrapper's label).
    raise_ = lab.kubectl("patch", "job", "js-w-0", "-n", ns, "--type=merge",
                         "-p", '{"spec":{"parallelism":3}}', check=False)
    assert raise_.returncode != 0 \
        and "vappwrapper-wrapped-jobset-job.pykueue.io" in raise_.stderr \
        and "runs at most 1 pod(s) at once" in raise_.stderr, raise_.stderr
    # One no webhook sees (that label, and the replicatedJob label by which the JobSet
    # operator's resume merges it back, taken off the suspended Job first) is set back.
    def js_w_0() -> dict:
        return lab.get("job", "js-w-0", "-n", ns)

    def patch(kind: str, name: str, how: str, body: object) -> None:
        lab.kubectl("patch", kind, name, "-n", ns, f"--type={how}", "-p", json.dumps(body))

    patch("jobset", "js", "merge", {"spec": {"suspend": True}})
    wait_for(lambda: (j := js_w_0())["spec"].get("suspend") is True
             and not j["status"].get("active"), 60, "js-w-0 suspended")
    patch("job", "js-w-0", "json", [
        {"op": "remove", "path": f"/spec/template/metadata/labels/{AW_LABEL.replace('/', '~1')}"},
        {"op": "remove", "path": "/metadata/labels/jobset.sigs.k8s.io~1replicatedjob-name"},
        {"op": "replace", "path": "/spec/parallelism", "value": 3}])
    patch("jobset", "js", "merge", {"spec": {"suspend": False}})
    patch("job", "js-w-0", "merge", {"spec": {"suspend": False}})
    wait_for(lambda: (j := js_w_0())["spec"]["parallelism"] == 1
             and j["spec"].get("suspend") is False, 30, "js-w-0's parallelism set back to 1")

    def js_pods() -> int:
        return len([p for p in lab.get("pods", "-n", ns, "-l",
                                       "jobset.sigs.k8s.io/jobset-name=js")["items"]
                    if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
                    and p["status"].get("phase") in ("Pending", "Running")])
    wait_for(lambda: js_pods() == 2, 60, "js back to 2 pods")
    lab.kubectl("delete", "appwrapper", "wjs", "-n", ns, "--wait=false")


@pytest.fixture
def own_queue(lab: LabHandle, aw_operator: None, pykueue_in_lab: object
                     ) -> Iterator[tuple[str, str]]:
    """(namespace with LocalQueue ``lq`` to a ClusterQueue of its own, 2 GPUs on the A100
    flavor, that preempts lower priorities within it, WorkloadPriorityClass ``<ns>-high`` of
    value 1000)."""
    suffix = uuid.uuid4().hex[:6]
    ns, cq, rf, high = f"awp-{suffix}", f"awp-cq-{suffix}", f"awp-rf-{suffix}", f"awp-{suffix}-high"
    lab.create_namespace(ns)
    gpu_queue(lab, ns, cq, rf, 2, {"nodeLabels": A100, "tolerations": [FLAVOR_TOLERATION]})
    lab.kubectl("patch", "clusterqueue", cq, "--type=merge", "-p", json.dumps(
        {"spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}}))
    lab.apply(json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                          "metadata": {"name": high}, "value": 1000}))
    try:
        yield ns, high
    finally:
        drop(lab, ns, cq)
        lab.kubectl("delete", "resourceflavor", rf, "--wait=false", check=False)
        lab.kubectl("delete", "workloadpriorityclass", high, "--wait=false", check=False)


def test_a_higher_priority_job_preempts_an_admitted_appwrapper_whole(
        lab: LabHandle, own_queue: tuple[str, str]) -> None:
    """An admitted AppWrapper (2 pods of 1 GPU, priority 0) fills its 2-GPU ClusterQueue; a
    batch Job of priority 1000 asking 2 GPUs preempts it (Kueue v0.17.1 withinClusterQueue
    LowerPriority): the AppWrapper's Workload is Evicted (``Preempted``) and pending again,
    the AppWrapper suspended, its wrapped Job and pods gone, and the Job's 2 pods run on the
    quota it took over."""
    ns, high = own_queue
    lab.apply(appwrapper("low", ns, 2))
    wait_for(lambda: len([p for p in holding(lab, ns, "low")
                          if p["status"].get("phase") == "Running"]) == 2, 90,
             "the 2 pods of low running")
    gpu = {"nvidia.com/gpu": "1"}
    lab.apply(json.dumps({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "urgent", "namespace": ns,
        "labels": {QUEUE: "lq", "kueue.x-k8s.io/priority-class": high}},
        "spec": {"parallelism": 2, "completions": 2, "template": {"metadata": LONG, "spec": {
            "restartPolicy": "Never", "tolerations": [TOLERATION],
            "containers": [{"name": "c", "image": "busybox",
                            "resources": {"requests": gpu, "limits": gpu}}]}}}}))
    evicted = wait_for(lambda: (c := condition(owned_workload(lab, ns, "AppWrapper", "low"),
                                               "Evicted")) and c["status"] == "True" and c,
                       60, "low's Workload evicted")
    assert evicted["reason"] == "Preempted", evicted
    wait_for(lambda: lab.get("appwrapper", "low", "-n", ns)["spec"]["suspend"] is True, 30,
             "low suspended")
    wait_for(lambda: not holding(lab, ns, "low")
             and lab.kubectl("get", "job", "low-job", "-n", ns, check=False).returncode != 0,
             90, "low's wrapped Job and pods gone")
    wait_for(lambda: len([p for p in lab.get("pods", "-n", ns, "-l", "job-name=urgent")["items"]
                          if p["status"].get("phase") == "Running"]) == 2, 90,
             "urgent's 2 pods running")
    wl = owned_workload(lab, ns, "AppWrapper", "low")
    assert condition(wl, "QuotaReserved")["status"] == "False", wl["status"]
    assert not (wl["status"].get("admission")), wl["status"]


def test_an_appwrapper_managed_by_another_controller_is_queued_as_kueue_does(
        lab: LabHandle, own_queue: tuple[str, str]) -> None:
    """Kueue v0.17.1 reads an AppWrapper's ``spec.managedBy`` only to default it to MultiKueue
    (``CanDefaultManagedBy``); its reconciler queues and admits the AppWrapper whatever the
    value, and the AppWrapper controller (v1.2.0) leaves one managed by another controller
    alone. So here: a queued AppWrapper with ``spec.managedBy: example.com/other`` gets its
    Workload, is admitted and unsuspended by pykueue (its podSetInfos written), keeps its
    managedBy, and no wrapped object or pod is made for it."""
    ns, _ = own_queue
    aw = json.loads(appwrapper("other", ns, 1))
    aw["spec"]["managedBy"] = "example.com/other"
    lab.apply(json.dumps(aw))
    wait_for(lambda: (c := condition(owned_workload(lab, ns, "AppWrapper", "other"),
                                     "Admitted")) and c["status"] == "True", 60,
             "other's Workload admitted")
    got = wait_for(lambda: (a := lab.get("appwrapper", "other", "-n", ns))["spec"].get(
        "suspend") is False and a, 30, "other unsuspended by pykueue")
    assert got["spec"]["managedBy"] == "example.com/other"
    assert [i["labels"] for c in got["spec"]["components"] for i in c.get("podSetInfos") or []
            ] == [{"kueue.x-k8s.io/podset": "other-0"}], got["spec"]["components"]
    # The AppWrapper controller leaves it alone: nothing is made for it (checked for 10 s).
    for _ in range(10):
        assert lab.kubectl("get", "job", "other-job", "-n", ns, check=False).returncode != 0
        assert not holding(lab, ns, "other")
        time.sleep(1)
    lab.kubectl("delete", "appwrapper", "other", "-n", ns, "--wait=false")


def test_an_evicted_appwrapper_of_a_generate_name_deployment_runs_again(
        lab: LabHandle, own_queue: tuple[str, str]) -> None:
    """An AppWrapper wrapping a Deployment named by ``generateName`` (1 one-GPU replica) and a
    batch Job of a fixed name (1 one-GPU pod) runs, is evicted (its Workload deactivated)
    and admitted again (reactivated). appwrapper v1.2.0 deletes the components on the
    suspension, keeps the Deployment's old name in ``status.componentStatus``
    (``ResourcesDeployed`` False) and on the resume creates it again under a new generated
    name, recorded only after the create: that create passes the wrapped-object webhook and
    both pods run again (before: refused as no component, the old name being on record, so
    the AppWrapper stayed ``Resuming`` with no pod). While it is suspended, a Deployment
    created under it with the prefix is refused (brk29: it would have been left over,
    uncounted, once the controller recorded its own)."""
    ns, _ = own_queue
    gpu = {"nvidia.com/gpu": "1"}
    pod = {"tolerations": [TOLERATION], "containers": [{
        "name": "c", "image": "busybox", "resources": {"requests": gpu, "limits": gpu}}]}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"generateName": "gen-d-"},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "gen"}}, "template": {
               "metadata": {"labels": {"app": "gen"}, **LONG}, "spec": pod}}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "gen-j"},
           "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {
               "metadata": LONG, "spec": {**pod, "restartPolicy": "Never"}}}}
    lab.apply(json.dumps({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                          "metadata": {"name": "gen", "namespace": ns, "labels": {QUEUE: "lq"}},
                          "spec": {"suspend": False, "components": [
                              {"template": dep}, {"template": job}]}}))

    def running() -> list[dict]:
        return [p for p in holding(lab, ns, "gen") if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]

    def recorded() -> tuple[str, str] | None:
        """The two components' names while both are recorded as deployed."""
        status = lab.get("appwrapper", "gen", "-n", ns).get("status") or {}
        names = [c.get("name", "") for c in status.get("componentStatus") or []
                 if any(d["type"] == "ResourcesDeployed" and d["status"] == "True"
                        for d in c.get("conditions") or [])]
        return (names[0], names[1]) if len(names) == 2 else None
    wait_for(lambda: len(running()) == 2, 90, "gen's 2 pods running")
    first = wait_for(recorded, 30, "the components' names recorded")
    assert first[0].startswith("gen-d-") and first[1] == "gen-j", first
    wl = owned_workload(lab, ns, "AppWrapper", "gen")
    assert wl is not None
    lab.kubectl("patch", "workload.kueue.x-k8s.io", wl["metadata"]["name"], "-n", ns,
                "--type=merge", "-p", '{"spec":{"active":false}}')
    wait_for(lambda: lab.get("appwrapper", "gen", "-n", ns)["spec"].get("suspend") is True
             and not lab.get("deployments", "-n", ns)["items"]
             and not lab.get("jobs", "-n", ns)["items"] and not holding(lab, ns, "gen"),
             90, "gen suspended, its Deployment, Job and pods gone")

    uid = lab.get("appwrapper", "gen", "-n", ns)["metadata"]["uid"]
    extra = {**dep, "metadata": {"name": "gen-d-extra", "namespace": ns, "ownerReferences": [
        {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper", "name": "gen",
         "uid": uid, "controller": True}]}}
    r = lab.kubectl("create", "-f", "-", input=json.dumps(extra), check=False)
    assert r.returncode != 0 and "which is suspended" in r.stderr, r.stderr

    lab.kubectl("patch", "workload.kueue.x-k8s.io", wl["metadata"]["name"], "-n", ns,
                "--type=merge", "-p", '{"spec":{"active":true}}')
    second = wait_for(lambda: (n := recorded()) and n[0] != first[0] and n, 90,
                      "the Deployment created again under a new name and recorded")
    pods = wait_for(lambda: len(r := running()) == 2 and r, 90, "gen's 2 pods running again")
    assert all(p["spec"]["nodeSelector"] == A100 for p in pods)
    assert [d["metadata"]["name"] for d in lab.get("deployments", "-n", ns)["items"]] \
        == [second[0]]
    assert [(j["metadata"]["name"], j["spec"]["parallelism"])
            for j in lab.get("jobs", "-n", ns)["items"]] == [("gen-j", 1)]
    lab.kubectl("delete", "appwrapper", "gen", "-n", ns, "--wait=false")
