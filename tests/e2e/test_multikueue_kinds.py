"""MultiKueue for a TrainJob (Kubeflow Trainer v2.2.0), an AppWrapper (v1.2.0) and an
MPIJob (mpi-operator v0.8.0) across the three labs of tests/e2e/test_multikueue.py
(hack/multikueue_lab.py): the operators run on worker1 only (with the JobSet operator: a
TrainJob runs as a JobSet); the manager has their CRDs and no controller, as a MultiKueue
manager needs (its objects run on a worker). worker1 has CPU quota, worker2 none (its Workload
copy waits), so worker1 wins.

Each test: the manager's object gets ``managedBy: kueue.x-k8s.io/multikueue`` from pykueue's
webhook, its Workload's check goes Ready on worker1, the copy there (prebuilt and origin
labels, the operator's own managedBy) adopts the Workload copy and runs under the real
operator, its status comes back to the manager's object, and worker1 is cleaned up when it
finishes (TrainJob, MPIJob) or is evicted and deleted on the manager (AppWrapper).

What is not running is started here and stopped after the module (pykueue restarted on a lab
whose CRDs it did not have yet: it sets a kind up at start or at its next discovery poll, up
to 2 min later). Skipped, saying why, when an operator is not built or (MPIJob) when another
lab holds port 8080, which mpi-operator v0.8.0 hard-codes.
"""

from __future__ import annotations

import socket
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_multikueue import MK, NS, _alive, _apply, _check, _cond, _get, _owned, _setup
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import multikueue_lab as mk  # noqa: E402

pytestmark = pytest.mark.lab
QUEUE = {"kueue.x-k8s.io/queue-name": "mk-lq"}
RUNTIME = "mk-torch"
TRAINER = "trainer.kubeflow.org/trainjob-controller"
AW_LABEL = "workload.codeflare.dev/appwrapper"
MPI_HEALTH_PORT = 8080
# The operators on worker1, each with a CRD of it; the manager gets the CRDs of the last three.
WORKER_OPERATORS = (("jobset", "jobsets.jobset.x-k8s.io"),
                    ("trainer", "trainjobs.trainer.kubeflow.org"),
                    ("appwrapper", "appwrappers.workload.codeflare.dev"),
                    ("mpi-operator", "mpijobs.kubeflow.org"))
MANAGER_CRDS = WORKER_OPERATORS[1:]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))  # noqa: S104 - mpi-operator binds every interface
        except OSError:
            return False
    return True


def _has_crd(site: mk.Site, crd: str) -> bool:
    return site.kubectl("get", "crd", crd, check=False).returncode == 0


def _restart_pykueue(site: mk.Site) -> None:
    site.lab("pykueue-down")
    site.lab("pykueue-up")


def _runtime() -> dict:
    """A ClusterTrainingRuntime of one trainer step ``node`` whose pods run 4 s."""
    pod = {"metadata": {"annotations": {"lab.pykueue.dev/run-duration": "4s"}},
           "spec": {"restartPolicy": "Never",
                    "containers": [{"name": "node", "image": "busybox"}]}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": RUNTIME},
            "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [
                {"name": "node", "template": {
                    "metadata": {"labels": {
                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"backoffLimit": 0, "template": pod}}}]}}}}


@pytest.fixture(scope="module")
def kinds_sites(lab: LabHandle) -> Iterator[dict[str, Any]]:
    """The three labs, the operators on worker1 and their CRDs on the manager, the queues of
    tests/e2e/test_multikueue.py and the TrainJob runtime on both; yields the sites and which
    kinds can run (``ok``: kind -> None, or why not)."""
    all_sites = mk.sites(str(lab.state), lab.port_base)
    manager, w1, _ = all_sites
    started = [s for s in all_sites if not mk.is_up(s)]
    for s in started:
        mk.start(s, ("jobset",))
    ok: dict[str, str | None] = {}
    built = {o: mk.operator_built(o) for o, _ in WORKER_OPERATORS}
    mpi_busy = not _alive(w1, "mpi-operator") and not _port_free(MPI_HEALTH_PORT)
    for kind, need in (("TrainJob", ("jobset", "trainer")), ("AppWrapper", ("appwrapper",)),
                       ("MPIJob", ("mpi-operator",))):
        missing = [o for o in need if not built[o]]
        ok[kind] = f"{', '.join(missing)} not built: run `make operators`" if missing else None
    if ok["MPIJob"] is None and mpi_busy:
        ok["MPIJob"] = (f"port {MPI_HEALTH_PORT} is taken (mpi-operator v0.8.0 hard-codes its "
                        "health port: one per machine)")
    run = [o for o, _ in WORKER_OPERATORS if built[o]
           and not (o == "mpi-operator" and ok["MPIJob"] is not None)]
    ops_started = [o for o in run if not _alive(w1, o)]
    new_on_w1 = [crd for o, crd in WORKER_OPERATORS if o in run and not _has_crd(w1, crd)]
    new_on_manager = [crd for o, crd in MANAGER_CRDS if built[o] and not _has_crd(manager, crd)]
    try:
        if run:
            w1.lab("operators-up", *run)
        if new_on_w1 and w1 not in started:
            _restart_pykueue(w1)
        crds = [o for o, _ in MANAGER_CRDS if built[o]]
        if crds:
            manager.lab("operators-crds", *crds)
        if new_on_manager and manager not in started:
            _restart_pykueue(manager)
        _setup(all_sites)
        if ok["TrainJob"] is None:
            _apply(manager, _runtime())
            _apply(w1, _runtime())
        yield {"sites": all_sites, "ok": ok}
    finally:
        for o in ops_started:
            w1.lab("operators-down", o, check=False)
        for s in started:
            s.lab("pykueue-down", check=False)
            if s is not all_sites[0]:
                s.lab("down", check=False)


