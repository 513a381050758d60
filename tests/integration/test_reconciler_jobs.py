"""Job <-> Workload on the real control plane: one Workload per labelled Job (owner reference,
deterministic name), rebuilt when a suspended Job changes, deleted with its Job (quota
returns), Finished when the Job fails; a Job started without admission is stopped."""

from __future__ import annotations

import json

import pytest

from app.wire.workload import workload_name_for_job
from tests.integration.reconciler_support import (
    FLAVOR,
    apply,
    cond,
    is_admitted,
    job_manifest,
    job_obj,
    make_queue,
    manager_fixture,  # noqa: F401 - fixture
    namespace,
    rlab_fixture,  # noqa: F401 - fixture
    unique,
    workload_of,
)
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


def test_workload_shape_rebuild_on_change_and_delete_returns_quota(rlab: LabHandle,
                                                                    manager) -> None:
    ns = namespace(rlab, "jobs")
    cq, cq2 = unique("jobs-cq"), unique("jobs-cq2")
    make_queue(rlab, cq, (ns,), cpu="2")
    make_queue(rlab, cq2, (ns,), cpu="8", lq="other")
    try:
        apply(rlab, job_manifest("big", ns, "lq", parallelism=3, cpu="1", duration="600s"))
        w = wait_for(lambda: workload_of(rlab, ns, "big"), 30, "Workload of big")
        job = job_obj(rlab, ns, "big")
        assert w["metadata"]["name"] == workload_name_for_job("big", job["metadata"]["uid"])
        ref = w["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"],
                ref["blockOwnerDeletion"]) == ("Job", "big", job["metadata"]["uid"], True, True)
        assert w["spec"]["podSets"][0]["count"] == 3
        wait_for(lambda: (c := cond(workload_of(rlab, ns, "big"), "QuotaReserved"))
                 and c["status"] == "False", 30, "big pending (3 cpu > 2)")
        # Suspended and pending: parallelism 3 -> 2 rebuilds the Workload, which now fits.
        rlab.kubectl("patch", "job", "big", "-n", ns, "--type=merge", "-p",
                     json.dumps({"spec": {"parallelism": 2}}))
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "big")), 30, "big admitted")
        w2 = workload_of(rlab, ns, "big")
        assert w2["metadata"]["uid"] == w["metadata"]["uid"]  # updated in place
        assert w2["spec"]["podSets"][0]["count"] == 2
        assert w2["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["cpu"] == "2"
        # A second Job waits; deleting the first returns its quota at once.
        apply(rlab, job_manifest("next", ns, "lq", parallelism=2, cpu="1", duration="600s"))
        wait_for(lambda: (c := cond(workload_of(rlab, ns, "next") or {}, "QuotaReserved"))
                 and c["status"] == "False", 30, "next pending")
        rlab.kubectl("delete", "job", "big", "-n", ns, "--wait=false")
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "next")), 30, "next admitted")
        wait_for(lambda: workload_of(rlab, ns, "big") is None, 30, "big's Workload deleted")
        # A suspended Job moved to another LocalQueue: its Workload follows.
        apply(rlab, job_manifest("mover", ns, "lq", parallelism=1, cpu="1", duration="600s"))
        wait_for(lambda: (c := cond(workload_of(rlab, ns, "mover") or {}, "QuotaReserved"))
                 and c["status"] == "False", 30, "mover pending in the full queue")
        rlab.kubectl("label", "job", "mover", "-n", ns, "--overwrite",
                     "kueue.x-k8s.io/queue-name=other")
        mw = wait_for(lambda: (x := workload_of(rlab, ns, "mover")) and is_admitted(x) and x,
                      30, "mover admitted by the other ClusterQueue")
        assert mw["spec"]["queueName"] == "other"
        assert mw["status"]["admission"]["clusterQueue"] == cq2
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, cq2, "--wait=false")


def test_job_started_without_admission_is_stopped_then_admitted(rlab: LabHandle,
                                                                manager) -> None:
    """No webhook registered: a labelled Job created unsuspended runs pods at once; the
    reconciler suspends it, gives it a Workload and starts it when admitted."""
    ns = namespace(rlab, "jobs")
    cq = unique("jobs-cq")
    make_queue(rlab, cq, (ns,), cpu="4")
    try:
        apply(rlab, job_manifest("eager", ns, "lq", parallelism=1, cpu="1", duration="5s",
                                 suspend=False))
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "eager")), 60, "eager admitted")
        wait_for(lambda: (c := cond(job_obj(rlab, ns, "eager"), "Complete"))
                 and c["status"] == "True", 90, "eager Complete")
        fin = wait_for(lambda: (c := cond(workload_of(rlab, ns, "eager"), "Finished"))
                       and c["status"] == "True" and c, 30, "Workload Finished")
        assert fin["reason"] == "Succeeded"
        events = [e["reason"] for e in rlab.get("events", "-n", ns, "--field-selector",
                                                  "involvedObject.name=eager")["items"]
                  if (e.get("source") or {}).get("component") == "pykueue"]
        assert "CreatedWorkload" in events and "Started" in events
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def test_failed_job_finishes_its_workload_and_frees_quota(rlab: LabHandle, manager) -> None:
    ns = namespace(rlab, "jobs")
    cq = unique("jobs-cq")
    make_queue(rlab, cq, (ns,), cpu="1")
    try:
        bad = job_manifest("bad", ns, "lq", cpu="1", duration="600s")
        bad["spec"]["activeDeadlineSeconds"] = 3  # the Job controller fails it after 3 s
        apply(rlab, bad)
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "bad")), 30, "bad admitted")
        apply(rlab, job_manifest("after", ns, "lq", cpu="1", duration="600s"))
        fin = wait_for(lambda: (c := cond(workload_of(rlab, ns, "bad") or {}, "Finished"))
                       and c["status"] == "True" and c, 90, "bad's Workload Finished")
        assert fin["reason"] == "Failed"
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "after")), 30, "after admitted")
        # The ClusterQueue status is written coalesced, after the admission: wait for it.
        st = wait_for(lambda: (s := rlab.get("clusterqueue", cq).get("status") or {})
                      .get("admittedWorkloads") == 1 and s, 30, "admittedWorkloads 1")
        assert st["flavorsUsage"][0]["name"] == FLAVOR
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")
