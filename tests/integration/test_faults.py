"""Fault injection on the real control plane: pykueue (``pykueue serve``, leader election on, as
shipped) keeps its promises while the pieces around it fail.

Faults: kube-apiserver killed with ``kill -9`` while Jobs are queued; etcd frozen with
SIGSTOP; the leading replica killed with a second one waiting; one Job updated thousands of
times while others queue. Every 100 ms, through the API, three invariants are sampled:

- quota: no ClusterQueue's reserved usage (unfinished admitted Workloads) exceeds its quota;
- pods: the CPU requested by the bound, not yet terminated pods of the namespace never exceeds
  its ClusterQueues' quota (nothing runs that was not admitted);
- gate: every Job that is not suspended and not finished has a Workload holding an admission
  (Jobs are listed before Workloads, so a release, which follows the Job's suspension, is
  never mistaken for a violation).

After each fault every Job completes exactly once, and a probe Job created when the fault
ends (in a ClusterQueue of its own, so it never waits for quota) is admitted: its time from
creation to admission is the fault's recovery time.

The short version runs in ``make test``; ``make faults`` runs the long one
(``PYKUEUE_FAULTS=long``: etcd frozen 15 s instead of 5, 5,000 updates instead of 300, more
Jobs) and prints the table of faults (``-s``).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.quantity import parse_quantity
from tests.integration.reconciler_support import (
    Pykueue,
    UsageSampler,
    apply,
    cond,
    is_admitted,
    job_manifest,
    make_certs,
    make_queue,
    namespace,
    restart_apiserver,
    rlab_fixture,  # noqa: F401 - fixture
    unique,
    workload_of,
)
from tests.labfixture import LabHandle, wait_for
from tests.pykueue_server import free_port

pytestmark = pytest.mark.lab

LONG = os.environ.get("PYKUEUE_FAULTS") == "long"
QUOTA_CPU = 4
N_JOBS = 40 if LONG else 12
ETCD_FROZEN_SECONDS = 15.0 if LONG else 5.0
UPDATES = 5000 if LONG else 300
RESULTS: list[dict] = []


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module", autouse=True)
def fault_table() -> Iterator[None]:
    """Print the faults' table (and JSON) once the module's tests ran."""
    yield
    if not RESULTS:
        return
    print("\n\nfault                         | recovery s | samples | violations | jobs")
    for r in RESULTS:
        print(f"{r['fault']:<29} | {r['recovery_s']:>10.2f} | {r['samples']:>7} | "
              f"{r['violations']:>10} | {r['jobs']}")
    print(json.dumps({"faults": RESULTS}))


class PodSampler:
    """Every ``interval`` s, through the API: the amount of ``resource`` (milli-CPU for cpu,
    counts for GPUs) requested by the bound, not yet terminated pods of namespace ``ns``, and
    (``jobs_gate``) whether each unsuspended, unfinished Job has a Workload holding an
    admission. Records violations of ``quota`` and of the gate."""

    def __init__(self, lab: LabHandle, ns: str, quota: int, interval: float = 0.1, *,
                 resource: str = "cpu", jobs_gate: bool = True) -> None:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=str(lab.kubeconfig))
        self.core, self.batch = client.CoreV1Api(api), client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.ns, self.quota, self.interval = ns, quota, interval
        self.resource, self.jobs_gate = resource, jobs_gate
        self.samples, self.peak = 0, 0
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the API server or etcd is the fault under test
                pass
            self._stop.wait(self.interval)

    def check(self) -> None:
        pods = self.core.list_namespaced_pod(self.ns).items
        running = 0
        for p in pods:
            if not p.spec.node_name or p.status.phase in ("Succeeded", "Failed"):
                continue
            for c in p.spec.containers:
                req = (c.resources.requests or {}) if c.resources else {}
                running += parse_quantity(req.get(self.resource, "0"), self.resource)
        self.peak = max(self.peak, running)
        if running > self.quota:
            self.violations.append(f"pods request {running} {self.resource} > quota {self.quota}")
        if not self.jobs_gate:
            self.samples += 1
            return
        jobs = self.batch.list_namespaced_job(self.ns).items
        wls = self.custom.list_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", self.ns, "workloads")["items"]
        holding = {ref["uid"] for w in wls if (w.get("status") or {}).get("admission")
                   for ref in w["metadata"].get("ownerReferences") or []}
        for j in jobs:
            done = any(c.type in ("Complete", "Failed") and c.status == "True"
                       for c in j.status.conditions or [])
            if not j.spec.suspend and not done and j.metadata.uid not in holding:
                self.violations.append(f"Job {j.metadata.name} runs without an admission")
        self.samples += 1

    def __enter__(self) -> PodSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


class Run:
    """One fault's setting: a namespace, a ClusterQueue of ``QUOTA_CPU`` CPUs, the samplers."""

    def __init__(self, lab: LabHandle, name: str) -> None:
        self.lab, self.name = lab, name
        self.ns = namespace(lab, name)
        self.cq, self.probe_cq = unique(f"{name}-cq"), unique(f"{name}-probe")
        make_queue(lab, self.cq, (self.ns,), cpu=str(QUOTA_CPU))
        # The probe has a ClusterQueue of its own: its wait measures pykueue, not the queue.
        make_queue(lab, self.probe_cq, (self.ns,), cpu="1", lq="probe")
        self.quota = UsageSampler(lab, {self.cq: {"rec-default/cpu": QUOTA_CPU * 1000},
                                        self.probe_cq: {"rec-default/cpu": 1000}})
        self.pods = PodSampler(lab, self.ns, (QUOTA_CPU + 1) * 1000)
        self.names: list[str] = []

    def submit(self, n: int, prefix: str = "j", duration: str = "2s") -> list[str]:
        names = [f"{prefix}{i:03d}" for i in range(len(self.names), len(self.names) + n)]
        for i in range(0, n, 10):
            apply(self.lab, *(job_manifest(x, self.ns, "lq", cpu="1", duration=duration)
                              for x in names[i:i + 10]))
        self.names += names
        return names

    def load(self) -> None:
        """``N_JOBS`` 1-CPU Jobs queued, the first admitted: the state a fault hits."""
        self.submit(N_JOBS)
        wait_for(lambda: is_admitted(workload_of(self.lab, self.ns, self.names[0])), 60,
                 "the first Job admitted")

    def probe(self) -> float:
        """Create a 1-CPU Job; seconds until its Workload is admitted (or it completed)."""
        name = f"probe-{len(self.names)}"
        t0 = time.monotonic()
        apply(self.lab, job_manifest(name, self.ns, "probe", cpu="1", duration="1s"))
        self.names.append(name)
        wait_for(lambda: is_admitted(workload_of(self.lab, self.ns, name)), 120,
                 f"probe {name} admitted", interval=0.1)
        return time.monotonic() - t0

    def finish(self, fault: str, recovery: float) -> None:
        """Wait for every Job to complete; assert each ran once and no invariant broke."""
        lab, ns = self.lab, self.ns

        def jobs() -> list[dict]:
            return lab.get("jobs", "-n", ns)["items"]

        wait_for(lambda: len(jobs()) == len(self.names) and all(
            (cond(j, "Complete") or {}).get("status") == "True" for j in jobs()), 300,
            f"all {len(self.names)} Jobs complete after {fault}", interval=2.0)
        self.quota.__exit__()
        self.pods.__exit__()
        for j in jobs():
            st = j.get("status") or {}
            assert (st.get("succeeded"), st.get("failed", 0)) == (1, 0), (j["metadata"]["name"], st)
        violations = self.quota.violations + self.pods.violations
        RESULTS.append({"fault": fault, "recovery_s": round(recovery, 2),
                        "samples": self.quota.samples + self.pods.samples,
                        "violations": len(violations), "jobs": len(self.names),
                        "peak_pod_cpu_milli": self.pods.peak})
        assert self.pods.samples > 10 and self.quota.samples > 10, "the samplers did not run"
        assert not violations, violations[:5]

    def __enter__(self) -> Run:
        self.quota.__enter__()
        self.pods.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.quota.__exit__()
        self.pods.__exit__()
        self.lab.kubectl("delete", "namespace", self.ns, "--wait=false", check=False)
        self.lab.kubectl("delete", "clusterqueue", self.cq, self.probe_cq, "--wait=false",
                         check=False)


