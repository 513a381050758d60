"""brk31 M1, M2, M3 and H2's rest on the lab (closed; the unit reproducers are
tests/unit/test_brk31_findings.py and test_appwrapper_child_templates.py).

M1, M2: before its AppWrapper is admitted, a tenant creates, suspended and with a controller
ownerReference to it, the Job of its fixed-name Job component's name (appwrapper v1.2.0 adopts
it by name once admitted) asking the component's requests but with a nodeSelector of another
flavor's nodes, or claiming DRA devices the component does not: both refused by the API server
through ``vappwrapper-wrapped-job``, naming the field; the component's own pods pass. The
AppWrapper waits on a LocalQueue that does not exist, so it stays queued throughout.

H2's rest: under an admitted AppWrapper the tenant creates a running Job named as no component
(a share of 0, not refused at CREATE), its pods with a termination grace period of a day. The
reconciler sets its parallelism to 0 and its pods, which the Job controller deletes with that
day, are deleted again with a grace of 1 s. The pods name their node (``spec.nodeName``), so
they are bound from the start and deleted gracefully, keep running while being deleted
(``lab.pykueue.dev/stops-slowly``: their containers ignore SIGTERM) and carry a finalizer of
the tenant's, so that the grace they are being deleted with can be read.

M3: the Job jobset v0.11.1 makes for an AppWrapper's JobSet component, suspended, enlarged
(Kubernetes v1.36 lets a suspended Job's resources change) and resumed, by the tenant or the
JobSet operator: refused through ``vappwrapper-wrapped-jobset-job``; with the labels that
webhook selects by taken off first, held by the reconciler and the extender."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.e2e.test_appwrapper import (  # noqa: F401
    AW_LABEL,
    FLAVOR_TOLERATION,
    appwrapper,
    aw_operator,
    aw_queue,
    holding,
    wrapped_jobset,
)
from tests.e2e.test_brk30b_findings import _under, queued_appwrapper
from tests.e2e.test_workload_kinds import LONG, TOLERATION
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
HOLD = "example.com/hold"  # the tenant's own finalizer
PODSET = "kueue.x-k8s.io/podset"
RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
FAILURE_GRACE = "workload.codeflare.dev.appwrapper/failureGracePeriodDuration"


def _job(name: str, **pod_spec: object) -> dict:
    """Job ``name``: 1 pod of 1 GPU, ``pod_spec`` added to its pod's spec."""
    gpu = {"nvidia.com/gpu": "1"}
    spec = {"restartPolicy": "Never", "tolerations": [TOLERATION],
            "containers": [{"name": "c", "image": "busybox",
                            "resources": {"requests": gpu, "limits": gpu}}], **pod_spec}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": 1, "completions": 1,
                     "template": {"metadata": LONG, "spec": spec}}}


def test_a_job_of_a_components_name_on_another_flavor_or_devices_cannot_be_created(
        lab: LabHandle, aw_queue: str) -> None:  # noqa: F811
    ns = aw_queue
    uid = queued_appwrapper(lab, ns, "place", [_job("place-j")])
    elsewhere = _under(_job("place-j", nodeSelector={"gpu": "t4"}), ns, uid, aw="place")
    # pykueue's stores must show the AppWrapper before its rules can name it.
    wait_for(lambda: "spec.template.spec.nodeSelector" in lab.kubectl(
        "create", "--dry-run=server", "-f", "-", input=elsewhere, check=False).stderr,
        30, "the Job webhook refusing place-j on another flavor's nodes (dry run)")

    job = lab.kubectl("create", "-f", "-", input=elsewhere, check=False)
    assert job.returncode != 0
    assert "vappwrapper-wrapped-job.pykueue.io" in job.stderr \
        and "spec.template.spec.nodeSelector" in job.stderr and "t4" in job.stderr, job.stderr
    claiming = _job("place-j", resourceClaims=[
        {"name": "gpu", "resourceClaimTemplateName": "eight-gpus"}])
    claiming["spec"]["template"]["spec"]["containers"][0]["resources"]["claims"] = [
        {"name": "gpu"}]
    job = lab.kubectl("create", "-f", "-", input=_under(claiming, ns, uid, aw="place"),
                      check=False)
    assert job.returncode != 0
    assert "vappwrapper-wrapped-job.pykueue.io" in job.stderr \
        and "spec.template.spec.resourceClaims" in job.stderr \
        and "eight-gpus" in job.stderr, job.stderr
    assert not lab.get("jobs", "-n", ns)["items"]
    # The component's own pods pass (what the controller would create while it is queued).
    same = lab.kubectl("create", "--dry-run=server", "-f", "-",
                       input=_under(_job("place-j"), ns, uid, aw="place"), check=False)
    assert same.returncode == 0, same.stderr
    lab.kubectl("delete", "appwrapper", "place", "-n", ns, "--wait=false")


