"""The Workload lifecycle after quota reservation on the real control plane (issue 19 items 1
and 4): admission checks driven by the test itself, as an external check controller would
(Kueue's contract: any controller may own a check), and waitForPodsReady with a node that
cannot take the last pod of a Job (cordoned), evicted whole, requeued with backoff, admitted
again once the node returns, or deactivated past the backoff limit."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from app.config import RequeuingStrategySettings, WaitForPodsReadySettings
from tests.integration.reconciler_support import (
    ManagerThread,
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
    settings_for,
    unique,
    workload_of,
)
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab

V = "kueue.x-k8s.io/v1beta2"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _t(stamp: str) -> float:
    """An API timestamp (RFC 3339, whole seconds) as epoch seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def set_check_active(lab: LabHandle, name: str, active: bool) -> None:
    """Play the check's controller: its Active condition."""
    cond_ = {"type": "Active", "status": "True" if active else "False",
             "reason": "Active" if active else "Inactive", "message": "set by the test",
             "lastTransitionTime": _now()}
    lab.kubectl("patch", "admissionchecks.kueue.x-k8s.io", name, "--subresource=status",
                "--type=merge", "-p", json.dumps({"status": {"conditions": [cond_]}}))


def set_check_state(lab: LabHandle, wl: dict, check: str, state: str, message: str = "",
                    **extra: object) -> None:
    """Play the check's controller on one Workload: its entry in status.admissionChecks
    (a JSON merge patch replaces the list, so the other entries are sent as they are)."""
    entries = [dict(c) for c in wl["status"]["admissionChecks"]]
    for c in entries:
        if c["name"] == check:
            c.update(state=state, message=message, lastTransitionTime=_now(), **extra)
    lab.kubectl("patch", "workloads.kueue.x-k8s.io", wl["metadata"]["name"], "-n",
                wl["metadata"]["namespace"], "--subresource=status", "--type=merge", "-p",
                json.dumps({"status": {"admissionChecks": entries}}))


def cq_active(lab: LabHandle, cq: str) -> dict | None:
    return cond(lab.get("clusterqueue", cq), "Active")


def checks_of(wl: dict | None) -> list[tuple[str, str]]:
    return [(c["name"], c["state"]) for c in ((wl or {}).get("status") or {}).get(
        "admissionChecks") or []]


def reserved(wl: dict | None) -> bool:
    c = cond(wl or {}, "QuotaReserved")
    return bool(wl and wl["status"].get("admission") and c and c["status"] == "True")


