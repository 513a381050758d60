"""MultiKueue across three labs (hack/multikueue_lab.py): a manager and two workers, pykueue on
each. The manager's ClusterQueue has a MultiKueue AdmissionCheck whose config lists both
workers; worker1 has CPU quota for the Job, worker2 has none (its Workload copy waits), so
worker1's copy is the first to reserve quota.

The session's lab is the manager; the workers' labs (``<state>/../.lab-w1`` and ``-w2``, port
bases +100 and +200) and pykueue on each are started when not running
(``python hack/multikueue_lab.py up`` starts all three beforehand). The JobSet operator,
training-operator and KubeRay run on every lab (when built); Kubeflow Trainer, AppWrapper and
mpi-operator on worker1 only, their CRDs alone on the manager (a MultiKueue manager's objects of
those kinds run on a worker; mpi-operator's health port 8080 exists once per machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import multikueue_lab as mk  # noqa: E402

MK = "kueue.x-k8s.io/multikueue"
NS = "mk-e2e"


def _get(site: mk.Site, *args: str) -> dict[str, Any] | None:
    r = site.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def _apply(site: mk.Site, *objs: dict) -> None:
    site.kubectl("apply", "-f", "-",
                 input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def _cond(obj: dict | None, ctype: str) -> dict | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return None


def _queues(cpus: int, checks: list[str]) -> list[dict]:
    k = "kueue.x-k8s.io/v1beta2"
    cq_spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": "mk-flavor", "resources": [{"name": "cpu", "nominalQuota": cpus}]}]}]}
    if checks:
        cq_spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": k, "kind": "ResourceFlavor", "metadata": {"name": "mk-flavor"}},
        {"apiVersion": k, "kind": "ClusterQueue", "metadata": {"name": "mk-cq"},
         "spec": cq_spec},
        {"apiVersion": k, "kind": "LocalQueue", "metadata": {"name": "mk-lq", "namespace": NS},
         "spec": {"clusterQueue": "mk-cq"}},
    ]


# Set by ``sites`` on its module: whether pykueue on the manager is stopped after the module
# (``soonest`` then leaves it as it is instead of restarting it with the settings it had).
MANAGER_STOPPED_AFTER = pytest.StashKey[bool]()


@pytest.fixture(scope="module")
def sites(lab: LabHandle, request: pytest.FixtureRequest, mk_kept: set[str]
          ) -> Iterator[list[mk.Site]]:
    """The session's lab as the manager, two worker labs beside it; what is not running
    (a worker lab, pykueue or an operator on any) is started here and stopped after the
    module. What this session started is left running when the next module uses these labs
    too (tests/e2e/conftest.py runs those modules one after another): that module takes it
    over (``mk_kept``) instead of starting it again."""
    all_sites = mk.sites(str(lab.state), lab.port_base)
    manager, w1, _ = all_sites
    on_w1 = [o for o, _ in WORKER1_OPERATORS if mk.operator_built(o) and (
        o != "mpi-operator" or _alive(w1, o) or _port_free(MPI_HEALTH_PORT))]
    ops = {s.name: [o for o, _ in OPERATORS] + (on_w1 if s is w1 else []) for s in all_sites}
    crds = {manager.name: [o for o, _ in WORKER1_OPERATORS if mk.operator_built(o)]}
    started = [s for s in all_sites if not mk.is_up(s)]
    # What an earlier module started and kept up for this one is this module's to stop.
    owned = started + [s for s in all_sites if s.name in mk_kept and s not in started]
    mk_kept.difference_update(s.name for s in owned)
    keep = _next_module_uses_sites(request)
    request.node.stash[MANAGER_STOPPED_AFTER] = manager in owned and not keep
    ops_started = {s.name: _operators_up(s, ops[s.name], crds.get(s.name, []))
                   for s in all_sites if s not in started}
    for s in started:
        mk.start(s, tuple(ops[s.name]), tuple(crds.get(s.name, [])))
    try:
        _setup(all_sites)
        yield all_sites
    finally:
        for s in owned:
            if keep:
                mk_kept.add(s.name)
                continue
            s.lab("pykueue-down", check=False)
            if s is not manager:
                s.lab("down", check=False)
        for s in all_sites:
            for o in ops_started.get(s.name, []):
                s.lab("operators-down", o, check=False)


def _next_module_uses_sites(request: pytest.FixtureRequest) -> bool:
    """Whether the test run next after this module's last test uses ``sites``."""
    items = request.session.items
    mine = [i for i, item in enumerate(items) if item.getparent(pytest.Module) is request.node]
    return bool(mine) and mine[-1] + 1 < len(items) \
        and "sites" in items[mine[-1] + 1].fixturenames


def _alive(site: mk.Site, name: str) -> bool:
    try:
        os.kill(int((site.state / "pids" / f"{name}.pid").read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))  # noqa: S104 - mpi-operator binds every interface
        except OSError:
            return False
    return True


# The operators on every lab (when built), with a CRD of each.
OPERATORS = (("jobset", "jobsets.jobset.x-k8s.io"),
             ("training-operator", "pytorchjobs.kubeflow.org"),
             ("kuberay", "rayjobs.ray.io"))
# The operators on worker1 only (when built; mpi-operator when its port is free), their CRDs
# alone on the manager.
WORKER1_OPERATORS = (("trainer", "trainjobs.trainer.kubeflow.org"),
                     ("appwrapper", "appwrappers.workload.codeflare.dev"),
                     ("mpi-operator", "mpijobs.kubeflow.org"))
MPI_HEALTH_PORT = 8080  # mpi-operator v0.8.0 hard-codes it
_CRD = dict(OPERATORS + WORKER1_OPERATORS)


def _operators_up(site: mk.Site, names: list[str], crds: list[str]) -> list[str]:
    """Operators ``names`` (when built) and the CRDs alone of ``crds`` on ``site``, whose
    pykueue runs; returns the operators started here. pykueue sets a kind up at start-up or at
    its next discovery poll (up to 2 min): when a CRD was not there, pykueue is restarted
    (once) after installing them."""
    run = [o for o in names if mk.operator_built(o) and not _alive(site, o)]
    new = [o for o in run + crds if site.kubectl("get", "crd", _CRD[o], check=False).returncode]
    if run:
        site.lab("operators-up", *run)
    if crds:
        site.lab("operators-crds", *crds)
    if new:
        site.lab("pykueue-down")
        site.lab("pykueue-up")
    return run


def _setup(all_sites: list[mk.Site]) -> None:
    manager, w1, w2 = all_sites
    mk.register_workers(manager, [w1, w2])
    _apply(w1, *_queues(4, []))
    _apply(w2, *_queues(0, []))
    _apply(manager, *check_objects("mk-check", "mk-config", ["worker1", "worker2"]),
           *_queues(4, ["mk-check"]))


def check_objects(check: str, config: str, clusters: list[str]) -> list[dict]:
    """MultiKueueConfig ``config`` over ``clusters`` and AdmissionCheck ``check`` of the
    MultiKueue controller naming it."""
    k = "kueue.x-k8s.io/v1beta2"
    return [{"apiVersion": k, "kind": "MultiKueueConfig", "metadata": {"name": config},
             "spec": {"clusters": clusters}},
            {"apiVersion": k, "kind": "AdmissionCheck", "metadata": {"name": check},
             "spec": {"controllerName": MK, "parameters": {
                 "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config}}}]


def _job(name: str, run: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"kueue.x-k8s.io/queue-name": "mk-lq"}},
            "spec": {"parallelism": 1, "completions": 1, "template": {
                "metadata": {"annotations": {"lab.pykueue.dev/run-duration": run}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "c", "image": "busybox",
                    "resources": {"requests": {"cpu": "1"}}}]}}}}


def _workload(site: mk.Site, job: str) -> dict | None:
    wls = (_get(site, "workloads", "-n", NS) or {}).get("items") or []
    return next((w for w in wls if any(r.get("name") == job for r in
                                       w["metadata"].get("ownerReferences") or [])), None)