def _pods(lab: LabHandle, ns: str, job: str) -> list[dict]:
    return lab.get("pods", "-n", ns, "-l", f"batch.kubernetes.io/job-name={job}")["items"]


def test_the_pods_of_a_job_beyond_its_share_run_out_no_grace_of_the_tenants(
        lab: LabHandle, aw_queue: str) -> None:  # noqa: F811
    ns = aw_queue
    lab.apply(appwrapper("grace", ns, 1))
    wait_for(lambda: len(holding(lab, ns, "grace")) == 1, 90, "the pod of grace running")
    uid = lab.get("appwrapper", "grace", "-n", ns)["metadata"]["uid"]
    node = holding(lab, ns, "grace")[0]["spec"]["nodeName"]
    made: list[str] = []
    try:
        # The Job controller usually makes the pods before pykueue's set-back; when it did
        # not (no pod to look at), the tenant tries again under another name.
        for _ in range(3):
            name = f"other-{uuid.uuid4().hex[:5]}"
            job = _job(name, nodeName=node, terminationGracePeriodSeconds=86400,
                       tolerations=[TOLERATION, FLAVOR_TOLERATION])
            job["spec"].update(parallelism=2, completions=2)
            job["spec"]["template"]["metadata"] = {"finalizers": [HOLD], "annotations": {
                **LONG["annotations"], "lab.pykueue.dev/stops-slowly": "true"}}
            created = lab.kubectl("create", "-f", "-", check=False,
                                  input=_under(job, ns, uid, aw="grace", suspend=False))
            assert created.returncode == 0, created.stderr  # a share of 0: allowed
            made.append(name)
            wait_for(lambda n=name: lab.get("job", n, "-n", ns)["spec"]["parallelism"] == 0,
                     30, f"{name} set back to parallelism 0")
            if _pods(lab, ns, name):
                break
        else:
            pytest.fail("the Job controller made no pod before the set-back, 3 times")
        pods = wait_for(lambda: (p := _pods(lab, ns, name)) and all(
            x["metadata"].get("deletionTimestamp") for x in p) and p, 30,
            f"the pods of {name} being deleted")
        graces = wait_for(lambda: (g := sorted(
            x["metadata"].get("deletionGracePeriodSeconds") for x in _pods(lab, ns, name)))
            and all(s == 1 for s in g) and g, 30,
            f"the pods of {name} deleted with a grace of 1 s, not the tenant's day")
        assert len(graces) == len(pods)
        events = lab.get("events", "-n", ns, "--field-selector",
                         f"involvedObject.name={name}")["items"]
        assert {"ExceedsAncestorAdmission", "DeletedPods"} <= {e["reason"] for e in events}
    finally:
        for name in made:
            for pod in _pods(lab, ns, name):
                lab.kubectl("patch", "pod", pod["metadata"]["name"], "-n", ns, "--type=json",
                            "-p", '[{"op":"remove","path":"/metadata/finalizers"}]',
                            check=False)
            lab.kubectl("delete", "job", name, "-n", ns, "--wait=false", check=False)
        lab.kubectl("delete", "appwrapper", "grace", "-n", ns, "--wait=false", check=False)


def _js_job(lab: LabHandle, ns: str) -> dict:
    return lab.get("job", "m3js-w-0", "-n", ns)


def _gpu_pods(lab: LabHandle, ns: str) -> list[tuple[str, str, str]]:
    """(phase, node, GPUs asked) of every live pod of ``m3js-w-0``."""
    return [(p["status"].get("phase", ""), p["spec"].get("nodeName", ""),
             p["spec"]["containers"][0]["resources"].get("requests", {}).get("nvidia.com/gpu", ""))
            for p in _pods(lab, ns, "m3js-w-0") if not p["metadata"].get("deletionTimestamp")]


def _suspend_jobset(lab: LabHandle, ns: str, suspend: bool) -> None:
    lab.kubectl("patch", "jobset", "m3js", "-n", ns, "--type=merge",
                "-p", json.dumps({"spec": {"suspend": suspend}}))
    if suspend:  # the JobSet operator suspends its Job, the Job controller deletes the pod
        wait_for(lambda: (j := _js_job(lab, ns))["spec"].get("suspend") is True
                 and not j["status"].get("active"), 60, "m3js-w-0 suspended, no pod active")