def _sites_for(kinds_sites: dict[str, Any], kind: str) -> list[mk.Site]:
    why = kinds_sites["ok"][kind]
    if why:
        pytest.skip(f"{kind}: {why}")
    return kinds_sites["sites"]  # type: ignore[no-any-return]


def _placed_on_worker1(manager: mk.Site, w1: mk.Site, w2: mk.Site, kind: str, name: str,
                       managed_by: tuple[str, ...], own: str | None) -> dict:
    """The manager's ``kind/name`` has ``managedBy`` (at path ``managed_by``) defaulted to
    MultiKueue; its Workload's check goes Ready on worker1, whose copy (prebuilt and origin
    labels, managedBy the operator's own ``own``: its CRD's default, or unset) adopts the
    Workload copy; worker2 gets no copy of the object. Returns the manager's Workload."""
    def at(obj: dict | None) -> Any:
        for key in managed_by:
            obj = (obj or {}).get(key)
        return obj
    assert at(_get(manager, kind.lower(), "-n", NS, name)) == MK
    wl = wait_for(lambda: (w := _owned(manager, kind, name)) and _check(w).get("state")
                  == "Ready" and w, 40, f"the manager {kind}'s check Ready")
    assert wl["status"]["clusterName"] == "worker1"
    assert _check(wl)["message"] == 'The workload got reservation on "worker1"'
    wl_name = wl["metadata"]["name"]
    remote = wait_for(lambda: _get(w1, kind.lower(), "-n", NS, name), 20,
                      f"the {kind} on worker1")
    assert at(remote) == own
    labels = remote["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/prebuilt-workload-name"] == wl_name
    assert labels["kueue.x-k8s.io/multikueue-origin"] == "multikueue"
    wait_for(lambda: (_owned(w1, kind, name) or {}).get("metadata", {}).get("name")
             == wl_name, 20, f"worker1's {kind} adopting the Workload copy")
    assert _get(w2, kind.lower(), "-n", NS, name) is None
    return wl


def _finished_and_cleaned(manager: mk.Site, w1: mk.Site, kind: str, name: str,
                          wl_name: str) -> None:
    """The manager's Workload Finished (from worker1's), worker1's object and Workload copy
    deleted."""
    wait_for(lambda: (_cond(_owned(manager, kind, name), "Finished") or {}).get("status")
             == "True", 30, f"the manager {kind}'s Workload Finished")
    wait_for(lambda: _get(w1, kind.lower(), "-n", NS, name) is None
             and _get(w1, "workload", "-n", NS, wl_name) is None, 30,
             f"worker1's {kind} and Workload copy deleted once finished")


def _no_pods(site: mk.Site) -> list[dict]:
    return [p for p in (_get(site, "pods", "-n", NS) or {}).get("items") or []]