def test_admission_check_gates_admission_retry_requeues_rejected_deactivates(
        rlab: LabHandle, manager) -> None:
    ns = namespace(rlab, "acheck")
    cq, ac = unique("ac-cq"), unique("prov")
    apply(rlab, {"apiVersion": V, "kind": "AdmissionCheck", "metadata": {"name": ac},
                 "spec": {"controllerName": "example.com/test-controller"}})
    make_queue(rlab, cq, (ns,), cpu="2")
    rlab.kubectl("patch", "clusterqueue", cq, "--type=merge", "-p", json.dumps(
        {"spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": ac}]}}}))
    try:
        # The check has no Active condition yet: the queue is inactive and says why.
        c = wait_for(lambda: (a := cq_active(rlab, cq)) and a["reason"] ==
                     "AdmissionCheckInactive" and a, 30, "ClusterQueue inactive")
        assert c["status"] == "False" and ac in c["message"]
        apply(rlab, job_manifest("gated", ns, "lq", parallelism=2, cpu="500m",
                                 duration="600s"))
        wait_for(lambda: (q := cond(workload_of(rlab, ns, "gated") or {}, "QuotaReserved"))
                 and q["status"] == "False", 30, "gated pending on the inactive queue")
        assert not reserved(workload_of(rlab, ns, "gated"))

        set_check_active(rlab, ac, True)
        wait_for(lambda: cq_active(rlab, cq)["status"] == "True", 30, "ClusterQueue active")
        wl = wait_for(lambda: (w := workload_of(rlab, ns, "gated")) and reserved(w)
                      and checks_of(w) and w, 30, "gated reserves quota with a Pending check")
        assert checks_of(wl) == [(ac, "Pending")]
        assert not is_admitted(wl)
        # Kueue's queue status: reserving, not admitted.
        wait_for(lambda: ((s := rlab.get("clusterqueue", cq).get("status") or {})
                          .get("reservingWorkloads"), s.get("admittedWorkloads")) == (1, 0),
                 30, "ClusterQueue status: 1 reserving, 0 admitted")
        # Reserved but not admitted: the Job is not started (the admission write notifies
        # the Job's reconciler at once; looked at again a second later).
        time.sleep(1)
        assert job_obj(rlab, ns, "gated")["spec"]["suspend"] is True
        assert not job_pods(rlab, ns, "gated")

        # Retry with a delay: evicted (quota released), checks reset, queued again only after
        # the delay, then reserved again.
        t_retry = time.time()
        set_check_state(rlab, wl, ac, "Retry", "no capacity yet", requeueAfterSeconds=4)
        ev = wait_for(lambda: (w := workload_of(rlab, ns, "gated")) and not
                      w["status"].get("admission") and (e := cond(w, "Evicted"))
                      and e["status"] == "True" and w, 30, "gated evicted and released")
        e = cond(ev, "Evicted")
        assert e["reason"] == "AdmissionCheck"
        assert e["message"] == \
            f'Evicted due to AdmissionCheck in Retry state: "{ac}" (no capacity yet)'
        entry = ev["status"]["admissionChecks"][0]
        assert (entry["state"], entry["retryCount"]) == ("Pending", 1)
        again = wait_for(lambda: (w := workload_of(rlab, ns, "gated")) and reserved(w) and w,
                         40, "gated reserved again after the retry delay")
        assert time.time() - t_retry >= 3.0  # requeueAfterSeconds 4, second-precision times
        assert cond(again, "Requeued")["reason"] == "BackoffFinished"
        assert job_obj(rlab, ns, "gated")["spec"]["suspend"] is True

        # Ready: admitted, the Job starts.
        set_check_state(rlab, again, ac, "Ready", "provisioned")
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "gated")), 30, "gated admitted")
        wait_for(lambda: job_obj(rlab, ns, "gated")["spec"]["suspend"] is False, 30,
                 "gated started")

        # Rejected: deactivated, never admitted, its quota returns.
        apply(rlab, job_manifest("nope", ns, "lq", parallelism=1, cpu="500m",
                                 duration="600s"))
        wl2 = wait_for(lambda: (w := workload_of(rlab, ns, "nope")) and reserved(w)
                       and checks_of(w) and w, 30, "nope reserves quota")
        set_check_state(rlab, wl2, ac, "Rejected", "never")
        gone = wait_for(lambda: (w := workload_of(rlab, ns, "nope")) and
                        w["spec"].get("active") is False and not w["status"].get("admission")
                        and w, 30, "nope deactivated and released")
        e = cond(gone, "Evicted")
        assert (e["status"], e["reason"]) == ("True", "DeactivatedDueToAdmissionCheck")
        assert "Rejected" in e["message"]
        assert job_obj(rlab, ns, "nope")["spec"]["suspend"] is True
        assert not job_pods(rlab, ns, "nope")

        # A reserved Workload waiting on the check; the check goes away: the queue is
        # inactive naming it (what holds quota keeps it); the queue drops the check: the
        # Workload's entries follow the queue and it is admitted.
        apply(rlab, job_manifest("late", ns, "lq", parallelism=1, cpu="500m",
                                 duration="600s"))
        wait_for(lambda: checks_of(w := workload_of(rlab, ns, "late")) and reserved(w), 30,
                 "late reserves quota with a Pending check")
        rlab.kubectl("delete", "admissionchecks.kueue.x-k8s.io", ac)
        wait_for(lambda: cq_active(rlab, cq)["reason"] == "AdmissionCheckNotFound", 30,
                 "ClusterQueue inactive: check not found")
        assert reserved(workload_of(rlab, ns, "late"))
        rlab.kubectl("patch", "clusterqueue", cq, "--type=merge", "-p",
                     json.dumps({"spec": {"admissionChecksStrategy": None}}))
        late = wait_for(lambda: (w := workload_of(rlab, ns, "late")) and is_admitted(w) and w,
                        30, "late admitted once its queue asks for no check")
        assert checks_of(late) == []
        wait_for(lambda: job_obj(rlab, ns, "late")["spec"]["suspend"] is False, 30,
                 "late started")
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")
        rlab.kubectl("delete", "admissionchecks.kueue.x-k8s.io", ac, "--ignore-not-found")