def _pid(lab: LabHandle, name: str) -> int:
    return int((lab.state / "pids" / f"{name}.pid").read_text())


def _pykueue(lab: LabHandle, certs: Path, lease: str) -> Pykueue:
    p = Pykueue(lab, certs, free_port(), leader_election=True, lease_name=lease).start()
    p.wait_ready(90)
    return p


def test_kube_apiserver_killed_with_jobs_queued(rlab: LabHandle, certs: Path) -> None:
    pk = _pykueue(rlab, certs, unique("faults"))
    try:
        with Run(rlab, "f-api") as run:
            run.load()
            restart_apiserver(rlab, 1.0, kill9=True)
            run.finish("kube-apiserver kill -9", run.probe())
    finally:
        pk.stop()


def test_etcd_frozen(rlab: LabHandle, certs: Path) -> None:
    pk = _pykueue(rlab, certs, unique("faults"))
    try:
        with Run(rlab, "f-etcd") as run:
            run.load()
            etcd = _pid(rlab, "etcd")
            os.kill(etcd, signal.SIGSTOP)
            try:
                time.sleep(ETCD_FROZEN_SECONDS)  # the fault's length, not a wait for a state
            finally:
                os.kill(etcd, signal.SIGCONT)
            assert pk.proc is not None and pk.proc.poll() is None, "pykueue exited"
            run.finish(f"etcd SIGSTOP {ETCD_FROZEN_SECONDS:.0f} s", run.probe())
    finally:
        pk.stop()