def test_a_trainjob_runs_on_the_worker_under_the_trainer_status_mirrored_and_cleaned_up(
        kinds_sites):
    """Kueue v0.17.1's TrainJob adapter: ``spec.managedBy`` defaulted on the manager over the
    trainer CRD's default, the TrainJob copied to worker1 (the CRD defaults managedBy to the
    trainer's there), where the trainer makes its JobSet and the pods run; the worker's status
    (``Complete``, ``jobsStatus``) is mirrored to the manager's, whose Workload finishes, and
    worker1's TrainJob, Workload copy and JobSet go."""
    manager, w1, w2 = _sites_for(kinds_sites, "TrainJob")
    name = f"mktj-{uuid.uuid4().hex[:6]}"
    cpu = {"cpu": "1"}
    t0 = time.monotonic()
    _apply(manager, {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                     "metadata": {"name": name, "namespace": NS, "labels": QUEUE},
                     "spec": {"runtimeRef": {"name": RUNTIME},
                              "trainer": {"numNodes": 1, "resourcesPerNode": {
                                  "requests": cpu, "limits": cpu}}}})
    try:
        wl = _placed_on_worker1(manager, w1, w2, "TrainJob", name, ("spec", "managedBy"),
                                TRAINER)
        ready = time.monotonic() - t0
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("node", 1)]
        wait_for(lambda: _get(w1, "jobset", "-n", NS, name), 30,
                 "the trainer's JobSet on worker1")

        def complete() -> dict | None:
            tj = _get(manager, "trainjob", "-n", NS, name) or {}
            return tj if any(c["type"] == "Complete" and c["status"] == "True"
                             for c in (tj.get("status") or {}).get("conditions") or []) else None
        tj = wait_for(complete, 60, "worker1's TrainJob status (Complete) mirrored")
        done = time.monotonic() - t0
        assert [s["name"] for s in tj["status"]["jobsStatus"]] == ["node"]
        _finished_and_cleaned(manager, w1, "TrainJob", name, wl["metadata"]["name"])
        cleaned = time.monotonic() - t0
        wait_for(lambda: _get(w1, "jobset", "-n", NS, name) is None, 30,
                 "worker1's JobSet deleted with its TrainJob")
        # No trainer on the manager: no JobSet, no pod there.
        assert _get(manager, "jobset", "-n", NS, name) is None
        assert not [p for p in _no_pods(manager) if p["metadata"]["name"].startswith(name)]
    finally:
        manager.kubectl("delete", "trainjob", "-n", NS, name, "--wait=false", check=False)
    print(f"\nmultikueue trainjob: created -> check Ready on worker1 {ready:.1f}s, -> Complete "
          f"mirrored {done:.1f}s, -> worker1 cleaned {cleaned:.1f}s")


def _appwrapper(name: str) -> dict:
    """An AppWrapper queued in mk-lq wrapping the batch Job ``<name>-job`` of one 1-CPU pod
    that runs 10 minutes."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{name}-job"},
           "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {
               "metadata": {"annotations": {"lab.pykueue.dev/run-duration": "600s"}},
               "spec": {"restartPolicy": "Never", "containers": [{
                   "name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}}}
    return {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": {"name": name, "namespace": NS, "labels": QUEUE},
            "spec": {"components": [{"template": job}]}}


def test_an_appwrapper_runs_on_the_worker_is_evicted_and_deleted_there(kinds_sites):
    """Kueue v0.17.1's AppWrapper adapter with the AppWrapper controller on worker1: the
    manager's AppWrapper (managedBy defaulted; no controller there) runs on worker1, its
    status (phase ``Running``) mirrored; deactivated on the manager, worker1's copies go and
    the mirrored status is cleared, so the quota is released; active again it runs on worker1
    again; deleted on the manager, worker1's AppWrapper, Workload copy and wrapped Job go."""
    manager, w1, w2 = _sites_for(kinds_sites, "AppWrapper")
    name = f"mkaw-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    _apply(manager, _appwrapper(name))
    try:
        wl = _placed_on_worker1(manager, w1, w2, "AppWrapper", name, ("spec", "managedBy"),
                                None)
        ready = time.monotonic() - t0
        wl_name = wl["metadata"]["name"]

        def running() -> dict | None:
            st = (_get(manager, "appwrapper", "-n", NS, name) or {}).get("status") or {}
            pods = [p for p in (_get(w1, "pods", "-n", NS, "-l", f"{AW_LABEL}={name}") or {})
                    .get("items") or [] if p["status"].get("phase") == "Running"]
            return st if st.get("phase") == "Running" and pods and any(
                c["type"] == "QuotaReserved" and c["status"] == "True"
                for c in st.get("conditions") or []) else None
        wait_for(running, 60, "the wrapped Job's pod Running on worker1, phase Running "
                 "mirrored")
        mirrored = time.monotonic() - t0
        assert not _no_pods(manager)
        assert _get(manager, "job", "-n", NS, f"{name}-job") is None

        t1 = time.monotonic()
        manager.kubectl("patch", "workload", "-n", NS, wl_name, "--type=merge",
                        "-p", '{"spec":{"active":false}}')

        def released() -> bool:
            st = (_get(manager, "workload", "-n", NS, wl_name) or {}).get("status") or {}
            aw = (_get(manager, "appwrapper", "-n", NS, name) or {}).get("status") or {}
            return "admission" not in st and "clusterName" not in st \
                and "phase" not in aw and "conditions" not in aw \
                and _get(w1, "appwrapper", "-n", NS, name) is None
        wait_for(released, 30, "the AppWrapper's quota released and worker1's copy deleted")
        evicted = time.monotonic() - t1
        wait_for(lambda: _get(w1, "job", "-n", NS, f"{name}-job") is None, 30,
                 "the wrapped Job gone from worker1")
        manager.kubectl("patch", "workload", "-n", NS, wl_name, "--type=merge",
                        "-p", '{"spec":{"active":true}}')
        wait_for(running, 60, "the AppWrapper Running on worker1 again, mirrored")

        t2 = time.monotonic()
        manager.kubectl("delete", "appwrapper", "-n", NS, name, "--wait=false")
        wait_for(lambda: _get(w1, "appwrapper", "-n", NS, name) is None
                 and _get(w1, "workload", "-n", NS, wl_name) is None
                 and _get(w1, "job", "-n", NS, f"{name}-job") is None, 30,
                 "worker1's AppWrapper, Workload copy and wrapped Job deleted")
        deleted = time.monotonic() - t2
    finally:
        manager.kubectl("delete", "appwrapper", "-n", NS, name, "--wait=false", check=False)
    print(f"\nmultikueue appwrapper: created -> check Ready on worker1 {ready:.1f}s, -> "
          f"Running mirrored {mirrored:.1f}s; deactivated -> released, copy deleted "
          f"{evicted:.1f}s; deleted -> worker1 cleaned {deleted:.1f}s")


