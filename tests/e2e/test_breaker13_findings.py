"""An attacker's pass over MultiKueue (a manager and two workers, pykueue on each:
hack/multikueue_lab.py) and AppWrapper. The tenant is ServiceAccount ``tenant`` with ``edit``
in namespace ``b13-mk`` on every cluster (and read-only Workloads): it owns its Jobs on the
manager and on the workers, never the Workloads. Measured: the pods Running on a worker
against the one admission the manager gave. Findings still open are strict xfails.

The MultiKueue labs are test_multikueue.py's fixture ``sites`` (the session's lab is the
manager, the workers beside it; started and stopped there when not running).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.e2e.test_appwrapper import aw_operator, aw_queue, holding  # noqa: F401
from tests.e2e.test_breaker14_findings import wrapped_deployment
from tests.e2e.test_multikueue import (  # noqa: F401 - sites: the labs' fixture
    _apply,
    _cond,
    _get,
    check_objects,
    mk,
    sites,
)
from tests.labfixture import WORKLOAD_GC_PROBE, LabHandle, wait_for, wait_gc_watches

pytestmark = pytest.mark.lab
NS = "b13-mk"
QUEUE = "kueue.x-k8s.io/queue-name"
PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"
K = "kueue.x-k8s.io/v1beta2"
TENANT = ("--as", f"system:serviceaccount:{NS}:tenant")


def _tenant_apply(site: mk.Site, obj: dict) -> None:
    site.kubectl(*TENANT, "apply", "-f", "-", input=json.dumps(obj))


def _site_objects(cpus: int, checks: list[str]) -> list[dict]:
    """Namespace NS with the tenant (edit, read-only Workloads) and LocalQueue ``lq`` to a
    ClusterQueue ``b13-cq`` of ``cpus`` CPUs with the given AdmissionChecks."""
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu"], "flavors": [
            {"name": "b13-flavor", "resources": [{"name": "cpu", "nominalQuota": cpus}]}]}]}
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "tenant", "namespace": NS}},
        {"apiVersion": rbac, "kind": "Role", "metadata": {"name": "tenant-wl", "namespace": NS},
         "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"],
                    "verbs": ["get", "list", "watch"]}]},
        *({"apiVersion": rbac, "kind": "RoleBinding",
           "metadata": {"name": f"tenant-{role}", "namespace": NS},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
           "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": NS}]}
          for kind, role in (("ClusterRole", "edit"), ("Role", "tenant-wl"))),
        {"apiVersion": K, "kind": "ResourceFlavor", "metadata": {"name": "b13-flavor"}},
        {"apiVersion": K, "kind": "ClusterQueue", "metadata": {"name": "b13-cq"}, "spec": spec},
        {"apiVersion": K, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": NS},
         "spec": {"clusterQueue": "b13-cq"}},
    ]


@pytest.fixture(scope="module")
def mk_sites(sites: list[mk.Site]) -> list[mk.Site]:  # noqa: F811
    """test_multikueue's labs (``sites``: started when not running, workers registered);
    here worker1 has 2 CPUs for NS, worker2 none (its copies wait), and the manager's
    ClusterQueue (4 CPUs) has MultiKueue check ``b13-check`` over both workers."""
    manager, w1, w2 = sites
    _apply(w1, *_site_objects(2, []))
    _apply(w2, *_site_objects(0, []))
    _apply(manager, *check_objects("b13-check", "b13-config", ["worker1", "worker2"]),
           *_site_objects(4, ["b13-check"]))
    wait_for(lambda: (_cond(_get(manager, "admissioncheck", "b13-check"), "Active") or {})
             .get("status") == "True", 60, "b13-check Active")
    return sites


def _job(name: str, run: str, cpus: int = 1, labels: dict | None = None) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {QUEUE: "lq", **(labels or {})}},
            "spec": {"parallelism": 1, "completions": 1, "suspend": True, "template": {
                "metadata": {"annotations": {"lab.pykueue.dev/run-duration": run}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "c", "image": "busybox",
                    "resources": {"requests": {"cpu": str(cpus)}}}]}}}}


def _workload_of(site: mk.Site, job: str) -> dict | None:
    """The Workload a Job named ``job`` owns, or the manager's copy labelled for it."""
    for w in (_get(site, "workloads", "-n", NS) or {}).get("items") or []:
        if any(r.get("name") == job for r in w["metadata"].get("ownerReferences") or []):
            return w
    return None