def test_dispatch_first_reservation_wins_status_mirrored_and_cleanup(sites):
    manager, w1, w2 = sites
    wait_for(lambda: (_cond(_get(manager, "admissioncheck", "mk-check"), "Active") or {})
             .get("status") == "True", 30, "the MultiKueue AdmissionCheck Active")
    name = f"mk-{uuid.uuid4().hex[:6]}"
    _apply(manager, _job(name, "6s"))
    job = _get(manager, "job", "-n", NS, name)
    assert job["spec"]["managedBy"] == MK  # defaulted by the webhook (ApplyDefaultForManagedBy)
    t0 = time.monotonic()

    def ready() -> dict | None:
        wl = _workload(manager, name)
        st = {c["name"]: c for c in ((wl or {}).get("status") or {}).get("admissionChecks")
              or []}.get("mk-check")
        return wl if st and st["state"] == "Ready" else None
    wl = wait_for(ready, 40, "the manager Workload's check Ready")
    dispatch = time.monotonic() - t0
    assert wl["status"]["clusterName"] == "worker1"
    assert "nominatedClusterNames" not in wl["status"]
    st = next(c for c in wl["status"]["admissionChecks"] if c["name"] == "mk-check")
    assert st["message"] == 'The workload got reservation on "worker1"'
    # worker1 reserved its copy of the Workload first: the Job goes there only, adopting it;
    # worker2's copy (no quota there) is deleted and no Job was ever created on worker2.
    remote = wait_for(lambda: _get(w1, "job", "-n", NS, name), 20, "the Job on worker1")
    assert "managedBy" not in remote["spec"]
    labels = remote["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/multikueue-origin"] == "multikueue"
    assert labels["kueue.x-k8s.io/prebuilt-workload-name"] == wl["metadata"]["name"]
    wait_for(lambda: (_workload(w1, name) or {}).get("metadata", {}).get("name")
             == wl["metadata"]["name"], 20, "worker1's Job adopting the Workload copy")
    wait_for(lambda: _get(w2, "workload", "-n", NS, wl["metadata"]["name"]) is None, 20,
             "worker2's Workload copy deleted")
    assert _get(w2, "job", "-n", NS, name) is None
    # The manager's Job gets the worker Job's status; no pod runs on the manager.
    wait_for(lambda: ((_get(manager, "job", "-n", NS, name) or {}).get("status") or {})
             .get("startTime"), 30, "the worker Job's status mirrored to the manager")
    print(f"\nmultikueue: manager admission -> check Ready on worker1: {dispatch:.1f}s")
    # Finished on the worker -> finished on the manager, copies removed.
    wait_for(lambda: (_cond(_workload(manager, name), "Finished") or {}).get("status")
             == "True", 60, "the manager Workload Finished")
    done = _get(manager, "job", "-n", NS, name)
    assert any(c["type"] == "Complete" and c["status"] == "True"
               for c in done["status"].get("conditions") or [])
    assert not (_get(manager, "pods", "-n", NS) or {}).get("items")
    wait_for(lambda: _get(w1, "job", "-n", NS, name) is None
             and _get(w1, "workload", "-n", NS, wl["metadata"]["name"]) is None, 30,
             "worker1's copies deleted")


def test_unusable_kubeconfigs_make_the_cluster_inactive_with_a_reason(sites):
    manager = sites[0]
    insecure = mk.worker_kubeconfig(sites[1])
    insecure["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    _apply(manager, mk.secret("mk-insecure", insecure), mk.secret("mk-garbage", "{[not yaml"),
           mk.cluster("mk-insecure", "mk-insecure"), mk.cluster("mk-garbage", "mk-garbage"),
           mk.cluster("mk-missing", "mk-no-such-secret"),
           mk.cluster("mk-path", "/etc/passwd", "Path"))
    want = {"mk-insecure": "InsecureKubeConfig", "mk-garbage": "InsecureKubeConfig",
            "mk-missing": "BadKubeConfig", "mk-path": "BadKubeConfig"}

    def reasons() -> dict[str, str] | None:
        got = {n: (_cond(_get(manager, "multikueuecluster", n), "Active") or {}) for n in want}
        if any(c.get("status") != "False" for c in got.values()):
            return None
        return {n: c["reason"] for n, c in got.items()}
    assert wait_for(reasons, 30, "the bad clusters Active=False") == want
    msg = _cond(_get(manager, "multikueuecluster", "mk-insecure"), "Active")["message"]
    assert "insecure TLS verification is not allowed" in msg
    path_msg = _cond(_get(manager, "multikueuecluster", "mk-path"), "Active")["message"]
    assert "locationType Path is refused" in path_msg
    assert (_cond(_get(manager, "multikueuecluster", "worker1"), "Active") or {}).get(
        "status") == "True"


def _placed(manager: mk.Site, w1: mk.Site, name: str) -> dict | None:
    """The manager's Workload of Job ``name`` once placed on worker1 with the Job there."""
    wl = _workload(manager, name)
    return wl if ((wl or {}).get("status") or {}).get("clusterName") == "worker1" \
        and _get(w1, "job", "-n", NS, name) else None


def _running_on_worker1(manager: mk.Site, w1: mk.Site) -> tuple[str, dict]:
    """A new 60 s Job queued on the manager, placed on worker1, its pod running there and
    counted on the manager's Job (``status.active`` 1, mirrored): its name and Workload."""
    name = f"mk-{uuid.uuid4().hex[:6]}"
    _apply(manager, _job(name, "60s"))
    wl = wait_for(lambda: _placed(manager, w1, name), 40, "the Job placed on worker1")
    wait_for(lambda: ((_get(manager, "job", "-n", NS, name) or {}).get("status") or {})
             .get("active") == 1, 30, "the worker's running pod mirrored")
    return name, wl


def test_eviction_on_the_manager_removes_the_copies_and_dispatches_again(sites):
    manager, w1, _ = sites
    # Its pod runs on worker1 and is counted on the manager's Job (mirrored): the manager's
    # quota is released only once that count is gone too.
    name, wl = _running_on_worker1(manager, w1)
    wl_name = wl["metadata"]["name"]
    manager.kubectl("patch", "workload", "-n", NS, wl_name, "--type=merge",
                    "-p", '{"spec":{"active":false}}')

    def forgotten() -> bool:
        st = (_get(manager, "workload", "-n", NS, wl_name) or {}).get("status") or {}
        return "clusterName" not in st and _get(w1, "job", "-n", NS, name) is None \
            and _get(w1, "workload", "-n", NS, wl_name) is None
    wait_for(forgotten, 30, "the copies deleted and clusterName reset after the eviction")
    manager.kubectl("patch", "workload", "-n", NS, wl_name, "--type=merge",
                    "-p", '{"spec":{"active":true}}')
    wait_for(lambda: _placed(manager, w1, name), 40, "the Job placed on worker1 again")
    manager.kubectl("delete", "job", "-n", NS, name, "--wait=false")
    wait_for(lambda: _get(w1, "job", "-n", NS, name) is None, 30,
             "worker1's copy deleted with the manager's Job")


def test_a_manager_job_whose_workload_is_deleted_gets_a_new_one(sites):
    """review25 MK: the Job runs on worker1, its manager copy's ``status.active`` 1
    mirrored. Its manager Workload deleted by hand (its copies go with it and nothing
    writes the mirrored count again): the Job gets a new Workload (another uid), which is
    placed on a worker again. Before, the manager's Job waited on the mirrored count for
    good: no Workload, ever."""
    manager, w1, _ = sites
    name, old = _running_on_worker1(manager, w1)
    try:
        manager.kubectl("delete", "workload", "-n", NS, old["metadata"]["name"],
                        "--wait=false")

        def renewed() -> dict | None:
            wl = _workload(manager, name)
            return wl if wl and wl["metadata"]["uid"] != old["metadata"]["uid"] else None
        try:
            wait_for(renewed, 30, "a new Workload for the manager's Job")
        except AssertionError:
            job = _get(manager, "job", "-n", NS, name) or {}
            raise AssertionError(f"no new Workload 30 s after the deletion; the manager's "
                                 f"Job: suspend {job.get('spec', {}).get('suspend')}, "
                                 f"status {job.get('status')}") from None
        wait_for(lambda: ((_placed(manager, w1, name) or old)["metadata"]["uid"]
                          != old["metadata"]["uid"]), 60, "the new Workload placed on worker1")
    finally:
        manager.kubectl("delete", "job", "-n", NS, name, "--wait=false", check=False)
    wait_for(lambda: _get(w1, "job", "-n", NS, name) is None, 30,
             "worker1's copy deleted with the manager's Job")


def _jobset(name: str, run: str, managed_by: str | None = None) -> dict:
    """A JobSet queued in mk-lq: one replicatedJob of one Job with 2 pods of 1 CPU running
    ``run``."""
    pod = {"metadata": {"annotations": {"lab.pykueue.dev/run-duration": run}},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}
    spec: dict[str, Any] = {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {
        "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": pod}}}]}
    if managed_by:
        spec["managedBy"] = managed_by
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"kueue.x-k8s.io/queue-name": "mk-lq"}},
            "spec": spec}