POOL = "lab.pykueue.dev/ready-pool"


@pytest.fixture(name="pool")
def pool_fixture(rlab: LabHandle) -> Iterator[tuple[str, str]]:
    """A flavor on nodes cpu-0 and cpu-1 (labelled for the test), with cpu-1 cordoned;
    yields (ResourceFlavor name, the cordoned node). Uncordoned and unlabelled after."""
    value = unique("p")
    rf = unique("ready-rf")
    rlab.kubectl("label", "node", "cpu-0", "cpu-1", f"{POOL}={value}", "--overwrite")
    rlab.kubectl("cordon", "cpu-1")
    apply(rlab, {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": rf},
                 "spec": {"nodeLabels": {POOL: value}}})
    try:
        yield rf, "cpu-1"
    finally:
        rlab.kubectl("uncordon", "cpu-1")
        rlab.kubectl("label", "node", "cpu-0", "cpu-1", f"{POOL}-")


def _pool_queue(lab: LabHandle, rf: str, ns: str) -> str:
    cq = unique("ready-cq")
    apply(lab,
          {"apiVersion": V, "kind": "ClusterQueue", "metadata": {"name": cq},
           "spec": {"namespaceSelector": {}, "resourceGroups": [
               {"coveredResources": ["cpu"], "flavors": [
                   {"name": rf, "resources": [{"name": "cpu", "nominalQuota": "32"}]}]}]}},
          {"apiVersion": V, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns},
           "spec": {"clusterQueue": cq}})
    return cq


@contextlib.contextmanager
def pods_ready_run(lab: LabHandle, rf: str, **wfpr: object) -> Iterator[tuple[str,
                                                                           ManagerThread]]:
    """A namespace with LocalQueue ``lq`` -> a ClusterQueue of 32 cpu on flavor ``rf``, a
    reconciler with waitForPodsReady enabled with ``wfpr``, and Job ``gang``: 4 pods x 5 cpu
    (cpu-0, 16 cpu, takes 3; the 4th needs the cordoned cpu-1). Yields (namespace, manager);
    all removed after."""
    ns = namespace(lab, "ready")
    cq = _pool_queue(lab, rf, ns)
    settings = settings_for(lab)
    settings.wait_for_pods_ready = WaitForPodsReadySettings(enable=True, **wfpr)
    mt = ManagerThread(settings).start()
    try:
        apply(lab, job_manifest("gang", ns, "lq", parallelism=4, cpu="5", duration="600s"))
        yield ns, mt
    finally:
        mt.stop()
        lab.kubectl("delete", "namespace", ns, "--wait=false")
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def test_pods_ready_timeout_evicts_whole_requeues_and_admits_when_the_node_returns(
        rlab: LabHandle, pool: tuple[str, str]) -> None:
    rf, node = pool
    with pods_ready_run(rlab, rf, timeout_seconds=8,
                        requeuing_strategy=RequeuingStrategySettings(
                            backoff_base_seconds=1, backoff_max_seconds=2)) as (ns, mt):
        wl = wait_for(lambda: (w := workload_of(rlab, ns, "gang")) and is_admitted(w)
                      and cond(w, "PodsReady") and w, 60, "gang admitted, PodsReady written")
        pr = cond(wl, "PodsReady")
        assert (pr["status"], pr["reason"], pr["message"]) == (
            "False", "WaitForStart", "Not all pods are ready or succeeded")
        pods = wait_for(lambda: (ps := job_pods(rlab, ns, "gang")) and len(ps) == 4 and
                        sum(p["status"].get("phase") == "Running" for p in ps) == 3 and ps,
                        60, "3 of 4 pods running")
        assert all(p["spec"].get("nodeName") in (None, "cpu-0") for p in pods)
        ev = wait_for(lambda: (w := workload_of(rlab, ns, "gang")) and
                      (e := cond(w, "Evicted")) and e["status"] == "True" and w, 60,
                      "gang evicted for PodsReadyTimeout")
        e = cond(ev, "Evicted")
        # Not before the timeout, 8 s from the admission: both times are the API's (whole
        # seconds), not when this test happened to see the pods run (under load that can be
        # seconds after the admission).
        reserved_at = _t(cond(wl, "QuotaReserved")["lastTransitionTime"])
        assert _t(e["lastTransitionTime"]) - reserved_at >= 7, (cond(wl, "QuotaReserved"), e)
        assert (e["reason"], e["message"]) == ("PodsReadyTimeout",
                                               f"Exceeded the PodsReady timeout {ns}/"
                                               f"{ev['metadata']['name']}")
        assert ev["status"]["requeueState"]["count"] >= 1
        # Evicted whole: the Job is suspended and every pod goes, then the quota returns.
        wait_for(lambda: job_obj(rlab, ns, "gang")["spec"]["suspend"] is True, 30,
                 "gang suspended")
        wait_for(lambda: not job_pods(rlab, ns, "gang") or
                 is_admitted(workload_of(rlab, ns, "gang")), 60, "gang's pods gone")

        # The node returns: the next admission gets all 4 pods Ready.
        rlab.kubectl("uncordon", node)
        ready = wait_for(lambda: (w := workload_of(rlab, ns, "gang")) and is_admitted(w)
                         and (p := cond(w, "PodsReady")) and p["status"] == "True" and w,
                         120, "gang admitted again with every pod Ready")
        assert cond(ready, "PodsReady")["reason"] == "Started"
        assert ready["status"]["requeueState"]["count"] >= 1
        assert cond(ready, "Evicted")["status"] == "False"  # reset at the new reservation
        pods = job_pods(rlab, ns, "gang")
        assert len(pods) == 4 and all(p["status"].get("phase") == "Running" for p in pods)
        assert mt.on_loop(lambda m: m.scheduler.lifecycle.timeouts) >= 1