def _running(site: mk.Site, job: str) -> list[str]:
    """The Running pods of Job ``job`` (by its job-name label) not being deleted."""
    pods = (_get(site, "pods", "-n", NS, "-l", f"batch.kubernetes.io/job-name={job}")
            or {}).get("items") or []
    return [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]


def _events(site: mk.Site, name: str, reason: str) -> list[dict]:
    return (_get(site, "events", "-n", NS, "--field-selector",
                 f"involvedObject.name={name},reason={reason}") or {}).get("items") or []


def _conditions(obj: dict | None) -> list[str]:
    return [f"{c.get('type')}={c.get('status')}({c.get('reason')})"
            for c in ((obj or {}).get("status") or {}).get("conditions") or []]


def _log_tail(site: mk.Site, *needles: str, lines: int = 15) -> list[str]:
    """The last ``lines`` lines of the site's pykueue log that mention one of ``needles``."""
    path = site.state / "logs" / "pykueue.log"
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return [f"({path}: {exc})"]
    return [ln[:400] for ln in text if any(n in ln for n in needles)][-lines:]


def _state_of(labs: list[mk.Site], job: str, wl_name: str) -> str:
    """What a failed wait saw: the manager's Workload (conditions, checks, clusterName), on
    each worker the Job (uid, deletion, finalizers) and the copy (conditions, owners,
    annotations), and the pykueue log lines naming them; for the assertion's message."""
    out: list[str] = []
    for site in labs:
        wl = _get(site, "workload", wl_name, "-n", NS)
        j = _get(site, "job", job, "-n", NS)
        jm = (j or {}).get("metadata") or {}
        wm = (wl or {}).get("metadata") or {}
        suspend = ((j or {}).get("spec") or {}).get("suspend")
        out.append(f"[{site.name}] job uid={jm.get('uid')} "
                   f"deleting={jm.get('deletionTimestamp')} finalizers={jm.get('finalizers')} "
                   f"suspend={suspend} running={_running(site, job)}")
        out.append(f"[{site.name}] workload conditions={_conditions(wl)} "
                   f"checks={((wl or {}).get('status') or {}).get('admissionChecks')} "
                   f"clusterName={((wl or {}).get('status') or {}).get('clusterName')} "
                   f"owners={[o.get('uid') for o in wm.get('ownerReferences') or []]} "
                   f"annotations={wm.get('annotations')}")
        out.extend(f"[{site.name}] log: {ln}" for ln in _log_tail(site, wl_name, job))
    return "\n".join(out)


def _cleanup(manager: mk.Site, w1: mk.Site, *jobs: str) -> None:
    for j in jobs:
        manager.kubectl("delete", "job", j, "-n", NS, "--wait=false", "--ignore-not-found")
        w1.kubectl("delete", "job", j, "-n", NS, "--wait=false", "--ignore-not-found")
        w1.kubectl("delete", "pods", "-n", NS, "-l", f"batch.kubernetes.io/job-name={j}",
                   "--wait=false", "--ignore-not-found")


# ---------------------------------------------------------------------------------- MultiKueue