def _check(wl: dict | None, name: str = "mk-check") -> dict:
    return {c["name"]: c for c in ((wl or {}).get("status") or {}).get("admissionChecks")
            or []}.get(name) or {}


def _owned(site: mk.Site, kind: str, name: str) -> dict | None:
    wls = (_get(site, "workloads", "-n", NS) or {}).get("items") or []
    return next((w for w in wls if any(r.get("kind") == kind and r.get("name") == name for r in
                                       w["metadata"].get("ownerReferences") or [])), None)


def test_jobset_runs_on_the_worker_that_admits_it_status_mirrored_and_cleanup(sites):
    """Kueue v0.17.1's JobSet MultiKueue adapter: managedBy defaulted on the manager (its
    JobSet operator makes no Job there), the JobSet copied to worker1 (prebuilt Workload,
    no managedBy), its status mirrored back, the copies removed once finished; a JobSet
    managed by another controller is refused (check Rejected)."""
    if not mk.operator_built():
        pytest.skip("the JobSet operator is not built: run `make operators`")
    manager, w1, w2 = sites
    wait_for(lambda: (_cond(_get(manager, "admissioncheck", "mk-check"), "Active") or {})
             .get("status") == "True", 30, "the MultiKueue AdmissionCheck Active")
    name = f"mkjs-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    _apply(manager, _jobset(name, "4s"))
    js = _get(manager, "jobset", "-n", NS, name)
    assert js["spec"]["managedBy"] == MK  # Kueue ApplyDefaultForManagedBy
    wl = wait_for(lambda: (w := _owned(manager, "JobSet", name)) and _check(w).get("state")
                  == "Ready" and w, 40, "the manager JobSet's check Ready")
    ready = time.monotonic() - t0
    assert wl["status"]["clusterName"] == "worker1"
    wl_name = wl["metadata"]["name"]
    remote = wait_for(lambda: _get(w1, "jobset", "-n", NS, name), 20, "the JobSet on worker1")
    assert "managedBy" not in remote["spec"]
    assert remote["metadata"]["labels"]["kueue.x-k8s.io/prebuilt-workload-name"] == wl_name
    assert remote["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] == "multikueue"
    wait_for(lambda: (_owned(w1, "JobSet", name) or {}).get("metadata", {}).get("name")
             == wl_name, 20, "worker1's JobSet adopting the Workload copy")
    # worker1's JobSet operator makes its Job; the manager's leaves the manager's alone.
    wait_for(lambda: (_get(w1, "jobs", "-n", NS, "-l", f"jobset.sigs.k8s.io/jobset-name={name}")
                      or {}).get("items"), 30, "the JobSet's Job on worker1")
    wait_for(lambda: any(c["type"] == "Completed" and c["status"] == "True" for c in
                         ((_get(manager, "jobset", "-n", NS, name) or {}).get("status") or {})
                         .get("conditions") or []), 60,
             "worker1's JobSet status (Completed) mirrored to the manager")
    done = time.monotonic() - t0
    wait_for(lambda: (_cond(_owned(manager, "JobSet", name), "Finished") or {}).get("status")
             == "True", 30, "the manager Workload Finished")
    assert not (_get(manager, "jobs", "-n", NS, "-l",
                     f"jobset.sigs.k8s.io/jobset-name={name}") or {}).get("items")
    assert _get(w2, "jobset", "-n", NS, name) is None
    wait_for(lambda: _get(w1, "jobset", "-n", NS, name) is None
             and _get(w1, "workload", "-n", NS, wl_name) is None, 30, "worker1's copies deleted")
    print(f"\nmultikueue jobset: created -> check Ready on worker1 {ready:.1f}s, -> Completed "
          f"mirrored {done:.1f}s")
    # Kueue's rule for managedBy-capable kinds: another controller's JobSet is not dispatched.
    other = f"mkjs-{uuid.uuid4().hex[:6]}"
    _apply(manager, _jobset(other, "4s", managed_by="example.com/other"))
    assert _get(manager, "jobset", "-n", NS, other)["spec"]["managedBy"] == "example.com/other"
    # The check goes Rejected, so the manager deactivates the Workload (Kueue), saying why.
    refused = ("The owner is not managed by Kueue: Expecting spec.managedBy to be "
               f'"{MK}" not "example.com/other"')

    def deactivated() -> dict | None:
        wl = _owned(manager, "JobSet", other)
        return wl if wl and wl["spec"].get("active") is False and any(
            c.get("reason") == "DeactivatedDueToAdmissionCheck" and refused in c["message"]
            for c in wl["status"].get("conditions") or []) else None
    wait_for(deactivated, 40, "the other controller's JobSet's Workload deactivated")
    assert _get(w1, "workload", "-n", NS, _owned(manager, "JobSet", other)["metadata"]["name"]) \
        is None
    manager.kubectl("delete", "jobset", "-n", NS, other, "--wait=false")


def test_pytorchjob_through_multikueue(sites):
    """Kueue v0.17.1's Kubeflow adapter with training-operator v1.9.3: ``spec.runPolicy.
    managedBy`` defaulted on the manager (its training-operator makes no pod there), the
    PyTorchJob copied to worker1 without it, its status mirrored back (Succeeded), the copies
    removed once finished."""
    if not mk.operator_built("training-operator"):
        pytest.skip("training-operator is not built: run `make operators`")
    manager, w1, w2 = sites
    name = f"mkpt-{uuid.uuid4().hex[:6]}"

    def replica() -> dict:
        return {"replicas": 1, "restartPolicy": "OnFailure", "template": {
            "metadata": {"annotations": {"lab.pykueue.dev/run-duration": "3s"}},
            "spec": {"containers": [{"name": "pytorch", "image": "busybox", "resources": {
                "requests": {"cpu": "1"}}}]}}}
    t0 = time.monotonic()
    _apply(manager, {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                     "metadata": {"name": name, "namespace": NS,
                                  "labels": {"kueue.x-k8s.io/queue-name": "mk-lq"}},
                     "spec": {"pytorchReplicaSpecs": {"Master": replica(),
                                                      "Worker": replica()}}})
    assert _get(manager, "pytorchjob", "-n", NS, name)["spec"]["runPolicy"]["managedBy"] == MK
    wl = wait_for(lambda: (w := _owned(manager, "PyTorchJob", name)) and
                  _check(w).get("state") == "Ready" and w, 40, "the PyTorchJob's check Ready")
    ready = time.monotonic() - t0
    assert wl["status"]["clusterName"] == "worker1"
    remote = wait_for(lambda: _get(w1, "pytorchjob", "-n", NS, name), 20,
                      "the PyTorchJob on worker1")
    assert "managedBy" not in remote["spec"].get("runPolicy", {})
    wait_for(lambda: any(c["type"] == "Succeeded" and c["status"] == "True" for c in
                         ((_get(manager, "pytorchjob", "-n", NS, name) or {}).get("status")
                          or {}).get("conditions") or []), 90,
             "worker1's PyTorchJob status (Succeeded) mirrored to the manager")
    done = time.monotonic() - t0
    assert not (_get(manager, "pods", "-n", NS, "-l",
                     f"training.kubeflow.org/job-name={name}") or {}).get("items")
    assert _get(w2, "pytorchjob", "-n", NS, name) is None
    wait_for(lambda: _get(w1, "pytorchjob", "-n", NS, name) is None, 30,
             "worker1's PyTorchJob deleted once finished")
    print(f"\nmultikueue pytorchjob: created -> check Ready on worker1 {ready:.1f}s, -> "
          f"Succeeded mirrored {done:.1f}s")


@contextlib.contextmanager
def _manager_pykueue(manager: mk.Site, restore: bool = True, **settings: str
                     ) -> Iterator[None]:
    """pykueue on the manager restarted with ``PYKUEUE_MULTIKUEUE__<NAME>`` settings for the
    block, then restarted with the ones it had (``restore=False``: stopped instead)."""
    env = {f"PYKUEUE_MULTIKUEUE__{k.upper()}": v for k, v in settings.items()}
    saved = {k: os.environ.get(k) for k in env}
    manager.lab("pykueue-down")
    os.environ.update(env)
    try:
        manager.lab("pykueue-up")
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        manager.lab("pykueue-down")
        if restore:
            manager.lab("pykueue-up")


def test_incremental_dispatcher_no_worker_condition_and_gc(sites):
    """Kueue's Incremental dispatcher (workers added in name order per round; here 1 per 8 s
    round instead of Kueue's 3 per 5 min), pykueue's opt-in ``MultiKueueNoWorker`` condition
    for a Workload no worker reserves (after 5 s here; it keeps waiting, as Kueue), and
    Kueue's garbage collection (every 2 s here) of a worker's Workload with our origin whose
    manager Workload does not exist."""
    manager, w1, w2 = sites
    k = "kueue.x-k8s.io/v1beta2"
    # A bigger ClusterQueue on the manager: a 6-CPU Job is admitted there; the workers'
    # LocalQueue of the same name goes to their mk-cq (4 and 0 CPUs): no worker admits it.
    big = [{"apiVersion": k, "kind": "LocalQueue", "metadata": {"name": "mk-lq-big",
                                                               "namespace": NS},
            "spec": {"clusterQueue": "mk-cq"}}]
    _apply(w1, *big)
    _apply(w2, *big)
    cq = _queues(8, ["mk-check"])[2]
    cq["metadata"]["name"] = "mk-cq-big"
    _apply(manager, cq, {**big[0], "spec": {"clusterQueue": "mk-cq-big"}})
    with _manager_pykueue(manager, dispatcher_name="kueue.x-k8s.io/multikueue-dispatcher-"
                          "incremental", incremental_batch_size="1",
                          incremental_round_seconds="8", gc_interval_seconds="2",
                          no_worker_timeout_seconds='{"mk-cq-big": 5}'):
        name = f"mk-{uuid.uuid4().hex[:6]}"
        job = _job(name, "60s")
        job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "mk-lq-big"
        job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "6"
        _apply(manager, job)
        try:
            wl = wait_for(lambda: (w := _workload(manager, name)) and
                          (w.get("status") or {}).get("nominatedClusterNames") and w, 40,
                          "the first round's nominee")
            wl_name = wl["metadata"]["name"]
            t_first = time.monotonic()
            assert wl["status"]["nominatedClusterNames"] == ["worker1"]
            wait_for(lambda: _get(w1, "workload", "-n", NS, wl_name), 10, "worker1's copy")
            if time.monotonic() - t_first < 6:  # within the first 8 s round (kubectl is slow)
                assert _get(w2, "workload", "-n", NS, wl_name) is None
            wl = wait_for(lambda: (w := _get(manager, "workload", "-n", NS, wl_name))
                          and len(w["status"].get("nominatedClusterNames") or []) == 2 and w, 20,
                          "the second round nominating worker2")
            second = time.monotonic() - t_first
            assert second >= 5, f"worker2 nominated {second:.1f}s after worker1: too soon"
            assert wl["status"]["nominatedClusterNames"] == ["worker1", "worker2"]
            wait_for(lambda: _get(w2, "workload", "-n", NS, wl_name), 10, "worker2's copy")
            cond = wait_for(lambda: (c := _cond(_get(manager, "workload", "-n", NS, wl_name),
                                                "MultiKueueNoWorker")) and "worker2" in c["message"]
                            and c, 20, "the MultiKueueNoWorker condition naming both workers")
            assert (cond["status"], cond["reason"]) == ("True", "NoWorkerReserved")
            assert "within 5s" in cond["message"] and "worker1, worker2" in cond["message"]
            wl = _get(manager, "workload", "-n", NS, wl_name)
            assert _check(wl)["state"] == "Pending" and "clusterName" not in wl["status"]
            # GC: a Workload copy on worker1 with our origin and no manager Workload is deleted;
            # one of another origin stays.
            orphan = {k2: v for k2, v in _get(w1, "workload", "-n", NS, wl_name).items()
                      if k2 in ("apiVersion", "kind", "spec")}
            made = {}
            for wname, origin in (("mk-orphan", "multikueue"), ("mk-foreign", "elsewhere")):
                obj = {**orphan, "metadata": {"name": f"{wname}-{name}", "namespace": NS,
                                              "labels": {"kueue.x-k8s.io/multikueue-origin":
                                                         origin}}}
                _apply(w1, obj)
                made[wname] = obj["metadata"]["name"]
            t_gc = time.monotonic()
            wait_for(lambda: _get(w1, "workload", "-n", NS, made["mk-orphan"]) is None, 20,
                     "the orphaned copy garbage-collected")
            gc = time.monotonic() - t_gc
            assert _get(w1, "workload", "-n", NS, made["mk-foreign"]) is not None
            assert _get(w1, "workload", "-n", NS, wl_name) is not None  # its manager's is there
            w1.kubectl("delete", "workload", "-n", NS, made["mk-foreign"], "--wait=false")
            manager.kubectl("delete", "job", "-n", NS, name, "--wait=false")
            wait_for(lambda: _get(w1, "workload", "-n", NS, wl_name) is None
                     and _get(w2, "workload", "-n", NS, wl_name) is None, 30,
                     "the copies deleted with the manager's Job")
        finally:
            manager.kubectl("delete", "job", "-n", NS, name, "--wait=false", check=False)
    print(f"\nmultikueue incremental: second round {second:.1f}s after the first (8 s "
          f"rounds); gc of an orphan {gc:.1f}s (2 s interval)")


def test_a_gpu_job_runs_on_the_worker_under_its_prebuilt_workload(sites):
    """On the worker, pykueue's scheduler extender (which filters GPU nodes) finds the Job's
    Workload by its ``kueue.x-k8s.io/prebuilt-workload-name`` label: the copy named like the
    manager's Workload, not Kueue's name for the worker Job. Without that, the pod stayed
    Pending: "withheld by pykueue: ... its Workload has not been created yet"
    (found by `make run-multikueue`)."""
    manager, w1, _ = sites
    k = "kueue.x-k8s.io/v1beta2"
    gpu = "nvidia.com/gpu"

    def gpu_queues(flavor: dict, checks: list[str]) -> list[dict]:
        spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", gpu], "flavors": [{"name": flavor["metadata"]["name"],
                                                          "resources": [
                {"name": "cpu", "nominalQuota": 8}, {"name": gpu, "nominalQuota": 8}]}]}]}
        if checks:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
        return [flavor, {"apiVersion": k, "kind": "ClusterQueue",
                         "metadata": {"name": "mk-gpu-cq"}, "spec": spec},
                {"apiVersion": k, "kind": "LocalQueue",
                 "metadata": {"name": "mk-gpu-lq", "namespace": NS},
                 "spec": {"clusterQueue": "mk-gpu-cq"}}]
    _apply(w1, *gpu_queues({"apiVersion": k, "kind": "ResourceFlavor",
                            "metadata": {"name": "mk-a100"}, "spec": {"nodeLabels": {
                                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}}, []))
    _apply(manager, *gpu_queues({"apiVersion": k, "kind": "ResourceFlavor",
                                 "metadata": {"name": "mk-gpu"}}, ["mk-check"]))
    name = f"mk-gpu-{uuid.uuid4().hex[:6]}"
    job = _job(name, "5s")
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "mk-gpu-lq"
    pod_spec = job["spec"]["template"]["spec"]
    pod_spec["containers"][0]["resources"] = {"requests": {"cpu": "1", gpu: "1"},
                                              "limits": {gpu: "1"}}
    pod_spec["tolerations"] = [{"key": gpu, "operator": "Exists", "effect": "NoSchedule"}]
    _apply(manager, job)

    def running() -> list[dict] | None:
        pods = (_get(w1, "pods", "-n", NS, "-l", f"batch.kubernetes.io/job-name={name}")
                or {}).get("items") or []
        return pods if any(p["status"].get("phase") == "Running" for p in pods) else None
    try:
        pods = wait_for(running, 60, "the GPU pod Running on worker1")
    except AssertionError:
        pods = (_get(w1, "pods", "-n", NS, "-l", f"batch.kubernetes.io/job-name={name}")
                or {}).get("items") or []
        why = [c.get("message") for p in pods for c in p["status"].get("conditions") or []]
        raise AssertionError(f"the GPU pod is not Running on worker1: {why}") from None
    assert pods[0]["spec"]["nodeName"] == "a100-0"
    wait_for(lambda: (_cond(_workload(manager, name), "Finished") or {}).get("status")
             == "True", 60, "the manager Workload Finished")


RAY_IMAGE = "rayproject/ray:2.46.0"


def _ray_pod(name: str, cpu: str, **extra: Any) -> dict:
    return {**extra, "spec": {"containers": [{"name": name, "image": RAY_IMAGE, "resources": {
        "requests": {"cpu": cpu}}}]}}


def _ray_cluster_spec() -> dict:
    """A head and one worker of 1 CPU each."""
    return {"headGroupSpec": {"rayStartParams": {}, "template": _ray_pod("ray-head", "1")},
            "workerGroupSpecs": [{"groupName": "w", "replicas": 1, "minReplicas": 0,
                                  "maxReplicas": 1, "rayStartParams": {},
                                  "template": _ray_pod("ray-worker", "1")}]}


def _ray_pods(site: mk.Site, cluster_prefix: str) -> list[dict]:
    """Ray nodes (head, workers) of ``site`` in NS whose RayCluster's name starts with
    ``cluster_prefix``."""
    return [p for p in (_get(site, "pods", "-n", NS, "-l", "ray.io/node-type") or {}).get(
        "items") or [] if str(p["metadata"]["labels"].get("ray.io/cluster", "")).startswith(
            cluster_prefix)]


def _running(pods: list[dict]) -> list[dict]:
    return [p for p in pods if p["status"].get("phase") == "Running"]


def _placed_on_worker1(manager: mk.Site, w1: mk.Site, kind: str, name: str,
                       path: tuple[str, ...] = ("spec", "managedBy"), own: str | None = None
                       ) -> dict:
    """The manager's object ``kind/name`` has its ``managedBy`` (at ``path``) defaulted; its
    Workload's check goes Ready on worker1, where the copy (prebuilt and origin labels,
    ``managedBy`` unset, or ``own``: the operator's own, its CRD's default) adopts the
    Workload copy. Returns the manager's Workload."""
    def managed_by(obj: dict | None) -> Any:
        for key in path:
            obj = (obj or {}).get(key)
        return obj
    assert managed_by(_get(manager, kind.lower(), "-n", NS, name)) == MK
    wl = wait_for(lambda: (w := _owned(manager, kind, name)) and _check(w).get("state")
                  == "Ready" and w, 40, f"the manager {kind}'s check Ready")
    assert wl["status"]["clusterName"] == "worker1"
    wl_name = wl["metadata"]["name"]
    remote = wait_for(lambda: _get(w1, kind.lower(), "-n", NS, name), 20,
                      f"the {kind} on worker1")
    assert managed_by(remote) == own
    assert remote["metadata"]["labels"]["kueue.x-k8s.io/prebuilt-workload-name"] == wl_name
    assert remote["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] == "multikueue"
    wait_for(lambda: (_owned(w1, kind, name) or {}).get("metadata", {}).get("name")
             == wl_name, 20, f"worker1's {kind} adopting the Workload copy")
    return wl


def _deleted_everywhere(manager: mk.Site, w1: mk.Site, kind: str, name: str, wl_name: str,
                        cluster_prefix: str) -> None:
    """Deleting the manager's object deletes worker1's copy, its Workload copy, and with
    them (KubeRay) the RayCluster and its pods. The copy goes through two finalizers on
    worker1 (KubeRay's and the Workload's): 10 s on a quiet machine, over 30 s at load 6-8
    (session 27's fresh CI run), so up to 60 s."""
    manager.kubectl("delete", kind.lower(), "-n", NS, name, "--wait=false")
    wait_for(lambda: _get(w1, kind.lower(), "-n", NS, name) is None
             and _get(w1, "workload", "-n", NS, wl_name) is None, 60,
             f"worker1's {kind} and Workload copy deleted with the manager's {kind}")
    wait_for(lambda: not [rc for rc in (_get(w1, "rayclusters", "-n", NS) or {}).get("items")
                          or [] if rc["metadata"]["name"].startswith(cluster_prefix)]
             and not _ray_pods(w1, cluster_prefix), 60,
             "worker1's RayCluster and its pods gone")


def test_rayjob_runs_on_the_worker_with_kuberay_status_mirrored_and_deleted_there(sites):
    """Kueue v0.17.1's RayJob adapter with KubeRay v1.6.0: ``spec.managedBy`` defaulted on
    the manager (its KubeRay makes no RayCluster there), the RayJob copied to worker1 (no
    managedBy, prebuilt Workload), where KubeRay makes the cluster and its pods run; the
    worker's status (deployment Running, its cluster's name) is mirrored to the manager's
    RayJob; evicted on the manager, its quota is released (the mirrored deployment status
    cleared) and it runs again once active; deleting it on the manager removes the RayJob,
    its cluster and pods from worker1."""
    if not mk.operator_built("kuberay"):
        pytest.skip("KubeRay is not built: run `make operators`")
    manager, w1, w2 = sites
    name = f"mkrj-{uuid.uuid4().hex[:6]}"
    # The submitter keeps running (a kwok pod with a run duration), so the RayJob stays
    # Running until it is deleted: its clean-up on worker1 is the deletion's, not a finish's.
    submitter = _ray_pod("ray-job-submitter", "500m", metadata={
        "annotations": {"lab.pykueue.dev/run-duration": "600s"}})
    submitter["spec"]["restartPolicy"] = "Never"
    t0 = time.monotonic()
    _apply(manager, {"apiVersion": "ray.io/v1", "kind": "RayJob",
                     "metadata": {"name": name, "namespace": NS,
                                  "labels": {"kueue.x-k8s.io/queue-name": "mk-lq"}},
                     "spec": {"entrypoint": "python -c 'print(1)'",
                              "shutdownAfterJobFinishes": True,
                              "submitterPodTemplate": submitter,
                              "rayClusterSpec": _ray_cluster_spec()}})
    try:
        wl = _placed_on_worker1(manager, w1, "RayJob", name)
        ready = time.monotonic() - t0
        wait_for(lambda: len(_running(_ray_pods(w1, name))) == 2, 60,
                 "the RayCluster's head and worker Running on worker1")

        def mirrored() -> dict | None:
            # KubeRay without a Ray dashboard (kwok) leaves rayClusterStatus as it was
            # before the cluster was ready: the whole status is compared, as copied.
            st = (_get(manager, "rayjob", "-n", NS, name) or {}).get("status") or {}
            there = (_get(w1, "rayjob", "-n", NS, name) or {}).get("status") or {}
            return st if st.get("jobDeploymentStatus") == "Running" and st == there \
                and st.get("rayClusterName") else None
        st = wait_for(mirrored, 60, "worker1's RayJob status (Running) mirrored")
        running = time.monotonic() - t0
        assert st["rayClusterName"].startswith(name)
        # The manager's KubeRay left its RayJob alone; worker2 never got the RayJob.
        assert not [rc for rc in (_get(manager, "rayclusters", "-n", NS) or {}).get("items")
                    or [] if rc["metadata"]["name"].startswith(name)]
        assert not _ray_pods(manager, name)
        assert _get(w2, "rayjob", "-n", NS, name) is None
        # Evicted on the manager: the copies go from worker1 and the mirrored deployment
        # status is cleared (the RayJob's active_pods reads it), so the quota is released;
        # active again, it runs on worker1 again.
        wl_name = wl["metadata"]["name"]
        t1 = time.monotonic()
        manager.kubectl("patch", "workload", "-n", NS, wl_name, "--type=merge",
                        "-p", '{"spec":{"active":false}}')

        def released() -> bool:
            st = (_get(manager, "workload", "-n", NS, wl_name) or {}).get("status") or {}
            job = (_get(manager, "rayjob", "-n", NS, name) or {}).get("status") or {}
            return "admission" not in st and "clusterName" not in st \
                and "jobDeploymentStatus" not in job and _get(w1, "rayjob", "-n", NS, name) is None
        wait_for(released, 30, "the RayJob's quota released and worker1's copy deleted")
        evicted = time.monotonic() - t1
        manager.kubectl("patch", "workload", "-n", NS, wl_name, "--type=merge",
                        "-p", '{"spec":{"active":true}}')
        wait_for(mirrored, 60, "the RayJob Running on worker1 again, mirrored")
        _deleted_everywhere(manager, w1, "RayJob", name, wl_name, name)
    finally:
        manager.kubectl("delete", "rayjob", "-n", NS, name, "--wait=false", check=False)
    print(f"\nmultikueue rayjob: created -> check Ready on worker1 {ready:.1f}s, -> Running "
          f"mirrored {running:.1f}s; deactivated -> quota released, copy deleted {evicted:.1f}s")


def test_raycluster_runs_on_the_worker_status_mirrored_and_deleted_there(sites):
    """Kueue v0.17.1's RayCluster adapter: a RayCluster queued on the manager runs on
    worker1 (KubeRay there makes its pods), its ``status.state: ready`` is mirrored to the
    manager's, which has no pod; deleting it on the manager removes worker1's."""
    if not mk.operator_built("kuberay"):
        pytest.skip("KubeRay is not built: run `make operators`")
    manager, w1, _ = sites
    name = f"mkrc-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    _apply(manager, {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                     "metadata": {"name": name, "namespace": NS,
                                  "labels": {"kueue.x-k8s.io/queue-name": "mk-lq"}},
                     "spec": _ray_cluster_spec()})
    try:
        wl = _placed_on_worker1(manager, w1, "RayCluster", name)
        wait_for(lambda: len(_running(_ray_pods(w1, name))) == 2, 60,
                 "the RayCluster's head and worker Running on worker1")
        wait_for(lambda: ((_get(manager, "raycluster", "-n", NS, name) or {}).get("status")
                          or {}).get("state") == "ready", 60,
                 "worker1's RayCluster status (ready) mirrored")
        ready = time.monotonic() - t0
        assert not _ray_pods(manager, name)
        _deleted_everywhere(manager, w1, "RayCluster", name, wl["metadata"]["name"], name)
    finally:
        manager.kubectl("delete", "raycluster", "-n", NS, name, "--wait=false", check=False)
    print(f"\nmultikueue raycluster: created -> ready mirrored {ready:.1f}s")