def _mpi_template(name: str, run: str) -> dict:
    return {"metadata": {"annotations": {"lab.pykueue.dev/run-duration": run}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": name, "image": "mpioperator/mpi-pi:openmpi",
                "resources": {"requests": {"cpu": "1"}}}]}}


def test_an_mpijob_runs_on_the_worker_under_the_mpi_operator_status_mirrored(kinds_sites):
    """Kueue v0.17.1's Kubeflow adapter for MPIJob v2beta1 with mpi-operator v0.8.0 on worker1
    only: ``spec.runPolicy.managedBy`` defaulted on the manager, the MPIJob copied to worker1
    without it, where the mpi-operator runs the launcher and the worker; the launcher ends,
    ``Succeeded`` is mirrored to the manager's MPIJob, the manager's Workload finishes and
    worker1's copies go."""
    manager, w1, w2 = _sites_for(kinds_sites, "MPIJob")
    name = f"mkmpi-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    _apply(manager, {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                     "metadata": {"name": name, "namespace": NS, "labels": QUEUE},
                     "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running"},
                              "mpiReplicaSpecs": {
                                  "Launcher": {"replicas": 1, "template": _mpi_template(
                                      "launcher", "3s")},
                                  "Worker": {"replicas": 1, "template": _mpi_template(
                                      "worker", "600s")}}}})
    try:
        wl = _placed_on_worker1(manager, w1, w2, "MPIJob", name,
                                ("spec", "runPolicy", "managedBy"), None)
        ready = time.monotonic() - t0
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("launcher", 1), ("worker", 1)]

        def succeeded() -> bool:
            st = (_get(manager, "mpijob", "-n", NS, name) or {}).get("status") or {}
            return any(c["type"] == "Succeeded" and c["status"] == "True"
                       for c in st.get("conditions") or [])
        wait_for(succeeded, 60, "worker1's MPIJob status (Succeeded) mirrored")
        done = time.monotonic() - t0
        _finished_and_cleaned(manager, w1, "MPIJob", name, wl["metadata"]["name"])
        assert not [p for p in _no_pods(manager) if p["metadata"]["name"].startswith(name)]
    finally:
        manager.kubectl("delete", "mpijob", "-n", NS, name, "--wait=false", check=False)
    print(f"\nmultikueue mpijob: created -> check Ready on worker1 {ready:.1f}s, -> Succeeded "
          f"mirrored {done:.1f}s")


def test_the_manager_runs_no_operator_of_these_kinds(kinds_sites):
    """The manager has the kinds' CRDs only (this module's premise: a MultiKueue manager's
    objects run on a worker); worker1 runs the operators."""
    manager, w1, _ = kinds_sites["sites"]
    for o, crd in MANAGER_CRDS:
        if kinds_sites["ok"][{"trainer": "TrainJob", "appwrapper": "AppWrapper",
                              "mpi-operator": "MPIJob"}[o]] is None:
            assert _has_crd(manager, crd), crd
            assert not _alive(manager, o), f"{o} runs on the manager"
            assert _alive(w1, o), f"{o} does not run on worker1"