def test_a_worker_job_deleted_with_orphan_is_not_run_again_beside_its_pods(mk_sites):
    """The tenant's Job runs on worker1 (1 pod, one admission on the manager). On worker1 the
    tenant deletes that Job with ``--cascade=orphan``: its pod keeps running and the copy of
    the Workload becomes ownerless, still admitted, still labelled as a MultiKueue copy. The
    manager re-creates the Job on worker1 (it is gone there). Before: the new Job adopted the
    orphaned copy and started a second pod beside the first (2 Running on 1 admitted); or,
    when worker1's pykueue saw the copy ownerless first, it found no pod of it (it looked for
    pods of a Job named after the copy, whose name comes from the manager's Job) and Finished
    it (OwnerNotFound), the manager Finished its Workload too: the pod ran on no quota on
    either cluster. After: a copy adopted once is adopted again by that Job only
    (``pykueue.dev/adopted-by``), and its pods are those of the uid it was adopted for: the
    new Job stays suspended (Event ``WorkloadNameConflict``), 1 pod Running, the copy keeps
    its quota (QuotaReserved, not Finished) and the manager's Workload is not Finished."""
    manager, w1, _ = mk_sites
    name = f"orph-{uuid.uuid4().hex[:6]}"
    _tenant_apply(manager, _job(name, "600s"))
    try:
        wait_for(lambda: len(_running(w1, name)) == 1, 60, "the Job's pod running on worker1")
        old = _get(w1, "job", name, "-n", NS)
        wait_gc_watches(w1.kubectl, NS, WORKLOAD_GC_PROBE)
        w1.kubectl(*TENANT, "delete", "job", name, "-n", NS, "--cascade=orphan")
        wl_name = _workload_of(manager, name)["metadata"]["name"]

        def finished_or_recreated() -> str | None:
            if _cond(_get(manager, "workload", wl_name, "-n", NS), "Finished"):
                return "the manager's Workload Finished while the pod runs"
            j = _get(w1, "job", name, "-n", NS)
            return "re-created" if j and j["metadata"]["uid"] != old["metadata"]["uid"] \
                else None
        try:
            seen = wait_for(finished_or_recreated, 90, "the Job re-created on worker1")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_state_of(list(mk_sites), name, wl_name)}") from None
        assert seen == "re-created", f"{seen}\n{_state_of(list(mk_sites), name, wl_name)}"

        def settled() -> str | None:
            if len(running := _running(w1, name)) > 1:
                return f"{len(running)} pods running"
            j = _get(w1, "job", name, "-n", NS) or {}
            return "held" if j.get("spec", {}).get("suspend") is True \
                and _events(w1, name, "WorkloadNameConflict") else None
        assert wait_for(settled, 90, "a second pod running or the new Job held") == "held"
        assert len(_running(w1, name)) == 1
        # The orphaned pod still holds the admission: the copy waits for it (it is named
        # after the manager's Job, not the worker's), nothing is Finished under it.

        def accounted() -> str | None:
            if _cond(_get(manager, "workload", wl_name, "-n", NS), "Finished"):
                return "the manager's Workload Finished while the pod runs"
            copy = _get(w1, "workload", wl_name, "-n", NS)
            if copy is None or (_cond(copy, "Finished") or {}).get("status") == "True":
                return "worker1's copy gone or Finished while the pod runs"
            holds = (_cond(copy, "QuotaReserved") or {}).get("status") == "True"
            return "waits" if holds and (_events(w1, wl_name, "WaitingForPods")
                                         or len(_running(w1, name)) == 1) else None
        assert wait_for(accounted, 90, "the copy waiting for the orphaned pod") == "waits"
        assert len(_running(w1, name)) == 1
    finally:
        _cleanup(manager, w1, name)