RUNTIME = "mk-torch"
TRAINER = "trainer.kubeflow.org/trainjob-controller"
AW_LABEL = "workload.codeflare.dev/appwrapper"
QUEUE = {"kueue.x-k8s.io/queue-name": "mk-lq"}


def _on_worker1_only(manager: mk.Site, w1: mk.Site, *names: str) -> None:
    """Skip, saying why, unless operators ``names`` run on worker1 (started by ``sites``);
    those of ``WORKER1_OPERATORS`` do not run on the manager, which has their CRDs only."""
    for name in names:
        if not mk.operator_built(name):
            pytest.skip(f"{name} is not built: run `make operators`")
        if not _alive(w1, name):
            pytest.skip(f"{name} does not run on worker1 (mpi-operator: port "
                        f"{MPI_HEALTH_PORT} taken, its health port is hard-coded)")
        if name in dict(WORKER1_OPERATORS):
            assert not _alive(manager, name), f"{name} runs on the manager"


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


def _finished_and_cleaned(manager: mk.Site, w1: mk.Site, kind: str, name: str,
                          wl_name: str) -> None:
    """The manager's Workload Finished (from worker1's), worker1's object and Workload copy
    deleted."""
    wait_for(lambda: (_cond(_owned(manager, kind, name), "Finished") or {}).get("status")
             == "True", 30, f"the manager {kind}'s Workload Finished")
    wait_for(lambda: _get(w1, kind.lower(), "-n", NS, name) is None
             and _get(w1, "workload", "-n", NS, wl_name) is None, 30,
             f"worker1's {kind} and Workload copy deleted once finished")


