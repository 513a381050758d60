"""An attacker's pass over MultiKueue (session 16; a manager and two workers, pykueue on each:
hack/multikueue_lab.py). The tenant is breaker13's: ServiceAccount ``tenant`` with ``edit`` in
namespace ``b13-mk`` on every cluster, read-only Workloads (no ``workloads/status``, no
``jobs/status``: checked with ``kubectl auth can-i --subresource=status``), here also allowed
the operators' kinds in its namespace on the manager (``edit`` does not aggregate them in the
lab). The first lab runs of session 15's fixes (no hole: kept so that they stay tested against
a real API server and real operators), and the hole found on a worker (prebuilt label)."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.e2e.test_breaker13_findings import (  # noqa: F401 - mk_sites: the labs' fixture
    NS,
    TENANT,
    _cleanup,
    _get,
    _job,
    _running,
    _tenant_apply,
    _workload_of,
    mk_sites,
)
from tests.e2e.test_multikueue import _apply, _cond, sites  # noqa: F401
from tests.labfixture import WORKLOAD_GC_PROBE, wait_for, wait_gc_watches

pytestmark = pytest.mark.lab
LQ = {"kueue.x-k8s.io/queue-name": "lq"}
RBAC = "rbac.authorization.k8s.io/v1"


@pytest.fixture(scope="module")
def tenant_kinds(mk_sites):  # noqa: F811
    """The tenant may create and change (not only read) the operators' kinds in NS on the
    manager, as a cluster admin grants it with the operators' aggregated roles."""
    manager = mk_sites[0]
    _apply(manager, {"apiVersion": RBAC, "kind": "Role",
                     "metadata": {"name": "tenant-kinds", "namespace": NS},
                     "rules": [{"apiGroups": ["workload.codeflare.dev", "kubeflow.org",
                                              "jobset.x-k8s.io"],
                                "resources": ["appwrappers", "mpijobs", "pytorchjobs",
                                              "jobsets"],
                                "verbs": ["get", "list", "create", "update", "patch",
                                          "delete"]}]},
           {"apiVersion": RBAC, "kind": "RoleBinding",
            "metadata": {"name": "tenant-kinds", "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "tenant-kinds"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": NS}]})
    return mk_sites