def test_a_tenants_job_that_adopted_a_copy_stops_when_the_copy_is_deleted(mk_sites):
    """Worker1's quota is taken (a filler), so the manager's copy of the tenant's Workload
    waits there. The tenant creates on worker1 its own Job ``evil`` labelled
    ``prebuilt-workload-name: <the copy>``; it adopts the waiting copy. The filler goes: the
    copy is admitted on worker1 and ``evil`` runs; the manager's own Job for worker1 finds the
    copy taken. The tenant deletes its manager Job: the manager releases the quota and
    deletes the copies on worker1. Before: ``evil``, its Workload gone, ran on (a Running pod
    on no admission anywhere: a prebuilt Job without its Workload was never stopped). After:
    it is stopped like any Job without a Workload."""
    manager, w1, _ = mk_sites
    suffix = uuid.uuid4().hex[:6]
    name, evil, filler = f"steal-{suffix}", f"evil-{suffix}", f"fill-{suffix}"
    _apply(w1, _job(filler, "300s", cpus=2))
    try:
        wait_for(lambda: len(_running(w1, filler)) == 1, 60, "the filler running on worker1")
        _tenant_apply(manager, _job(name, "300s"))
        wl = wait_for(lambda: _workload_of(manager, name), 30, "the manager's Workload")
        wl_name = wl["metadata"]["name"]
        wait_for(lambda: _get(w1, "workload", wl_name, "-n", NS), 30, "the copy on worker1")
        _tenant_apply(w1, _job(evil, "300s", labels={PREBUILT: wl_name}))
        wait_for(lambda: (_workload_of(w1, evil) or {}).get("metadata", {}).get("name")
                 == wl_name, 30, "evil adopting the waiting copy")
        w1.kubectl("delete", "job", filler, "-n", NS, "--wait=false")
        wait_for(lambda: len(_running(w1, evil)) == 1, 60, "evil running on the copy")
        manager.kubectl(*TENANT, "delete", "job", name, "-n", NS, "--wait=false")
        wait_for(lambda: _get(w1, "workload", wl_name, "-n", NS) is None, 30,
                 "the copy deleted on worker1 by the manager")
        wait_for(lambda: (_get(w1, "job", evil, "-n", NS) or {}).get("spec", {})
                 .get("suspend") is True, 30, "evil stopped without its Workload")
        wait_for(lambda: not _running(w1, evil), 30, "evil's pod gone")
    finally:
        _cleanup(manager, w1, name, evil, filler)


# ---------------------------------------------------------------------------------- AppWrapper


def test_a_wrapped_deployment_scaled_up_runs_no_more_gpus_than_admitted(
        lab: LabHandle, aw_queue: str) -> None:  # noqa: F811
    """The tenant's AppWrapper wraps a Deployment of 1 one-GPU replica and is admitted for 1
    GPU (its ClusterQueue has 2). The tenant (``edit``) scales the Deployment to 2, through
    the scale subresource and by patching ``spec.replicas``. Before: both pods ran on the
    A100 flavor with the admission's nodeSelector and podset label (2 GPUs on an admission
    of 1). Now: both refused by the webhook (``/validate-apps-v1-appwrapper-wrapped``), the
    replicas stay 1 and one pod runs."""
    ns = aw_queue
    tenant = wrapped_deployment(lab, ns)
    try:
        def running() -> list[dict]:
            return [p for p in holding(lab, ns, "dep") if p["status"].get("phase") == "Running"]
        wait_for(lambda: len(running()) == 1, 90, "the wrapped Deployment's pod running")
        refusals = [
            lab.kubectl(*tenant, "scale", "deployment", "dep-d", "-n", ns, "--replicas=2",
                        check=False),
            lab.kubectl(*tenant, "patch", "deployment", "dep-d", "-n", ns, "--type=merge",
                        "-p", '{"spec": {"replicas": 2}}', check=False)]
        for r in refusals:
            assert r.returncode != 0 and "is wrapped by AppWrapper" in r.stderr, r.stderr
        assert lab.get("deployment", "dep-d", "-n", ns)["spec"]["replicas"] == 1
        assert len(running()) == 1
    finally:
        lab.kubectl("delete", "appwrapper", "dep", "-n", ns, "--wait=false", check=False)
