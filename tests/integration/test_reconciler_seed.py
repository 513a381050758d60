"""The seed scenario on the real control plane (issue 6): research Jobs run up to their
nominalQuota, borrow inference's idle quota up to borrowingLimit, the next one waits with a
reason, starts by itself when a running one finishes; with ``reclaimWithinCohort: Any`` an
inference Job reclaims: one borrowing research Job is evicted whole, restored and requeued.
Queue status and Events are checked on the way; usage is sampled every 100 ms."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest

from tests.integration.reconciler_support import (
    UsageSampler,
    apply,
    cond,
    is_admitted,
    job_complete,
    job_manifest,
    job_obj,
    job_pods,
    manager_fixture,  # noqa: F401 - fixture
    reset_samples,
    rlab_fixture,  # noqa: F401 - fixture
    workload_of,
)
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab

CPU = "default-flavor/cpu"


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _events(lab: LabHandle, ns: str, name: str) -> list[dict]:
    return lab.get("events", "-n", ns, "--field-selector",
                   f"involvedObject.name={name}")["items"]


def test_seed_borrow_wait_start_on_finish_then_reclaim(rlab: LabHandle, manager) -> None:
    reset_samples(rlab, "seed")
    research = [job_manifest(f"r{i}", "research", "team-queue", parallelism=2, cpu="1",
                             memory="512Mi", duration="8s" if i == 0 else "600s")
                for i in range(5)]
    limits = {cq: {CPU: 8000, "default-flavor/memory": 8 * 2**30}
              for cq in ("research-cq", "inference-cq")}
    with UsageSampler(rlab, limits, cohort_members=("research-cq", "inference-cq"),
                      cohort_limits={CPU: 8000, "default-flavor/memory": 8 * 2**30}) as sampler:
        apply(rlab, *research[:4])
        wait_for(lambda: all(is_admitted(workload_of(rlab, "research", f"r{i}"))
                             for i in range(4)), 60, "r0..r3 admitted (4 nominal + 4 borrowed)")
        apply(rlab, research[4])

        # r4 waits, with a reason a person can act on, on the Workload and on the Job.
        def r4_waiting() -> dict | None:
            wl = workload_of(rlab, "research", "r4")
            c = cond(wl or {}, "QuotaReserved")
            return c if c and c["status"] == "False" and "insufficient" in c["message"] else None

        qr = wait_for(r4_waiting, 30, "r4 pending with a reason")
        assert "cpu" in qr["message"] and "borrowingLimit" in qr["message"], qr
        assert job_obj(rlab, "research", "r4")["spec"]["suspend"] is True
        assert not job_pods(rlab, "research", "r4")
        wait_for(lambda: any(e["reason"] == qr["reason"] and e["source"].get("component")
                             == "pykueue" for e in _events(rlab, "research", "r4")),
                 10, "a Warning Event on Job r4 saying why it waits")

        # Queue status: research borrows 4 cpu of inference's idle quota.
        def research_status() -> dict | None:
            st = rlab.get("clusterqueue", "research-cq").get("status") or {}
            return st if st.get("admittedWorkloads") == 4 and st.get("pendingWorkloads") == 1 \
                else None

        st = wait_for(research_status, 10, "research-cq status 4 admitted / 1 pending")
        cpu = next(r for f in st["flavorsReservation"] if f["name"] == "default-flavor"
                   for r in f["resources"] if r["name"] == "cpu")
        assert cpu == {"name": "cpu", "total": "8", "borrowed": "4"}
        active = cond(rlab.get("clusterqueue", "research-cq"), "Active")
        assert active and active["status"] == "True" and active["reason"] == "Ready"
        # The LocalQueue's status is written after the ClusterQueue's: wait for it too.
        wait_for(lambda: ((s := rlab.get("localqueue", "team-queue", "-n", "research")
                           .get("status") or {}).get("pendingWorkloads"),
                          s.get("admittedWorkloads")) == (1, 4), 10,
                 "team-queue status 1 pending / 4 admitted")

        # r0 finishes; r4 starts by itself, quickly.
        wait_for(lambda: job_complete(rlab, "research", "r0"), 90, "r0 Complete")
        seen_complete = time.time()
        wait_for(lambda: is_admitted(workload_of(rlab, "research", "r4")), 30, "r4 admitted")
        latency_observed = time.time() - seen_complete
        done = _t(cond(job_obj(rlab, "research", "r0"), "Complete")["lastTransitionTime"])
        reserved = _t(cond(workload_of(rlab, "research", "r4"), "QuotaReserved")
                      ["lastTransitionTime"])
        assert reserved - done <= 2.0, (done, reserved)  # timestamps have 1 s resolution
        r0_wl = workload_of(rlab, "research", "r0")
        fin = cond(r0_wl, "Finished")
        assert fin and fin["status"] == "True" and fin["reason"] == "Succeeded"
        wait_for(lambda: job_obj(rlab, "research", "r4")["spec"].get("suspend") is False, 10,
                 "r4 unsuspended")

        # Reclaim: inference may now take its quota back.
        rlab.kubectl("patch", "clusterqueue", "inference-cq", "--type=merge", "-p",
                     json.dumps({"spec": {"preemption": {"reclaimWithinCohort": "Any"}}}))
        templates = {f"r{i}": job_obj(rlab, "research", f"r{i}")["spec"]["template"]
                     for i in range(1, 5)}
        apply(rlab, job_manifest("i0", "inference", "team-queue", parallelism=2, cpu="1",
                                 memory="512Mi", duration="600s"))

        def victims() -> list[str]:
            out = []
            for i in range(1, 5):
                ev = cond(workload_of(rlab, "research", f"r{i}") or {}, "Evicted")
                if ev and ev["status"] == "True":
                    out.append(f"r{i}")
            return out

        wait_for(victims, 30, "a research Job evicted")
        wait_for(lambda: is_admitted(workload_of(rlab, "inference", "i0")), 60, "i0 admitted")
        assert len(victims()) == 1, victims()
        victim = victims()[0]
        vwl = workload_of(rlab, "research", victim)
        ev, pre = cond(vwl, "Evicted"), cond(vwl, "Preempted")
        assert ev["reason"] == "Preempted"
        assert pre and pre["status"] == "True" and pre["reason"] == "InCohortReclamation"
        assert "inference" in pre["message"]  # names the preemptor
        # Evicted whole: suspended, no pod left, template exactly as before admission.
        vjob = wait_for(lambda: (j := job_obj(rlab, "research", victim))["spec"]["suspend"]
                        and not job_pods(rlab, "research", victim) and j, 60,
                        "victim suspended with no pods")
        original = json.loads(json.dumps(templates[victim]))
        original["metadata"]["labels"].pop("kueue.x-k8s.io/podset", None)
        assert vjob["spec"]["template"] == original
        assert "pykueue.dev/original-pod-scheduling" not in \
            (vjob["metadata"].get("annotations") or {})
        # Back in its queue: pending again, admission released.
        requeued = wait_for(lambda: (w := workload_of(rlab, "research", victim))
                            and not (w.get("status") or {}).get("admission") and w, 30,
                            "victim requeued")
        assert cond(requeued, "QuotaReserved")["status"] == "False"
        assert cond(requeued, "Requeued")["status"] == "True"
        wait_for(lambda: len([p for p in job_pods(rlab, "inference", "i0")
                              if p["status"].get("phase") == "Running"]) == 2, 60,
                 "i0's 2 pods running")
        # The other research Jobs kept running.
        for i in range(1, 5):
            if f"r{i}" != victim:
                assert is_admitted(workload_of(rlab, "research", f"r{i}"))
    assert sampler.samples > 50
    assert not sampler.violations, sampler.violations[:5]
    print(f"\nseed: r0 Complete -> r4 admitted observed in {latency_observed:.2f}s "
          f"(API timestamps {reserved - done:.0f}s); samples={sampler.samples}; "
          f"max usage {sampler.max_seen}")
    for ns in ("research", "inference"):
        rlab.kubectl("delete", "jobs", "--all", "-n", ns, "--wait=false")