def _pods(site: mk.Site) -> list[dict]:
    return list((_get(site, "pods", "-n", NS) or {}).get("items") or [])


def test_a_trainjob_runs_on_the_worker_under_the_trainer_status_mirrored_and_cleaned_up(
        sites):
    """Kueue v0.17.1's TrainJob adapter: ``spec.managedBy`` defaulted on the manager over the
    trainer CRD's default, the TrainJob copied to worker1 (the CRD defaults managedBy to the
    trainer's there), where the trainer makes its JobSet and the pods run; the worker's status
    (``Complete``, ``jobsStatus``) is mirrored to the manager's, whose Workload finishes, and
    worker1's TrainJob, Workload copy and JobSet go."""
    manager, w1, w2 = sites
    _on_worker1_only(manager, w1, "jobset", "trainer")
    _apply(manager, _runtime())  # the manager reads the podSets from it
    _apply(w1, _runtime())
    name = f"mktj-{uuid.uuid4().hex[:6]}"
    cpu = {"cpu": "1"}
    t0 = time.monotonic()
    _apply(manager, {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                     "metadata": {"name": name, "namespace": NS, "labels": QUEUE},
                     "spec": {"runtimeRef": {"name": RUNTIME},
                              "trainer": {"numNodes": 1, "resourcesPerNode": {
                                  "requests": cpu, "limits": cpu}}}})
    try:
        wl = _placed_on_worker1(manager, w1, "TrainJob", name, own=TRAINER)
        assert _get(w2, "trainjob", "-n", NS, name) is None
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
        assert not [p for p in _pods(manager) if p["metadata"]["name"].startswith(name)]
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


