"""brk30: the lab reproducers of a breaker's findings against 87ed464, both closed (7175cb8).

H (``AppWrapper.child_job_pods`` through ``names_component``): with the real AppWrapper
controller (v1.2.0), a tenant (``edit``) deletes the one pod of its admitted AppWrapper's
``generateName`` Job component (``backoffLimit: 0``): the Job fails, the controller resets
the AppWrapper (``FailedComponent``), deletes the Job and pauses for the AppWrapper's own
``retryPausePeriodDuration`` annotation (the tenant's; up to 24 h) with the component
``ResourcesDeployed`` False, the AppWrapper unsuspended and admitted. Jobs the tenant then
created with the prefix and a controller ownerReference to the AppWrapper each got the
component's whole share at 87ed464: 3 GPU pods Running on an admission of 1. Now a Job
component's Jobs have a share under its recorded (or fixed) name only: they are set to
parallelism 0. The lab test gives the component a fixed name (``rst``), whose Job the
controller makes again under that name; the prefix case is the unit test's.

M (webhook ``vappwrapper-wrapped-owned``): in the same pause a tenant's Deployment with the
prefix joined the AppWrapper as its component, and once the controller recorded its own
nothing held it (scaled to 4: 6 GPUs on an admission of 2). Now refused at CREATE."""

from __future__ import annotations

import json

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


def test_jobs_hung_under_a_resetting_appwrapper_run_no_more_than_its_admission(
        lab: LabHandle, aw_queue: str) -> None:  # noqa: F811
    ns = aw_queue
    pod = {"restartPolicy": "Never", "tolerations": [TOLERATION], "containers": [{
        "name": "c", "image": "busybox", "resources": {"requests": GPU, "limits": GPU}}]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "rst"},
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
    # pykueue's child-Job rule holds each to no pod (no share: the controller creates
    # nothing in the pause), and their pods go.
    wait_for(lambda: {j["metadata"]["name"]: j["spec"]["parallelism"]
                      for j in lab.get("jobs", "-n", ns)["items"]}
             == {f"rst-evil-{i}": 0 for i in range(3)}, 60,
             "the tenant's Jobs set to parallelism 0")
    wait_for(lambda: not running(), 60, "no pod of the tenant's Jobs running")
    assert lab.get("appwrapper", "rst", "-n", ns)["status"]["phase"] == "Resetting"
    assert lab.get("events", "-n", ns, "--field-selector",
                   "reason=ExceedsAncestorAdmission")["items"]
    lab.kubectl("delete", "appwrapper", "rst", "-n", ns, "--wait=false")


def test_a_deployment_joined_in_the_reset_pause_is_held_after(
        lab: LabHandle, aw_queue: str) -> None:  # noqa: F811
    """AppWrapper ``rsd`` (2 GPUs admitted): Job ``rsj`` (backoffLimit 0)
    and a Deployment by ``generateName: rsd-`` (1 replica each, 1 GPU a pod),
    ``retryPausePeriodDuration`` 40 s. The tenant deletes the Job's pod: the controller
    resets, deleting both. In the pause the tenant creates Deployment ``rsd-evil`` (1
    replica, the component's requests) under it: refused (at 87ed464 allowed as the
    component, then no component once the controller recorded its own, and scaled to 4).
    After the pause the controller creates both again under new names: 2 pods run."""
    ns = aw_queue
    pod = {"tolerations": [TOLERATION], "containers": [{
        "name": "c", "image": "busybox", "resources": {"requests": GPU, "limits": GPU}}]}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "rsj"},
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
               if p["metadata"]["name"].startswith("rsj-")][0]["metadata"]["name"]  # rsj-<x>
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
    assert created.returncode != 0 and "which wraps no Deployment" in created.stderr, \
        created.stderr
    wait_for(lambda: lab.get("appwrapper", "rsd", "-n", ns)["status"].get("phase") == "Running"
             and _deployed(lab, ns, "rsd") == "True", 120, "rsd running again, recorded")
    wait_for(lambda: len([p for p in holding(lab, ns, "rsd")
                          if p["status"].get("phase") == "Running"]) == 2, 90,
             "rsd's 2 pods running again")
    assert [d["metadata"]["name"].startswith("rsd-")
            for d in lab.get("deployments", "-n", ns)["items"]] == [True]
    lab.kubectl("delete", "appwrapper", "rsd", "-n", ns, "--wait=false")
