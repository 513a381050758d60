"""brk30: a lab reproducer of an open finding (a strict xfail: it fails once the finding is
fixed, and then joins the suite with its marker removed; docs/security.md Known gaps).

H (``AppWrapper.child_job_pods`` through ``names_component``): with the real AppWrapper
controller (v1.2.0), a tenant (``edit``) deletes the one pod of its admitted AppWrapper's
``generateName`` Job component (``backoffLimit: 0``): the Job fails, the controller resets
the AppWrapper (``FailedComponent``), deletes the Job and pauses for the AppWrapper's own
``retryPausePeriodDuration`` annotation (the tenant's; up to 24 h) with the component
``ResourcesDeployed`` False, the AppWrapper unsuspended and admitted. Jobs the tenant then
creates with the prefix and a controller ownerReference to the AppWrapper each get the
component's whole share: 3 GPU pods Running on an admission of 1."""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.test_appwrapper import FLAVOR_TOLERATION, QUEUE, aw_operator, aw_queue, holding  # noqa: F401
from tests.e2e.test_jobset import A100, condition, owned_workload
from tests.e2e.test_workload_kinds import LONG, TOLERATION
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
GPU = {"nvidia.com/gpu": "1"}


def _deployed(lab: LabHandle, ns: str, name: str) -> str | None:
    """The ``ResourcesDeployed`` status all components of AppWrapper ``name`` share
    (``status.componentStatus``), None while they differ or none is set."""
    status = lab.get("appwrapper", name, "-n", ns).get("status") or {}
    found = {str(c.get("status")) for entry in status.get("componentStatus") or []
             for c in entry.get("conditions") or [] if c.get("type") == "ResourcesDeployed"}
    return found.pop() if len(found) == 1 else None


@pytest.mark.xfail(strict=True, reason="brk30 H: Jobs with a generateName component's prefix "
                   "each get its whole share while the AppWrapper resets")
def test_jobs_hung_under_a_resetting_appwrapper_run_no_more_than_its_admission(
        lab: LabHandle, aw_queue: str) -> None:  # noqa: F811
    ns = aw_queue
    pod = {"restartPolicy": "Never", "tolerations": [TOLERATION], "containers": [{
        "name": "c", "image": "busybox", "resources": {"requests": GPU, "limits": GPU}}]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "rst-"},
           "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                    "template": {"metadata": LONG, "spec": pod}}}
    lab.apply(json.dumps({
        "apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
        "metadata": {"name": "rst", "namespace": ns, "labels": {QUEUE: "lq"}, "annotations": {
            "workload.codeflare.dev.appwrapper/retryPausePeriodDuration": "10m"}},
        "spec": {"suspend": False, "components": [{"template": job}]}}))
    wl = wait_for(lambda: (w := owned_workload(lab, ns, "AppWrapper", "rst"))
                  and (c := condition(w, "Admitted")) and c["status"] == "True" and w,
                  60, "rst's Workload admitted")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("rst-0", 1)]
    first = wait_for(lambda: [p for p in holding(lab, ns, "rst")
                              if p["status"].get("phase") == "Running"], 90, "rst's pod running")
    uid = lab.get("appwrapper", "rst", "-n", ns)["metadata"]["uid"]

    # The tenant deletes its pod: the Job fails, the controller resets the AppWrapper.
    lab.kubectl("delete", "pod", first[0]["metadata"]["name"], "-n", ns, "--wait=false")
    wait_for(lambda: lab.get("appwrapper", "rst", "-n", ns)["status"].get("phase")
             == "Resetting" and _deployed(lab, ns, "rst") == "False"
             and not lab.get("jobs", "-n", ns)["items"], 120,
             "rst Resetting, its Job deleted (ResourcesDeployed False)")
    assert lab.get("appwrapper", "rst", "-n", ns)["spec"].get("suspend") is False

    for i in range(3):
        lab.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {
                "name": f"rst-evil-{i}", "namespace": ns, "ownerReferences": [
                    {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                     "name": "rst", "uid": uid, "controller": True}]},
            "spec": {"parallelism": 1, "completions": 1, "template": {
                "metadata": LONG, "spec": {**pod, "nodeSelector": A100,
                                           "tolerations": [TOLERATION, FLAVOR_TOLERATION]}}}}))

    def running() -> list[dict]:
        return [p for p in lab.get("pods", "-n", ns)["items"]
                if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]
    # Give pykueue's child-Job rule time to act, the AppWrapper still pausing.
    peak, deadline = 0, time.monotonic() + 30
    while time.monotonic() < deadline:
        peak = max(peak, len(running()))
        time.sleep(2)
    assert lab.get("appwrapper", "rst", "-n", ns)["status"]["phase"] == "Resetting"
    jobs = {j["metadata"]["name"]: j["spec"]["parallelism"]
            for j in lab.get("jobs", "-n", ns)["items"]}
    lab.kubectl("delete", "appwrapper", "rst", "-n", ns, "--wait=false")
    assert peak <= 1, f"{peak} one-GPU pods Running on an admission of 1 (Jobs {jobs})"