def test_an_appwrapper_runs_on_the_worker_is_evicted_and_deleted_there(sites):
    """Kueue v0.17.1's AppWrapper adapter with the AppWrapper controller on worker1: the
    manager's AppWrapper (managedBy defaulted; no controller there) runs on worker1, its
    status (phase ``Running``) mirrored; deactivated on the manager, worker1's copies go and
    the mirrored status is cleared, so the quota is released; active again it runs on worker1
    again; deleted on the manager, worker1's AppWrapper, Workload copy and wrapped Job go."""
    manager, w1, w2 = sites
    _on_worker1_only(manager, w1, "appwrapper")
    name = f"mkaw-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    _apply(manager, _appwrapper(name))
    try:
        wl = _placed_on_worker1(manager, w1, "AppWrapper", name)
        assert _get(w2, "appwrapper", "-n", NS, name) is None
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
        assert not _pods(manager)
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


def test_an_mpijob_runs_on_the_worker_under_the_mpi_operator_status_mirrored(sites):
    """Kueue v0.17.1's Kubeflow adapter for MPIJob v2beta1 with mpi-operator v0.8.0 on worker1
    only: ``spec.runPolicy.managedBy`` defaulted on the manager, the MPIJob copied to worker1
    without it, where the mpi-operator runs the launcher and the worker; the launcher ends,
    ``Succeeded`` is mirrored to the manager's MPIJob, the manager's Workload finishes and
    worker1's copies go."""
    manager, w1, w2 = sites
    _on_worker1_only(manager, w1, "mpi-operator")
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
        wl = _placed_on_worker1(manager, w1, "MPIJob", name, ("spec", "runPolicy", "managedBy"))
        assert _get(w2, "mpijob", "-n", NS, name) is None
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
        assert not [p for p in _pods(manager) if p["metadata"]["name"].startswith(name)]
    finally:
        manager.kubectl("delete", "mpijob", "-n", NS, name, "--wait=false", check=False)
    print(f"\nmultikueue mpijob: created -> check Ready on worker1 {ready:.1f}s, -> Succeeded "
          f"mirrored {done:.1f}s")


