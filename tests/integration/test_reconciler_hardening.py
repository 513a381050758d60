"""Issue 14 on the real control plane: a running Job scaled past its admission is stopped and
queued again for its new shape; a ClusterQueue or ResourceFlavor in use is held by Kueue's
``kueue.x-k8s.io/resource-in-use`` finalizer until nothing uses it; Jobs with an empty
queue name are not managed."""

from __future__ import annotations

import json

import pytest

from tests.integration.reconciler_support import (
    FLAVOR,
    apply,
    cond,
    is_admitted,
    job_manifest,
    job_obj,
    job_pods,
    make_queue,
    manager_fixture,  # noqa: F401 - fixture
    namespace,
    rlab_fixture,  # noqa: F401 - fixture
    unique,
    workload_of,
)
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
IN_USE = "kueue.x-k8s.io/resource-in-use"


def _running_pods(lab: LabHandle, ns: str, job: str) -> int:
    return sum(1 for p in job_pods(lab, ns, job)
               if p["status"].get("phase") in ("Pending", "Running")
               and not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName"))


def test_a_running_job_scaled_up_is_stopped_and_queued_for_its_new_shape(
        rlab: LabHandle, manager) -> None:
    ns = namespace(rlab, "scale")
    cq = unique("scale-cq")
    make_queue(rlab, cq, (ns,), cpu="2")
    try:
        grow = job_manifest("grow", ns, "lq", parallelism=1, cpu="1", duration="600s")
        grow["spec"].pop("completions", None)  # a work-queue Job: its pod count = parallelism
        apply(rlab, grow)
        old = wait_for(lambda: (w := workload_of(rlab, ns, "grow")) and is_admitted(w) and w,
                       30, "grow admitted for 1 pod")
        wait_for(lambda: _running_pods(rlab, ns, "grow") == 1, 60, "grow's pod placed")
        # No webhook in this lab: the controller alone must stop the scaled Job.
        rlab.kubectl("patch", "job", "grow", "-n", ns, "--type=merge", "-p",
                     json.dumps({"spec": {"parallelism": 4}}))
        new = wait_for(lambda: (w := workload_of(rlab, ns, "grow"))
                       and w["metadata"]["uid"] != old["metadata"]["uid"] and w, 60,
                       "a new Workload for the new shape")
        assert new["spec"]["podSets"][0]["count"] == 4
        wait_for(lambda: (c := cond(workload_of(rlab, ns, "grow") or {}, "QuotaReserved"))
                 and c["status"] == "False", 30, "the 4-pod Workload waits (4 cpu > 2)")
        job = job_obj(rlab, ns, "grow")
        assert job["spec"]["suspend"] is True
        wait_for(lambda: _running_pods(rlab, ns, "grow") == 0, 60, "grow's pods gone")
        events = rlab.get("events", "-n", ns)["items"]
        assert any(e["reason"] == "Stopped" and "No matching Workload" in e["message"]
                   and "4 pods, admitted for 1" in e["message"] for e in events), \
            [e["message"] for e in events]
        # Back to 2: the suspended Job's Workload is rebuilt, admitted, and 2 pods run.
        rlab.kubectl("patch", "job", "grow", "-n", ns, "--type=merge", "-p",
                     json.dumps({"spec": {"parallelism": 2}}))
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "grow")), 60, "grow admitted for 2")
        wait_for(lambda: _running_pods(rlab, ns, "grow") == 2, 60, "2 pods placed")
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def test_a_cluster_queue_in_use_is_held_until_its_workloads_are_gone(
        rlab: LabHandle, manager) -> None:
    ns = namespace(rlab, "fin")
    cq = unique("fin-cq")
    make_queue(rlab, cq, (ns,), cpu="2")
    try:
        wait_for(lambda: IN_USE in (rlab.get("clusterqueue", cq)["metadata"]
                                    .get("finalizers") or []), 30, "finalizer on the queue")
        wait_for(lambda: IN_USE in (rlab.get("resourceflavor", FLAVOR)["metadata"]
                                    .get("finalizers") or []), 30, "finalizer on the flavor")
        apply(rlab, job_manifest("busy", ns, "lq", cpu="1", duration="600s"))
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "busy")), 30, "busy admitted")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")
        active = wait_for(lambda: (c := cond(rlab.get("clusterqueue", cq), "Active"))
                          and c["status"] == "False" and c, 30, "queue inactive")
        assert active["reason"] == "Terminating"
        # Still there while the Workload holds quota in it; a new Job is not admitted.
        apply(rlab, job_manifest("late", ns, "lq", cpu="1", duration="600s"))
        wait_for(lambda: (c := cond(workload_of(rlab, ns, "late") or {}, "QuotaReserved"))
                 and c["status"] == "False", 30, "late pending")
        assert rlab.get("clusterqueue", cq)["metadata"].get("deletionTimestamp")
        assert is_admitted(workload_of(rlab, ns, "busy"))
        # The Job goes: its Workload is deleted, the quota released, the queue deleted.
        rlab.kubectl("delete", "job", "busy", "-n", ns, "--wait=false")
        wait_for(lambda: rlab.kubectl("get", "clusterqueue", cq, check=False).returncode != 0,
                 60, "the ClusterQueue deleted once unused")
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)


def test_a_flavor_named_by_a_queue_is_held_until_no_queue_names_it(
        rlab: LabHandle, manager) -> None:
    rf, cq = unique("fin-rf"), unique("fin-rf-cq")
    apply(rlab,
          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
           "metadata": {"name": rf}},
          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
           "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"],
                    "flavors": [{"name": rf, "resources": [{"name": "cpu",
                                                            "nominalQuota": "1"}]}]}]}})
    try:
        wait_for(lambda: IN_USE in (rlab.get("resourceflavor", rf)["metadata"]
                                    .get("finalizers") or []), 30, "finalizer on the flavor")
        rlab.kubectl("delete", "resourceflavor", rf, "--wait=false")
        wait_for(lambda: rlab.get("resourceflavor", rf)["metadata"].get("deletionTimestamp"),
                 10, "flavor terminating")
        # The queue keeps its flavor (Kueue: FlavorNotFound only once it is really gone).
        assert cond(rlab.get("clusterqueue", cq), "Active") is None or \
            cond(rlab.get("clusterqueue", cq), "Active")["status"] == "True"
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")
        wait_for(lambda: rlab.kubectl("get", "resourceflavor", rf, check=False).returncode != 0,
                 60, "the flavor deleted once no queue names it")
    finally:
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        rlab.kubectl("delete", "resourceflavor", rf, "--wait=false", check=False)


def test_a_job_with_an_empty_queue_name_is_not_managed(rlab: LabHandle, manager) -> None:
    ns = namespace(rlab, "empty")
    cq = unique("empty-cq")
    make_queue(rlab, cq, (ns,), cpu="2")
    try:
        apply(rlab, job_manifest("free", ns, "", cpu="1", duration="600s", suspend=False))
        wait_for(lambda: _running_pods(rlab, ns, "free") == 1, 60, "free runs")
        # A managed Job in the same namespace is handled, so the reconciler did look.
        apply(rlab, job_manifest("queued", ns, "lq", cpu="1", duration="600s"))
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "queued")), 30, "queued admitted")
        assert workload_of(rlab, ns, "free") is None
        assert job_obj(rlab, ns, "free")["spec"].get("suspend") in (None, False)
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")
