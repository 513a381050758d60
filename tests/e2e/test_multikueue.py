"""MultiKueue across three labs (hack/multikueue_lab.py): a manager and two workers, pykueue on
each. The manager's ClusterQueue has a MultiKueue AdmissionCheck whose config lists both
workers; worker1 has CPU quota for the Job, worker2 has none (its Workload copy waits), so
worker1's copy is the first to reserve quota.

The session's lab is the manager; the workers' labs (``<state>/../.lab-w1`` and ``-w2``, port
bases +100 and +200) and pykueue on each are started when not running
(``python hack/multikueue_lab.py up`` starts all three beforehand).
"""

from __future__ import annotations

import json
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


@pytest.fixture(scope="module")
def sites(lab: LabHandle) -> Iterator[list[mk.Site]]:
    """The session's lab as the manager, two worker labs beside it; what is not running
    (a worker lab, pykueue on any) is started here and stopped after the module."""
    all_sites = mk.sites(str(lab.state), lab.port_base)
    started = [s for s in all_sites if not mk.is_up(s)]
    for s in started:
        mk.start(s)
    try:
        _setup(all_sites)
        yield all_sites
    finally:
        for s in started:
            s.lab("pykueue-down", check=False)
            if s is not all_sites[0]:
                s.lab("down", check=False)


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


def test_eviction_on_the_manager_removes_the_copies_and_dispatches_again(sites):
    manager, w1, _ = sites
    name = f"mk-{uuid.uuid4().hex[:6]}"
    _apply(manager, _job(name, "60s"))

    def placed() -> dict | None:
        wl = _workload(manager, name)
        return wl if ((wl or {}).get("status") or {}).get("clusterName") == "worker1" \
            and _get(w1, "job", "-n", NS, name) else None
    wl = wait_for(placed, 40, "the Job placed on worker1")
    wl_name = wl["metadata"]["name"]
    # Its pod runs on worker1 and is counted on the manager's Job (mirrored): the manager's
    # quota is released only once that count is gone too.
    wait_for(lambda: ((_get(manager, "job", "-n", NS, name) or {}).get("status") or {})
             .get("active") == 1, 30, "the worker's running pod mirrored")
    manager.kubectl("patch", "workload", "-n", NS, wl_name, "--type=merge",
                    "-p", '{"spec":{"active":false}}')

    def forgotten() -> bool:
        st = (_get(manager, "workload", "-n", NS, wl_name) or {}).get("status") or {}
        return "clusterName" not in st and _get(w1, "job", "-n", NS, name) is None \
            and _get(w1, "workload", "-n", NS, wl_name) is None
    wait_for(forgotten, 30, "the copies deleted and clusterName reset after the eviction")
    manager.kubectl("patch", "workload", "-n", NS, wl_name, "--type=merge",
                    "-p", '{"spec":{"active":true}}')
    wait_for(placed, 40, "the Job placed on worker1 again")
    manager.kubectl("delete", "job", "-n", NS, name, "--wait=false")
    wait_for(lambda: _get(w1, "job", "-n", NS, name) is None, 30,
             "worker1's copy deleted with the manager's Job")