@pytest.mark.xfail(strict=True, reason="brk30 M: a tenant's Deployment with the prefix joins a "
                   "resetting AppWrapper and nothing holds it once the controller records its own")
def test_a_deployment_joined_in_the_reset_pause_is_held_after(
        lab: LabHandle, aw_queue: str) -> None:  # noqa: F811
    """AppWrapper ``rsd`` (2 GPUs admitted): a Job by ``generateName: rsj-`` (backoffLimit 0)
    and a Deployment by ``generateName: rsd-`` (1 replica each, 1 GPU a pod),
    ``retryPausePeriodDuration`` 40 s. The tenant deletes the Job's pod: the controller
    resets, deleting both. In the pause the tenant creates Deployment ``rsd-evil`` (1
    replica, the component's requests) under it: allowed as the component. After the pause
    the controller creates and records its own; ``rsd-evil`` is no component, so scaling it
    to 4 passes and nothing sets it back: 6 GPUs on an admission of 2."""
    ns = aw_queue
    pod = {"tolerations": [TOLERATION], "containers": [{
        "name": "c", "image": "busybox", "resources": {"requests": GPU, "limits": GPU}}]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "rsj-"},
           "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {
               "metadata": LONG, "spec": {**pod, "restartPolicy": "Never"}}}}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"generateName": "rsd-"},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "rsd"}}, "template": {
               "metadata": {"labels": {"app": "rsd"}, **LONG}, "spec": pod}}}
    lab.apply(json.dumps({
        "apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
        "metadata": {"name": "rsd", "namespace": ns, "labels": {QUEUE: "lq"}, "annotations": {
            "workload.codeflare.dev.appwrapper/retryPausePeriodDuration": "40s"}},
        "spec": {"suspend": False, "components": [{"template": job}, {"template": dep}]}}))
    wait_for(lambda: len([p for p in holding(lab, ns, "rsd")
                          if p["status"].get("phase") == "Running"]) == 2, 90,
             "rsd's 2 pods running")
    uid = lab.get("appwrapper", "rsd", "-n", ns)["metadata"]["uid"]
    job_pod = [p for p in holding(lab, ns, "rsd")
               if p["metadata"]["name"].startswith("rsj-")][0]["metadata"]["name"]
    lab.kubectl("delete", "pod", job_pod, "-n", ns, "--wait=false")
    wait_for(lambda: lab.get("appwrapper", "rsd", "-n", ns)["status"].get("phase")
             == "Resetting" and _deployed(lab, ns, "rsd") == "False"
             and not lab.get("deployments", "-n", ns)["items"], 120,
             "rsd Resetting, its components deleted")
    evil = {**dep, "metadata": {"name": "rsd-evil", "namespace": ns, "ownerReferences": [
        {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper", "name": "rsd",
         "uid": uid, "controller": True}]}}
    evil["spec"] = {**dep["spec"], "selector": {"matchLabels": {"app": "evil"}}, "template": {
        "metadata": {"labels": {"app": "evil"}, **LONG},
        "spec": {**pod, "nodeSelector": A100, "tolerations": [TOLERATION, FLAVOR_TOLERATION]}}}
    created = lab.kubectl("create", "-f", "-", input=json.dumps(evil), check=False)
    assert created.returncode == 0, created.stderr
    wait_for(lambda: lab.get("appwrapper", "rsd", "-n", ns)["status"].get("phase") == "Running"
             and _deployed(lab, ns, "rsd") == "True", 120, "rsd running again, recorded")
    scaled = lab.kubectl("scale", "deployment", "rsd-evil", "-n", ns, "--replicas=4",
                         check=False)

    def gpus() -> int:
        return len([p for p in lab.get("pods", "-n", ns)["items"]
                    if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
                    and not p["metadata"].get("deletionTimestamp")])
    peak, deadline = 0, time.monotonic() + 30
    while time.monotonic() < deadline:
        peak = max(peak, gpus())
        time.sleep(2)
    lab.kubectl("delete", "appwrapper", "rsd", "-n", ns, "--wait=false")
    lab.kubectl("delete", "deployment", "rsd-evil", "-n", ns, "--wait=false", check=False)
    assert peak <= 2, f"{peak} one-GPU pods Running on an admission of 2 " \
                      f"(scale of rsd-evil: rc {scaled.returncode} {scaled.stderr.strip()})"