def test_m3_a_jobset_components_job_enlarged_while_suspended_runs_no_bigger_pods(
        lab: LabHandle, aw_queue: str) -> None:  # noqa: F811
    """brk31 M3 with appwrapper v1.2.0 and jobset v0.11.1: AppWrapper ``m3`` wraps JobSet
    ``m3js`` (1 Job, 1 pod of 1 GPU). The JobSet suspended and resumed unchanged: the JobSet
    operator's resume of ``m3js-w-0`` passes (``vappwrapper-wrapped-jobset-job``, the Job
    rules) and its pod runs again. Suspended again, ``m3js-w-0``'s container set to 8 GPUs
    (Kubernetes v1.36 allows it while suspended): the tenant's resume is refused, naming the
    webhook and the 8 GPUs, and so is the operator's once the JobSet is resumed (the Job
    stays suspended). The labels the webhook selects by then taken off the suspended Job
    (the AppWrapper's and the podset label from its pod template, the replicatedJob label
    the operator's resume merges them back by) and the Job resumed, unseen by any webhook:
    the reconciler, which finds the AppWrapper through the JobSet store, sets it to
    parallelism 0 (``ExceedsAncestorAdmission``) and no 8-GPU pod runs (the extender places
    none). Before (4153668): the resume passed, and the unlabelled variant ran an 8-GPU pod
    on a100-0 on the AppWrapper's admission of 1 GPU."""
    ns = aw_queue
    # appwrapper's own fault handling (its pods missing for its failureGracePeriod, 1 min by
    # default, resets it) is not what this tests: given time.
    lab.apply(wrapped_jobset("m3", ns, "m3js", annotations={FAILURE_GRACE: "10m"}))
    try:
        wait_for(lambda: ("Running", "a100-0", "1") in _gpu_pods(lab, ns), 90,
                 "m3js-w-0's 1-GPU pod running")
        assert AW_LABEL in _js_job(lab, ns)["spec"]["template"]["metadata"]["labels"]

        # The normal path: the JobSet operator's suspend and resume of its unchanged Job.
        _suspend_jobset(lab, ns, True)
        _suspend_jobset(lab, ns, False)
        wait_for(lambda: ("Running", "a100-0", "1") in _gpu_pods(lab, ns), 60,
                 "m3js-w-0's pod running again after the JobSet's resume")

        # Enlarged while suspended: the resume is refused, the tenant's and the operator's.
        _suspend_jobset(lab, ns, True)
        eight = {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}
        lab.kubectl("patch", "job", "m3js-w-0", "-n", ns, "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": "/spec/template/spec/containers/0/resources",
              "value": eight}]))  # allowed: it stays suspended
        resume = lab.kubectl("patch", "job", "m3js-w-0", "-n", ns, "--type=merge",
                             "-p", '{"spec":{"suspend":false}}', check=False)
        assert resume.returncode != 0, resume.stdout
        assert "vappwrapper-wrapped-jobset-job.pykueue.io" in resume.stderr \
            and "'nvidia.com/gpu': 8" in resume.stderr, resume.stderr
        _suspend_jobset(lab, ns, False)
        wait_for(lambda: any(e["reason"] == "ResumeJobs" for e in lab.get(
            "events", "-n", ns, "--field-selector", "involvedObject.name=m3js")["items"]),
            30, "the JobSet operator resuming m3js")
        for _ in range(10):
            assert _js_job(lab, ns)["spec"].get("suspend") is True
            assert not _gpu_pods(lab, ns)
            time.sleep(0.5)

        # Unseen by the webhook: the labels it selects by taken off, then resumed.
        lab.kubectl("patch", "job", "m3js-w-0", "-n", ns, "--type=json", "-p", json.dumps([
            {"op": "remove", "path": f"/spec/template/metadata/labels/{_pointer(AW_LABEL)}"},
            {"op": "remove", "path": f"/spec/template/metadata/labels/{_pointer(PODSET)}"},
            {"op": "remove", "path": f"/metadata/labels/{_pointer(RJOB_LABEL)}"}]))
        lab.kubectl("patch", "job", "m3js-w-0", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"suspend":false}}')  # not reviewed: allowed
        seen: set[tuple[str, str, str]] = set()

        def held() -> bool:
            seen.update(_gpu_pods(lab, ns))
            job = _js_job(lab, ns)
            return job["spec"].get("suspend") is False and job["spec"]["parallelism"] == 0
        wait_for(held, 30, "m3js-w-0 set to parallelism 0")
        for _ in range(10):
            seen.update(_gpu_pods(lab, ns))
            time.sleep(0.5)
        assert not [p for p in seen if p[0] == "Running" and p[2] == "8"], seen
        events = lab.get("events", "-n", ns, "--field-selector",
                         "involvedObject.name=m3js-w-0")["items"]
        assert any(e["reason"] == "ExceedsAncestorAdmission" and "AppWrapper" in e["message"]
                   for e in events), [e["reason"] for e in events]
    finally:
        lab.kubectl("delete", "appwrapper", "m3", "-n", ns, "--wait=false", check=False)


def _pointer(key: str) -> str:
    """``key`` as a JSON pointer token."""
    return key.replace("~", "~0").replace("/", "~1")