def _pod() -> dict:
    return {"metadata": {"annotations": {"lab.pykueue.dev/run-duration": "600s"}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}


def _kinds(name: str) -> list[tuple[str, tuple[str, ...], str, dict]]:
    """(resource, managedBy's path, its operator's value, object) of each kind whose
    managedBy pykueue's webhook guards: AppWrapper and MPIJob (their operators' rule is
    missing here), PyTorchJob."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{name}-j"},
           "spec": {"parallelism": 1, "completions": 1, "template": _pod()}}
    master = {"replicas": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "pytorch", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}}
    return [
        ("appwrapper", ("spec", "managedBy"), "workload.codeflare.dev/appwrapper-controller",
         {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
          "metadata": {"name": f"{name}-aw", "namespace": NS, "labels": LQ},
          "spec": {"components": [{"template": job}]}}),
        ("mpijob", ("spec", "runPolicy", "managedBy"), "kubeflow.org/mpi-operator",
         {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
          "metadata": {"name": f"{name}-mpi", "namespace": NS, "labels": LQ},
          "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {
              "Launcher": {"replicas": 1, "template": _pod()},
              "Worker": {"replicas": 1, "template": _pod()}}}}),
        ("pytorchjob", ("spec", "runPolicy", "managedBy"), "kubeflow.org/training-operator",
         {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
          "metadata": {"name": f"{name}-pt", "namespace": NS, "labels": LQ},
          "spec": {"pytorchReplicaSpecs": {"Master": master}}}),
    ]


def test_a_dispatched_objects_managed_by_cannot_be_removed_or_replaced(tenant_kinds):
    """Attack (14ea77a, first lab run): the tenant's AppWrapper, MPIJob and PyTorchJob are
    dispatched (the manager's Workload placed on worker1, check Ready); the tenant removes
    ``managedBy`` or sets its operator's value (JSON patch), which would have the manager's
    operator run the object beside its copy on worker1. Both refused by pykueue's webhook on
    the manager (``field is immutable``), managedBy stays ``kueue.x-k8s.io/multikueue``."""
    manager, w1, _ = tenant_kinds
    name = f"mb-{uuid.uuid4().hex[:5]}"
    made = []
    try:
        for kind, path, operator, obj in _kinds(name):
            obj_name = obj["metadata"]["name"]
            _tenant_apply(manager, obj)
            made.append((kind, obj_name))

            def placed(obj_name: str = obj_name) -> bool:
                wl = _workload_of(manager, obj_name) or {}
                return (wl.get("status") or {}).get("clusterName") == "worker1"
            wait_for(placed, 60, f"the {kind} placed on worker1")
            pointer = "/" + "/".join(path)
            for patch in ([{"op": "remove", "path": pointer}],
                          [{"op": "replace", "path": pointer, "value": operator}]):
                r = manager.kubectl(*TENANT, "patch", kind, obj_name, "-n", NS, "--type=json",
                                    "-p", json.dumps(patch), check=False)
                assert r.returncode != 0 and "field is immutable" in r.stderr, (kind, r.stderr)
            cur = _get(manager, kind, obj_name, "-n", NS)
            for key in path:
                cur = (cur or {}).get(key)
            assert cur == "kueue.x-k8s.io/multikueue", (kind, cur)
            wl_name = _workload_of(manager, obj_name)["metadata"]["name"]
            manager.kubectl("delete", kind, obj_name, "-n", NS, "--wait=false")
            wait_for(lambda wl_name=wl_name: _get(w1, "workload", wl_name, "-n", NS) is None,
                     30, f"the {kind}'s copy gone from worker1 (its quota free)")
    finally:
        for kind, obj_name in made:
            manager.kubectl("delete", kind, obj_name, "-n", NS, "--wait=false", check=False)


def _running_on_worker1(manager, w1, name: str) -> str:
    """Submit the tenant's Job ``name`` (1 CPU, 10 minutes) on the manager; once its pod runs
    on worker1, the name of the manager's Workload."""
    _tenant_apply(manager, _job(name, "600s"))
    wait_for(lambda: len(_running(w1, name)) == 1, 60, "the Job's pod running on worker1")
    return _workload_of(manager, name)["metadata"]["name"]


def test_a_job_orphan_deleted_on_the_manager_leaves_nothing_running_on_the_worker(
        mk_sites):  # noqa: F811
    """Attack: the tenant's Job runs on worker1 (1 pod on the manager's admission of 1); on
    the manager the tenant deletes it with ``--cascade=orphan`` (its Workload stays, without
    owner) and submits a Job of the same name again. Measured: the orphaned Workload is
    Finished (it no longer counts), worker1's copy and Job are deleted with it; the new Job
    gets a new Workload and runs 1 pod on worker1, not 2 (no copy or Job of the old one
    reused)."""
    manager, w1, _ = mk_sites
    name = f"orm-{uuid.uuid4().hex[:6]}"
    try:
        old = _running_on_worker1(manager, w1, name)
        wait_gc_watches(manager.kubectl, NS, WORKLOAD_GC_PROBE)
        manager.kubectl(*TENANT, "delete", "job", name, "-n", NS, "--cascade=orphan")

        def cleaned() -> bool:
            wl = _get(manager, "workload", old, "-n", NS)
            return (wl is None or (_cond(wl, "Finished") or {}).get("status") == "True") \
                and _get(w1, "workload", old, "-n", NS) is None \
                and _get(w1, "job", name, "-n", NS) is None and not _running(w1, name)
        wait_for(cleaned, 30, "the orphaned Workload finished, worker1's copies gone")
        _tenant_apply(manager, _job(name, "600s"))
        new = wait_for(lambda: (w := _workload_of(manager, name)) and w["metadata"]["name"]
                       != old and w, 30, "the new Job's Workload")
        wait_for(lambda: len(_running(w1, name)) == 1, 60, "the new Job's pod on worker1")
        assert _get(w1, "workload", new["metadata"]["name"], "-n", NS) is not None
        assert len(_running(w1, name)) == 1
    finally:
        _cleanup(manager, w1, name)


def test_a_running_worker_copys_prebuilt_label_cannot_be_removed_or_changed(
        mk_sites):  # noqa: F811
    """Attack on worker1: the tenant's Job runs there (the manager's copy, labelled
    ``kueue.x-k8s.io/prebuilt-workload-name: <the copy of the Workload>``); the tenant removes
    that label, or points it elsewhere. Before: allowed; worker1's pykueue made the Job a
    Workload of its own, admitted beside the copy, still admitted too: 2 Workloads and 2 CPUs
    of worker1's quota for 1 Running pod until the Job ends. Now refused (Kueue v0.17.1
    ``validateUpdateForPrebuiltWorkload``: immutable unless suspended); worker1 keeps one
    Workload for it."""
    manager, w1, _ = mk_sites
    name = f"pb-{uuid.uuid4().hex[:6]}"
    try:
        wl_name = _running_on_worker1(manager, w1, name)
        pointer = "/metadata/labels/kueue.x-k8s.io~1prebuilt-workload-name"
        for patch in ([{"op": "remove", "path": pointer}],
                      [{"op": "replace", "path": pointer, "value": "elsewhere"}]):
            r = w1.kubectl(*TENANT, "patch", "job", name, "-n", NS, "--type=json",
                           "-p", json.dumps(patch), check=False)
            assert r.returncode != 0 and "prebuilt-workload-name" in r.stderr, r.stderr
        labels = _get(w1, "job", name, "-n", NS)["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/prebuilt-workload-name"] == wl_name
        mine = [w["metadata"]["name"] for w in
                (_get(w1, "workloads", "-n", NS) or {}).get("items") or []
                if any(o.get("name") == name for o in w["metadata"].get("ownerReferences")
                       or [])]
        assert mine == [wl_name]
        assert len(_running(w1, name)) == 1
    finally:
        _cleanup(manager, w1, name)