def _ev_queues(cpus: int, checks: list[str], preempt: bool = False) -> list[dict]:
    """ClusterQueue ``mk-ev-cq`` (``cpus`` CPUs, ``checks``; ``preempt``: lower priorities
    within it are preempted) and LocalQueue ``mk-ev-lq`` of ``NS``, apart from the other
    tests' queues."""
    _, flavor, cq, lq = _queues(cpus, checks)
    cq["metadata"]["name"] = "mk-ev-cq"
    if preempt:
        cq["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    lq["metadata"]["name"], lq["spec"]["clusterQueue"] = "mk-ev-lq", "mk-ev-cq"
    return [flavor, cq, lq]


def _in_ev_queue(job: dict, priority_class: str | None = None) -> dict:
    labels = job["metadata"]["labels"]
    labels["kueue.x-k8s.io/queue-name"] = "mk-ev-lq"
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    return job


def test_an_eviction_on_the_worker_redoes_the_admission_at_once(sites):
    """Kueue v0.17.1's ``MultiKueueRedoAdmissionOnEvictionInWorker`` (beta, on by default):
    the Workload runs on worker1 (1 CPU there, worker2 none); worker2 gets a CPU and a Job of
    priority 1000 local to worker1 preempts the copy there. The manager's check goes Retry at
    once ("Workload evicted on worker cluster: "worker1", resetting for re-admission"), the
    manager evicts and requeues the same Workload, worker1's copy and Job are deleted, and it
    is dispatched again: worker1 cannot take it back (its CPU is the preemptor's), worker2
    does. Then the copy on worker2 is deactivated there: the same redo, and it is placed
    again on worker2 with a new copy. No workerLostTimeout is waited (900 s here)."""
    manager, w1, w2 = sites
    high = "mk-ev-high"
    _apply(w1, *_ev_queues(1, [], preempt=True),
           {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": high}, "value": 1000})
    _apply(w2, *_ev_queues(0, []))
    _apply(manager, *_ev_queues(4, ["mk-check"]))
    tag = uuid.uuid4().hex[:6]
    name, urgent = f"mk-ev-{tag}", f"mk-urgent-{tag}"

    def placed_on(worker: mk.Site) -> dict | None:
        wl = _workload(manager, name)
        return wl if ((wl or {}).get("status") or {}).get("clusterName") == worker.name \
            and _check(wl).get("state") == "Ready" \
            and _get(worker, "job", "-n", NS, name) else None

    def redone_from(worker: str) -> str | None:
        """The manager Workload's condition message carrying the redo's Retry message for
        ``worker`` (Evicted: "... in Retry state: ..."; once re-admitted: "Previously: ...")."""
        want = f'Workload evicted on worker cluster: "{worker}", resetting for re-admission'
        got = (_workload(manager, name) or {}).get("status") or {}
        return next((m for c in got.get("conditions") or []
                     if want in (m := c.get("message") or "")), None)
    _apply(manager, _in_ev_queue(_job(name, "300s")))
    try:
        wl = wait_for(lambda: placed_on(w1), 40, "the Job placed on worker1")
        wl_name, uid = wl["metadata"]["name"], wl["metadata"]["uid"]
        wait_for(lambda: ((_get(manager, "job", "-n", NS, name) or {}).get("status") or {})
                 .get("active") == 1, 30, "worker1's running pod mirrored")
        _apply(w2, _ev_queues(1, [])[1])  # worker2: a CPU for the Workload to move to
        t0 = time.monotonic()
        _apply(w1, _in_ev_queue(_job(urgent, "300s"), high))
        wl = wait_for(lambda: placed_on(w2), 60, "the Workload requeued and placed on worker2")
        moved = time.monotonic() - t0
        assert wl["metadata"]["uid"] == uid  # the same Workload, requeued
        assert wl["spec"].get("active", True) is True
        said = redone_from("worker1")
        assert said and 'in Retry state: "mk-check"' in said, wl["status"]["conditions"]
        wait_for(lambda: any('evicted on worker cluster: "worker1"' in (e.get("message") or "")
                             for e in (_get(manager, "events", "-n", NS, "--field-selector",
                                            "reason=MultiKueue") or {}).get("items") or []),
                 20, "the MultiKueue Event of the redo")
        # The copy was preempted on worker1 (its Event stays after the copy is deleted).
        assert (_get(w1, "events", "-n", NS, "--field-selector",
                     f"involvedObject.name={wl_name},reason=Preempted") or {}).get("items")
        # worker1 keeps the preemptor; the Workload's Job and copy are gone from there.
        wait_for(lambda: _get(w1, "job", "-n", NS, name) is None
                 and _get(w1, "workload", "-n", NS, wl_name) is None, 30,
                 "worker1's Job and copy deleted")
        assert (_cond(_workload(w1, urgent), "Admitted") or {}).get("status") == "True"
        wait_for(lambda: ((_get(manager, "job", "-n", NS, name) or {}).get("status") or {})
                 .get("active") == 1, 30, "worker2's running pod mirrored")
        # Deactivated on worker2: redone too, and placed on worker2 again with a new copy.
        old_copy = _get(w2, "workload", "-n", NS, wl_name)["metadata"]["uid"]
        t1 = time.monotonic()
        w2.kubectl("patch", "workload", "-n", NS, wl_name, "--type=merge",
                   "-p", '{"spec":{"active":false}}')

        def replaced() -> dict | None:
            cp = _get(w2, "workload", "-n", NS, wl_name) or {}
            return placed_on(w2) if redone_from("worker2") \
                and cp.get("metadata", {}).get("uid") not in (None, old_copy) \
                and cp["spec"].get("active", True) is True \
                and (_cond(cp, "Admitted") or {}).get("status") == "True" else None
        wl = wait_for(replaced, 60, "the Workload placed on worker2 again with a new copy")
        again = time.monotonic() - t1
        assert wl["metadata"]["uid"] == uid and wl["spec"].get("active", True) is True
        assert _get(w1, "workload", "-n", NS, wl_name) is None
    finally:
        manager.kubectl("delete", "job", "-n", NS, name, "--wait=false", check=False)
        w1.kubectl("delete", "job", "-n", NS, urgent, "--wait=false", check=False)
        _apply(w2, _ev_queues(0, [])[1])
    print(f"\nmultikueue eviction on a worker: preempted on worker1 -> Ready on worker2 "
          f"{moved:.1f}s; deactivated on worker2 -> Ready there again {again:.1f}s")


SOONEST = "pykueue.dev/multikueue-dispatcher-soonest"


@pytest.fixture(scope="module")
def soonest(sites: list[mk.Site], request: pytest.FixtureRequest
            ) -> Iterator[list[mk.Site]]:
    """pykueue on the manager restarted once for the tests below (and again after the
    module with the settings it had, unless ``sites`` stops it then): pykueue's soonest
    dispatcher (a worker still computing its ETA waited for up to 30 s), workerLostTimeout
    3 s (Kueue's: 15 min), the workers probed every second."""
    restore = not request.node.stash.get(MANAGER_STOPPED_AFTER, False)
    with _manager_pykueue(sites[0], restore, dispatcher_name=SOONEST,
                          soonest_patience_seconds="30",
                          worker_lost_timeout_seconds="3", probe_period_seconds="1"):
        yield sites


def _eta_queues(cpus: int, checks: list[str]) -> list[dict]:
    """ClusterQueue ``mk-eta-cq`` (``cpus`` CPUs, ``checks``) and LocalQueue ``mk-eta-lq``
    of ``NS`` pointing at it, apart from the other tests' queues."""
    _, flavor, cq, lq = _queues(cpus, checks)
    cq["metadata"]["name"] = "mk-eta-cq"
    lq["metadata"]["name"], lq["spec"]["clusterQueue"] = "mk-eta-lq", "mk-eta-cq"
    return [flavor, cq, lq]


def _in_eta_queue(job: dict, limit: int | None = None) -> dict:
    labels = job["metadata"]["labels"]
    labels["kueue.x-k8s.io/queue-name"] = "mk-eta-lq"
    if limit is not None:  # maximumExecutionTimeSeconds: the worker's ETA is bounded by it
        labels["kueue.x-k8s.io/max-exec-time-seconds"] = str(limit)
    return job


def test_soonest_dispatcher_keeps_the_copy_on_the_worker_expected_to_start_it_first(soonest):
    """pykueue's soonest dispatcher (kueue#10768): both workers' single CPU is taken by a
    run ahead, bounded at 1 h on worker1 and 5 min on worker2; the manager's Workload is
    copied to both, reads each copy's ETA from that worker's pykueue status API and keeps
    the copy on worker2 only (``nominatedClusterNames: [worker2]``, worker1's copy deleted).
    Once worker2's run ahead ends, its copy is admitted there and the Job runs there."""
    manager, w1, w2 = soonest
    _apply(w1, *_eta_queues(1, []))
    _apply(w2, *_eta_queues(1, []))
    _apply(manager, *_eta_queues(4, ["mk-check"]))
    tag = uuid.uuid4().hex[:6]
    blocker, name = f"mk-block-{tag}", f"mk-eta-{tag}"
    try:
        for site, limit in ((w1, 3600), (w2, 300)):
            _apply(site, _in_eta_queue(_job(blocker, f"{limit}s"), limit))
        for site in (w1, w2):
            wait_for(lambda s=site: (_cond(_workload(s, blocker), "QuotaReserved") or {})
                     .get("status") == "True", 30, f"the run ahead admitted on {site.name}")
        t0 = time.monotonic()
        _apply(manager, _in_eta_queue(_job(name, "5s")))
        wl = wait_for(lambda: (w := _workload(manager, name)) and (w.get("status") or {})
                      .get("nominatedClusterNames") == ["worker2"] and w, 60,
                      "the manager Workload kept on worker2 only")
        decided = time.monotonic() - t0
        wl_name = wl["metadata"]["name"]
        assert _check(wl)["state"] == "Pending" and "clusterName" not in wl["status"]
        wait_for(lambda: _get(w1, "workload", "-n", NS, wl_name) is None, 20,
                 "worker1's copy (start in about 1 h) deleted")
        copy = _get(w2, "workload", "-n", NS, wl_name)
        assert copy is not None and (_cond(copy, "QuotaReserved") or {}).get("status") != "True"
        w2.kubectl("delete", "job", "-n", NS, blocker, "--wait=false")
        t1 = time.monotonic()
        wl = wait_for(lambda: (w := _workload(manager, name)) and _check(w).get("state")
                      == "Ready" and w, 40, "the check Ready once worker2 admits its copy")
        admitted = time.monotonic() - t1
        assert wl["status"]["clusterName"] == "worker2"
        wait_for(lambda: _get(w2, "job", "-n", NS, name), 20, "the Job on worker2")
        assert _get(w1, "job", "-n", NS, name) is None
        assert _get(w1, "workload", "-n", NS, wl_name) is None
    finally:
        manager.kubectl("delete", "job", "-n", NS, name, "--wait=false", check=False)
        for site in (w1, w2):
            site.kubectl("delete", "job", "-n", NS, blocker, "--wait=false", check=False)
    print(f"\nmultikueue soonest: Job created -> kept on worker2 only {decided:.1f}s; "
          f"worker2's run ahead deleted -> check Ready there {admitted:.1f}s")


def test_worker_lost_timeout_requeues_the_workload_onto_the_other_worker(soonest):
    """Kueue's workerLostTimeout (3 s here): the Workload runs on worker1 (worker2 has no
    quota); worker2 gets quota and worker1's kubeconfig Secret is deleted, so the manager
    loses worker1 (BadKubeConfig). After the timeout the check goes Retry ("Reserving remote
    lost"), the manager evicts and requeues the Workload and it is placed on worker2. When
    worker1 comes back with its stale copy and Job, the Workload stays on worker2 and
    worker1's copies are deleted."""
    manager, w1, w2 = soonest
    name = f"mk-lost-{uuid.uuid4().hex[:6]}"
    _apply(manager, _job(name, "120s"))

    def placed_on(worker: mk.Site) -> dict | None:
        wl = _workload(manager, name)
        return wl if ((wl or {}).get("status") or {}).get("clusterName") == worker.name \
            and _check(wl).get("state") == "Ready" \
            and _get(worker, "job", "-n", NS, name) else None
    wl = wait_for(lambda: placed_on(w1), 40, "the Job placed on worker1")
    wl_name = wl["metadata"]["name"]
    _apply(w2, _queues(4, [])[2])  # worker2's mk-cq: 4 CPUs, for the Workload to move to
    seen_lost: list[str] = []

    def moved() -> dict | None:
        got = _workload(manager, name) or {}
        st = got.get("status") or {}
        seen_lost.extend(m for c in [*(st.get("conditions") or []),
                                     *(st.get("admissionChecks") or [])]
                         if "Reserving remote lost" in (m := c.get("message") or ""))
        return placed_on(w2)
    try:
        manager.kubectl("delete", "secret", "-n", "pykueue-system", "worker1-kubeconfig")
        t0 = time.monotonic()
        wait_for(lambda: (_cond(_get(manager, "multikueuecluster", "worker1"), "Active")
                          or {}).get("reason") == "BadKubeConfig", 20, "worker1 lost")
        lost = time.monotonic() - t0
        wait_for(moved, 60, "the Workload requeued and placed on worker2")
        landed = time.monotonic() - t0
        assert seen_lost, "no 'Reserving remote lost' seen on the Workload"
        assert _get(manager, "workload", "-n", NS, wl_name)["metadata"]["uid"] \
            == wl["metadata"]["uid"]  # the same Workload, requeued
        # worker1 back: its copy (reserved before worker2's) and Job are stale.
        mk.register_workers(manager, [w1])
        wait_for(lambda: _get(w1, "job", "-n", NS, name) is None
                 and _get(w1, "workload", "-n", NS, wl_name) is None, 30,
                 "worker1's stale Job and copy deleted once it is back")
        after = _get(manager, "workload", "-n", NS, wl_name)
        assert after["status"]["clusterName"] == "worker2" and _check(after)["state"] == "Ready"
        assert _get(w2, "job", "-n", NS, name) is not None
    finally:
        mk.register_workers(manager, [w1])
        _apply(w2, _queues(0, [])[2])
        manager.kubectl("delete", "job", "-n", NS, name, "--wait=false", check=False)
    print(f"\nmultikueue worker lost (timeout 3 s): Secret deleted -> worker1 inactive "
          f"{lost:.1f}s, -> Workload Ready on worker2 {landed:.1f}s")