def test_pods_ready_timeout_past_the_backoff_limit_deactivates(
        rlab: LabHandle, pool: tuple[str, str]) -> None:
    rf, _ = pool
    with pods_ready_run(rlab, rf, timeout_seconds=4,
                        requeuing_strategy=RequeuingStrategySettings(
                            backoff_limit_count=0, backoff_base_seconds=1)) as (ns, _mt):
        wl = wait_for(lambda: (w := workload_of(rlab, ns, "gang")) and
                      w["spec"].get("active") is False and not w["status"].get("admission")
                      and w, 90, "gang deactivated and released")
        e = cond(wl, "Evicted")
        assert (e["status"], e["reason"], e["message"]) == (
            "True", "DeactivatedDueToRequeuingLimitExceeded",
            "The workload is deactivated due to exceeding the maximum number of re-queuing "
            "retries")
        assert job_obj(rlab, ns, "gang")["spec"]["suspend"] is True


def test_block_admission_holds_the_next_admission_until_the_gang_is_ready(
        rlab: LabHandle, pool: tuple[str, str]) -> None:
    rf, node = pool
    with pods_ready_run(rlab, rf, timeout_seconds=120, block_admission=True) as (ns, mt):
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "gang")), 60, "gang admitted")
        # It fits (32 cpu, gang holds 20), but gang's 4th pod cannot start: it waits.
        apply(rlab, job_manifest("small", ns, "lq", parallelism=1, cpu="1", duration="600s"))
        q = wait_for(lambda: (c := cond(workload_of(rlab, ns, "small") or {}, "QuotaReserved"))
                     and c["reason"] == "Waiting" and c, 60,
                     "small held: waiting for pods ready")
        assert q["status"] == "False"
        assert q["message"].startswith(
            "waiting for all admitted workloads to be in PodsReady condition")
        assert job_obj(rlab, ns, "small")["spec"]["suspend"] is True
        rlab.kubectl("uncordon", node)
        wait_for(lambda: (p := cond(workload_of(rlab, ns, "gang"), "PodsReady"))
                 and p["status"] == "True", 60, "gang ready")
        wait_for(lambda: is_admitted(workload_of(rlab, ns, "small")), 60,
                 "small admitted once gang is ready")
        assert mt.on_loop(lambda m: m.scheduler.blocked_cycles) >= 1
