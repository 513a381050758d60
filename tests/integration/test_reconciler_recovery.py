"""Recovery on the real control plane: kill -9 of pykueue in the middle of a burst of Job
submissions, a kube-apiserver restart during a run, and two replicas with Lease leader
election (only the leader writes; the other takes over when it dies). Usage is sampled
through the API every 100 ms and must never exceed the ClusterQueue's quota."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from tests.integration.reconciler_support import (
    FLAVOR,
    ManagerThread,
    Pykueue,
    UsageSampler,
    apply,
    cond,
    job_manifest,
    make_certs,
    make_queue,
    namespace,
    restart_apiserver,
    rlab_fixture,  # noqa: F401 - fixture
    settings_for,
    unique,
)
from tests.labfixture import LabHandle, wait_for
from tests.pykueue_server import free_port

pytestmark = pytest.mark.lab

N_CRASH = int(os.environ.get("RECONCILER_CRASH_JOBS", "200"))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def _jobs(lab: LabHandle, ns: str) -> list[dict]:
    return lab.get("jobs", "-n", ns)["items"]


def _complete(job: dict) -> bool:
    return cond(job, "Complete") is not None and cond(job, "Complete")["status"] == "True"


def _pykueue_events(lab: LabHandle, ns: str) -> list[dict]:
    return [e for e in lab.get("events", "-n", ns)["items"]
            if (e.get("source") or {}).get("component") == "pykueue"
            or e.get("reportingComponent") == "pykueue"]


def _submit(lab: LabHandle, ns: str, names: list[str], batch: int, **kw) -> None:
    for i in range(0, len(names), batch):
        apply(lab, *(job_manifest(n, ns, "lq", **kw) for n in names[i:i + batch]))


def _assert_each_job_ran_once(lab: LabHandle, ns: str, names: list[str]) -> None:
    jobs = {j["metadata"]["name"]: j for j in _jobs(lab, ns)}
    pods = lab.get("pods", "-n", ns)["items"]
    per_job: dict[str, int] = {}
    for p in pods:
        j = (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")
        per_job[j] = per_job.get(j, 0) + 1
    wls = {ref["name"]: w for w in lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]
           for ref in w["metadata"].get("ownerReferences") or []}
    started = {}
    for e in _pykueue_events(lab, ns):
        if e["reason"] == "Started":
            n = e["involvedObject"]["name"]
            started[n] = started.get(n, 0) + e.get("count", 1)
    for n in names:
        st = jobs[n].get("status") or {}
        assert _complete(jobs[n]), n
        assert (st.get("succeeded"), st.get("failed", 0)) == (1, 0), (n, st)
        assert per_job.get(n) == 1, (n, per_job.get(n))  # one pod ever: started once
        w = wls[n]
        fin = cond(w, "Finished")
        assert fin and fin["status"] == "True", n
        assert cond(w, "Evicted") is None, n  # never evicted / re-admitted
        assert started.get(n, 0) <= 1, (n, started.get(n))  # events are best effort


def test_kill_9_in_the_middle_of_submissions(rlab: LabHandle, certs) -> None:
    """Every Job admitted exactly once and completed; quota never exceeded. Each Job's pod
    runs 1 s: the 200 Jobs pass through the 10 CPUs in 20 rounds either way, and the run's
    seconds go to admitting, starting and finishing them (what is under test), not to
    waiting for pods."""
    ns = namespace(rlab, "crash")
    cq = unique("crash-cq")
    make_queue(rlab, cq, (ns,), cpu="10")
    names = [f"j{i:03d}" for i in range(N_CRASH)]
    # A free port, not a fixed one: other labs on the machine may hold 1944x. p2 takes the
    # same port once p1 is gone.
    port = free_port()
    p1 = Pykueue(rlab, certs, port).start()
    p2 = None
    try:
        p1.wait_ready(90)
        with UsageSampler(rlab, {cq: {f"{FLAVOR}/cpu": 10_000}}) as sampler:
            half = N_CRASH // 2
            _submit(rlab, ns, names[:half], 20, cpu="1", duration="1s")
            wait_for(lambda: sum(1 for j in _jobs(rlab, ns)
                                 if not j["spec"].get("suspend")) >= 5, 60,
                     "some Jobs admitted and running")
            t_kill = time.time()
            p1.kill9()
            submitter = threading.Thread(target=_submit, args=(rlab, ns, names[half:], 20),
                                         kwargs={"cpu": "1", "duration": "1s"})
            submitter.start()
            time.sleep(1.0)
            p2 = Pykueue(rlab, certs, port).start()
            p2.wait_ready(90)
            t_back = time.time()
            submitter.join(120)
            wait_for(lambda: all(_complete(j) for j in _jobs(rlab, ns))
                     and len(_jobs(rlab, ns)) == N_CRASH, 60 + N_CRASH * 1.5,
                     f"all {N_CRASH} Jobs Complete", interval=2.0)
            t_done = time.time()
        _assert_each_job_ran_once(rlab, ns, names)
        assert sampler.samples > 50
        assert not sampler.violations, sampler.violations[:5]
        assert sampler.max_seen[cq][f"{FLAVOR}/cpu"] <= 10_000
        print(f"\ncrash: {N_CRASH} jobs; killed after {half} submitted; back ready in "
              f"{t_back - t_kill:.1f}s; all complete {t_done - t_kill:.1f}s after the kill; "
              f"samples={sampler.samples}; max cpu {sampler.max_seen[cq]}")
    finally:
        p1.stop()
        if p2 is not None:
            p2.stop()
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def test_apiserver_restart_during_a_run(rlab: LabHandle) -> None:
    ns = namespace(rlab, "apirst")
    cq = unique("apirst-cq")
    make_queue(rlab, cq, (ns,), cpu="4")
    names = [f"a{i:02d}" for i in range(24)]
    mt = ManagerThread(settings_for(rlab)).start()
    try:
        with UsageSampler(rlab, {cq: {f"{FLAVOR}/cpu": 4000}}) as sampler:
            _submit(rlab, ns, names, 12, cpu="1", duration="3s")
            wait_for(lambda: sum(1 for j in _jobs(rlab, ns) if _complete(j)) >= 4, 90,
                     "a few Jobs done")
            relists_before = sum(i.relists for i in mt.m.ctx.informers.informers.values())
            restart_apiserver(rlab, 3.0)
            wait_for(lambda: all(_complete(j) for j in _jobs(rlab, ns)), 240,
                     "all Jobs Complete after the restart", interval=2.0)
        relists = sum(i.relists for i in mt.m.ctx.informers.informers.values())
        errors = sum(i.errors for i in mt.m.ctx.informers.informers.values())
        assert relists > relists_before, "informers relisted after 410 Gone"
        assert errors > 0
        _assert_each_job_ran_once(rlab, ns, names)
        assert not sampler.violations, sampler.violations[:5]
        print(f"\napiserver restart: relists={relists - relists_before} errors={errors} "
              f"samples={sampler.samples}")
    finally:
        mt.stop()
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def _lease(lab: LabHandle, name: str) -> dict | None:
    r = lab.kubectl("get", "lease", name, "-n", "pykueue-system", "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def test_two_replicas_only_the_leader_writes_and_the_other_takes_over(rlab: LabHandle,
                                                                      certs) -> None:
    ns = namespace(rlab, "ha")
    cq = unique("ha-cq")
    lease = unique("pykueue-ha")
    make_queue(rlab, cq, (ns,), cpu="4")
    a = Pykueue(rlab, certs, free_port(), leader_election=True, lease_name=lease).start()
    b = Pykueue(rlab, certs, free_port(), leader_election=True, lease_name=lease).start()
    procs = {a.proc.pid: a, b.proc.pid: b}
    try:
        a.wait_ready(90)
        b.wait_ready(90)  # both serve (readyz) while only one leads
        holder = wait_for(lambda: ((_lease(rlab, lease) or {}).get("spec") or {})
                          .get("holderIdentity"), 30, "a leader")
        leader_pid = int(holder.split("_")[-2])
        leader, follower = procs[leader_pid], procs[next(p for p in procs if p != leader_pid)]
        _submit(rlab, ns, [f"h{i}" for i in range(4)], 4, cpu="1", duration="2s")
        wait_for(lambda: len(_jobs(rlab, ns)) == 4 and all(_complete(j) for j in _jobs(rlab, ns)),
                 90, "first Jobs complete")
        writers = {e.get("reportingInstance") for e in _pykueue_events(rlab, ns)}
        assert writers == {holder}, writers  # every pykueue write came from the leader
        t_kill = time.time()
        leader.kill9()
        new_holder = wait_for(lambda: (h := ((_lease(rlab, lease) or {}).get("spec") or {})
                                       .get("holderIdentity")) and h != holder and h,
                              30, "the follower takes the lease")
        t_took = time.time() - t_kill
        assert int(new_holder.split("_")[-2]) == follower.proc.pid
        _submit(rlab, ns, [f"k{i}" for i in range(4)], 4, cpu="1", duration="2s")
        wait_for(lambda: len(_jobs(rlab, ns)) == 8 and all(_complete(j) for j in _jobs(rlab, ns)),
                 90, "Jobs after the takeover complete")
        later = {e.get("reportingInstance") for e in _pykueue_events(rlab, ns)
                 if e["involvedObject"]["name"].startswith(("k", "job-k"))}
        assert later == {new_holder}, later
        assert t_took < 4 + 2 + 3, t_took  # lease duration + retry period + slack
        print(f"\nHA: takeover {t_took:.1f}s after kill -9 (lease 4s)")
    finally:
        a.stop()
        b.stop()
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")
