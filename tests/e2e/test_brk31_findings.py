"""brk31 M1, M2 and H2's rest on the lab (closed; the unit reproducers are
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
the tenant's, so that the grace they are being deleted with can be read."""

from __future__ import annotations

import uuid

import pytest

from tests.e2e.test_appwrapper import (  # noqa: F401
    FLAVOR_TOLERATION,
    appwrapper,
    aw_operator,
    aw_queue,
    holding,
)
from tests.e2e.test_brk30b_findings import _under, queued_appwrapper
from tests.e2e.test_workload_kinds import LONG, TOLERATION
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
HOLD = "example.com/hold"  # the tenant's own finalizer


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