def _holder(lab: LabHandle, lease: str) -> str | None:
    r = lab.kubectl("get", "lease", lease, "-n", "pykueue-system", "-o", "json", check=False)
    return (json.loads(r.stdout).get("spec") or {}).get("holderIdentity") \
        if r.returncode == 0 else None


def test_leader_killed_with_a_replica_waiting(rlab: LabHandle, certs: Path) -> None:
    lease = unique("faults")
    a, b = _pykueue(rlab, certs, lease), _pykueue(rlab, certs, lease)
    replicas = {a.proc.pid: a, b.proc.pid: b}  # type: ignore[union-attr]
    try:
        with Run(rlab, "f-lead") as run:
            holder = wait_for(lambda: _holder(rlab, lease), 30, "a leader")
            run.load()
            replicas[int(holder.split("_")[-2])].kill9()
            run.finish("leader kill -9, replica waiting", run.probe())
            assert _holder(rlab, lease) != holder
    finally:
        a.stop()
        b.stop()


def test_one_job_updated_thousands_of_times(rlab: LabHandle, certs: Path) -> None:
    """A tenant's loop of updates to one queued Job (annotations, as `kubectl annotate
    --overwrite` would) while other Jobs queue: the others keep being admitted and the quota
    holds."""
    from kubernetes import client, config

    batch = client.BatchV1Api(config.new_client_from_config(config_file=str(rlab.kubeconfig)))
    pk = _pykueue(rlab, certs, unique("faults"))
    try:
        with Run(rlab, "f-upd") as run:
            apply(rlab, job_manifest("big", run.ns, "lq", cpu=str(QUOTA_CPU + 1)))  # never fits
            run.submit(N_JOBS // 2)
            t0 = time.monotonic()
            for i in range(UPDATES):
                batch.patch_namespaced_job("big", run.ns, {"metadata": {"annotations": {
                    "faults.pykueue.dev/n": str(i)}}})
            took = time.monotonic() - t0
            recovery = run.probe()
            batch.delete_namespaced_job("big", run.ns, propagation_policy="Background")
            run.finish(f"{UPDATES} updates of one Job ({UPDATES / took:.0f}/s)", recovery)
    finally:
        pk.stop()
