#!/usr/bin/env python3
"""MultiKueue between pykueue and real Kueue v0.17.1, both directions (`make multikueue-interop`,
docs/multikueue.md#interoperability-with-kueue-v0171).

    python hack/multikueue_interop.py                  # both directions, then the labs down
    python hack/multikueue_interop.py --direction a    # pykueue manager -> Kueue worker only
    python hack/multikueue_interop.py --keep           # leave the last direction's labs up

Direction **a**: the manager lab runs pykueue (MultiKueue manager), worker1's lab runs Kueue's
manager v0.17.1 with its webhooks (hack/kueue_lab.py), not pykueue. Direction **b**: the manager
lab runs Kueue's manager with its MultiKueue admission check controller (its configuration's
``multiKueue`` section, the worker's kubeconfig Secret in ``kueue-system``), worker1's lab runs
pykueue. The labs are hack/multikueue_lab.py's manager and worker1 slots (LAB_STATE_DIR,
LAB_PORT_BASE; worker1 at port base + 100 in ``<state>/../.lab-w1``); each direction starts
them fresh and stops them after.

For each of ``--jobs`` batch Jobs (1 pod, 1 CPU, running ``--run`` seconds on the worker's kwok
node) the steps of Kueue's protocol are watched (polled every 0.1 s through the API servers,
each step waits for the one before it with a deadline): the Workload copy on the worker with
the origin label, its quota reserved there by the worker's queueing, the manager's check Ready
with ``status.clusterName``, the Job created on the worker with
``kueue.x-k8s.io/prebuilt-workload-name`` and adopted by the worker's Workload, its pod
Running, the worker Job's status on the manager's Job, the Finished Workload on the manager
and the copies deleted on the worker. The table prints each step's time since the Job's
creation per Job and pass/fail, then the latencies: manager quota reservation (its admission
starts there) -> pod Running on the worker, worker pod Running -> ``status.active`` on the
manager's Job (status mirror), worker Job Complete -> manager Job Complete.

Then three eviction scenarios (``--no-evictions`` skips them), each step timed from its
trigger: **on the manager** (the manager's Workload of a running Job deactivated: evicted
there, no pod left on the worker, the manager's quota released, the worker's Job and copy
deleted; reactivated, it runs on worker1 again), **preemption on the manager** (the
manager's ClusterQueue preempting LowerPriority, a Job of priority 1000 taking its 4 CPUs:
the running Workload Evicted ``Preempted``, its pods on the worker gone, its quota released,
its copies deleted, the preemptor running on worker1) and **on the worker** (worker1's ClusterQueue
preempting LowerPriority, a Job of priority 1000 local to worker1 taking its 4 CPUs: the copy
Evicted ``Preempted`` there, the manager's ``MultiKueue`` Event "Workload evicted on worker
cluster" (Kueue's ``MultiKueueRedoAdmissionOnEvictionInWorker``), the manager's Workload
requeued with a new copy waiting on worker1; the preemptor deleted, it runs there again).

Exit status 0 when every step of every direction run passed. Needs root (Kueue's manager runs
in a private mount namespace, see hack/kueue_lab.py) and `make kueue` built.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))

import kueue_lab  # noqa: E402
import multikueue_lab as mk  # noqa: E402

MK = "kueue.x-k8s.io/multikueue"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
PREBUILT_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
NS = "mk-interop"
K = "kueue.x-k8s.io/v1beta2"
Obj = dict[str, Any]


# ---------------------------------------------------------------- reading a lab fast

class Api:
    """GETs against one lab's API server as its admin (client certificate from the lab's
    pki), about 10 ms each: the polling loop reads six objects per tick."""

    def __init__(self, site: mk.Site) -> None:
        self.server = site.server()
        pki = site.state / "pki"
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    def get(self, path: str) -> Obj | None:
        """The object or list at ``path``; None when absent (404) or unreachable."""
        try:
            with urllib.request.urlopen(self.server + path, context=self.ctx,  # noqa: S310
                                        timeout=5) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        except OSError:
            return None


def cond(obj: Obj | None, ctype: str) -> Obj | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def is_true(obj: Obj | None, ctype: str) -> bool:
    return (cond(obj, ctype) or {}).get("status") == "True"


def apply(site: mk.Site, *objs: Obj) -> None:
    site.kubectl("apply", "-f", "-",
                 input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def wait(what: str, fn: Callable[[], Any], timeout: float) -> Any:
    return mk.wait_until(what, fn, timeout)


# ---------------------------------------------------------------- starting the labs

class MultiKueueKueueLab(kueue_lab.KueueLab):
    """hack/kueue_lab.py's lab with a ``multiKueue`` section in Kueue's configuration
    (v1beta2 Configuration: ``gcInterval``, ``origin``, ``workerLostTimeout``)."""

    def __init__(self, site: mk.Site, multikueue: Obj | None = None) -> None:
        super().__init__(site.state, site.port_base, ROOT / ".k8sbin" / "current",
                         env=site.env())
        self.multikueue = multikueue

    def manager_config(self, kdir: Path, certs: Path, *args: Any, **kwargs: Any) -> dict:
        # Every other option as KueueLab's (start_manager passes them all, positionally).
        cfg = super().manager_config(kdir, certs, *args, **kwargs)
        if self.multikueue is not None:
            cfg["multiKueue"] = dict(self.multikueue)
        return cfg


def start_kueue(site: mk.Site, multikueue: Obj | None = None) -> None:
    """``site``'s lab with Kueue's CRDs, webhooks and manager instead of pykueue."""
    kl = MultiKueueKueueLab(site, multikueue)
    kl.lab("up")
    kdir, kbin = kueue_lab.module_dir(), kueue_lab.bin_dir()
    kl.use_kueue_crds(kdir)
    proc = kl.start_manager(kdir, kbin, site.state / "logs")
    (site.state / "pids").mkdir(parents=True, exist_ok=True)
    (site.state / "pids" / "kueue-manager.pid").write_text(f"{proc.pid}\n")
    print(f"interop: {site.name}: Kueue {kueue_lab.KUEUE_VERSION} manager pid {proc.pid} "
          f"(log {site.state / 'logs' / 'kueue.log'})")


def stop(site: mk.Site) -> None:
    """Kueue's manager (if any), pykueue and the lab of ``site``; state removed."""
    mk.stop_kueue(site)
    site.lab("pykueue-down", check=False)
    site.lab("down", check=False)


def register(manager: mk.Site, worker: mk.Site, namespace: str) -> None:
    """The worker's kubeconfig Secret (in ``namespace``: the manager's own) and its
    MultiKueueCluster on the manager."""
    sec = mk.secret(f"{worker.name}-kubeconfig", mk.worker_kubeconfig(worker))
    sec["metadata"]["namespace"] = namespace
    manager.kubectl("create", "namespace", namespace, check=False)
    apply(manager, sec, mk.cluster(worker.name, f"{worker.name}-kubeconfig"))


def queues(cpus: int, checks: list[str]) -> list[Obj]:
    spec: Obj = {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu"],
        "flavors": [{"name": "interop", "resources": [{"name": "cpu", "nominalQuota": cpus}]}]}]}
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
            {"apiVersion": K, "kind": "ResourceFlavor", "metadata": {"name": "interop"}},
            {"apiVersion": K, "kind": "ClusterQueue", "metadata": {"name": "interop-cq"},
             "spec": spec},
            {"apiVersion": K, "kind": "LocalQueue",
             "metadata": {"name": "interop-lq", "namespace": NS},
             "spec": {"clusterQueue": "interop-cq"}}]


def multikueue_objects(clusters: list[str]) -> list[Obj]:
    return [{"apiVersion": K, "kind": "MultiKueueConfig", "metadata": {"name": "interop"},
             "spec": {"clusters": clusters}},
            {"apiVersion": K, "kind": "AdmissionCheck", "metadata": {"name": "interop-mk"},
             "spec": {"controllerName": MK, "parameters": {
                 "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                 "name": "interop"}}}]


def job(name: str, run: float) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"kueue.x-k8s.io/queue-name": "interop-lq"}},
            "spec": {"parallelism": 1, "completions": 1, "template": {
                "metadata": {"annotations": {"lab.pykueue.dev/run-duration": f"{run:g}s"}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "c", "image": "busybox",
                    "resources": {"requests": {"cpu": "1"}}}]}}}}


# ---------------------------------------------------------------- watching one Job

@dataclass
class View:
    """What one tick reads: the manager's and the worker's Job, Workload and pods."""

    m_job: Obj | None = None
    m_wl: Obj | None = None
    m_pods: list[Obj] = field(default_factory=list)
    w_job: Obj | None = None
    w_wl: Obj | None = None
    w_pods: list[Obj] = field(default_factory=list)


def _owned(items: list[Obj], job_name: str) -> Obj | None:
    return next((w for w in items if any(r.get("kind") == "Job" and r.get("name") == job_name
                                         for r in w["metadata"].get("ownerReferences") or [])),
                None)


def read(m: Api, w: Api, name: str, wl_name: str | None) -> View:
    v = View()
    v.m_job = m.get(f"/apis/batch/v1/namespaces/{NS}/jobs/{name}")
    m_wls = (m.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads") or {}).get(
        "items") or []
    v.m_wl = _owned(m_wls, name)
    sel = f"?labelSelector=batch.kubernetes.io/job-name%3D{name}"
    v.m_pods = (m.get(f"/api/v1/namespaces/{NS}/pods{sel}") or {}).get("items") or []
    v.w_job = w.get(f"/apis/batch/v1/namespaces/{NS}/jobs/{name}")
    wl_name = wl_name or (v.m_wl or {}).get("metadata", {}).get("name")
    if wl_name:
        v.w_wl = w.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads/{wl_name}")
    v.w_pods = (w.get(f"/api/v1/namespaces/{NS}/pods{sel}") or {}).get("items") or []
    return v


def _check(wl: Obj | None) -> Obj:
    return next((c for c in ((wl or {}).get("status") or {}).get("admissionChecks") or []
                 if c.get("name") == "interop-mk"), {})


def _job_done(job: Obj | None) -> bool:
    return is_true(job, "Complete") and not ((job or {}).get("status") or {}).get("active")


# (key, description, predicate on a View). Each is looked for once the one before it held.
STEPS: list[tuple[str, str, Callable[[View], bool]]] = [
    ("defaulted", "manager: Job spec.managedBy defaulted to kueue.x-k8s.io/multikueue",
     lambda v: ((v.m_job or {}).get("spec") or {}).get("managedBy") == MK),
    ("m_reserved", "manager: Workload QuotaReserved",
     lambda v: is_true(v.m_wl, "QuotaReserved")),
    ("copy", "worker: Workload copy with the origin label",
     lambda v: bool(v.w_wl) and ORIGIN_LABEL in (v.w_wl["metadata"].get("labels") or {})),
    ("w_reserved", "worker: its queueing reserved quota for the copy",
     lambda v: is_true(v.w_wl, "QuotaReserved")),
    ("ready", "manager: check Ready, status.clusterName worker1",
     lambda v: _check(v.m_wl).get("state") == "Ready"
     and ((v.m_wl or {}).get("status") or {}).get("clusterName") == "worker1"),
    ("w_job", "worker: Job with prebuilt-workload-name + origin, no managedBy",
     lambda v: bool(v.w_job)
     and (v.w_job["metadata"].get("labels") or {}).get(PREBUILT_LABEL)
     == (v.m_wl or {}).get("metadata", {}).get("name")
     and ORIGIN_LABEL in (v.w_job["metadata"].get("labels") or {})
     and not v.w_job["spec"].get("managedBy")),
    ("adopted", "worker: the copy adopted by the Job (controller ownerReference)",
     lambda v: bool(v.w_wl) and bool(v.w_job) and any(
         r.get("uid") == v.w_job["metadata"]["uid"] and r.get("controller")
         for r in v.w_wl["metadata"].get("ownerReferences") or [])),
    ("w_running", "worker: pod Running",
     lambda v: any(p["status"].get("phase") == "Running" for p in v.w_pods)),
    ("mirrored", "manager: Job status.active=1 mirrored from the worker",
     lambda v: ((v.m_job or {}).get("status") or {}).get("active") == 1),
    ("no_pod", "manager: no pod of the Job on the manager",
     lambda v: not v.m_pods),
    ("w_done", "worker: Job Complete",
     lambda v: _job_done(v.w_job)),
    ("m_finished", "manager: Workload Finished",
     lambda v: is_true(v.m_wl, "Finished")),
    ("m_done", "manager: Job Complete (status mirrored)",
     lambda v: _job_done(v.m_job)),
    ("cleaned", "worker: Job and Workload copy deleted",
     lambda v: v.w_job is None and v.w_wl is None),
]

# (label, from step, to step)
LATENCIES = [
    ("manager quota reserved -> pod Running on worker", "m_reserved", "w_running"),
    ("manager check Ready -> pod Running on worker", "ready", "w_running"),
    ("worker pod Running -> manager Job active=1 (mirror)", "w_running", "mirrored"),
    ("worker Job Complete -> manager Job Complete (mirror)", "w_done", "m_done"),
    ("manager Workload Finished -> copies deleted", "m_finished", "cleaned"),
]


def follow(manager: mk.Site, worker: mk.Site, name: str, run: float,
           timeout: float) -> tuple[dict[str, float], str]:
    """Create Job ``name`` on the manager and record when each step of STEPS is first seen
    (seconds since the create returned). Returns the times and, when a step did not happen
    before ``timeout``, what was last seen."""
    m, w = Api(manager), Api(worker)
    apply(manager, job(name, run))
    t0 = time.monotonic()
    seen: dict[str, float] = {}
    wl_name: str | None = None
    v = View()
    while time.monotonic() - t0 < timeout and len(seen) < len(STEPS):
        v = read(m, w, name, wl_name)
        if v.m_wl:
            wl_name = v.m_wl["metadata"]["name"]
        now = time.monotonic() - t0
        for key, _, pred in STEPS:
            if key in seen:
                continue
            try:
                ok = pred(v)
            except (KeyError, TypeError):
                ok = False
            if ok:
                seen[key] = now
            elif key != "no_pod":  # "no pod" holds from the start; the rest are in order
                break
        time.sleep(0.1)
    if len(seen) == len(STEPS):
        return seen, ""
    chk = _check(v.m_wl)
    last = (f"manager check {chk.get('state')!r} {chk.get('message')!r}, manager Workload "
            f"conditions {_conds(v.m_wl)}, worker Workload {_conds(v.w_wl)}, worker Job "
            f"{'present' if v.w_job else 'absent'}, worker pods "
            f"{[p['status'].get('phase') for p in v.w_pods]}")
    return seen, last


def _conds(obj: Obj | None) -> str:
    if obj is None:
        return "absent"
    return ",".join(f"{c['type']}={c['status']}({c.get('reason', '')})"
                    for c in (obj.get("status") or {}).get("conditions") or []) or "none"


# ---------------------------------------------------------------- evictions

HIGH = "interop-high"
REDO = 'Workload evicted on worker cluster: "worker1"'


@dataclass
class Scenario:
    """One eviction scenario: its steps in order, each with the seconds from its trigger
    (None: not seen, or skipped after a step that was not)."""

    title: str
    describe: Callable[[], str] = lambda: ""
    rows: list[tuple[str, float | None]] = field(default_factory=list)
    failure: str = ""
    # Why a failure is Kueue's own behaviour, not pykueue's (shown, not counted).
    known: str = ""

    def step(self, desc: str, fn: Callable[[], Any], since: float,
             timeout: float = 120.0) -> Any:
        """``fn()``'s first truthy value, polled every 0.1 s; recorded against ``since``."""
        if self.failure:
            self.rows.append((desc, None))
            return None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                got = fn()
            except (KeyError, TypeError):
                got = None
            if got:
                self.rows.append((desc, time.monotonic() - since))
                return got
            time.sleep(0.1)
        self.rows.append((desc, None))
        self.failure = f"{self.title}: '{desc}' not seen in {timeout:.0f}s; {self.describe()}"
        return None

    def act(self, fn: Callable[[], Any]) -> float:
        """Run the trigger ``fn`` unless a step failed; the time after it."""
        if not self.failure:
            fn()
        return time.monotonic()


class Eviction:
    """The manager's and worker1's view of Job ``name`` (its Workload found on the manager
    by owner, the worker's copy by that Workload's name)."""

    def __init__(self, manager: mk.Site, worker: mk.Site, name: str) -> None:
        self.manager, self.worker, self.name = manager, worker, name
        self.m, self.w = Api(manager), Api(worker)
        self.wl_name = ""

    def m_wl(self) -> Obj | None:
        items = (self.m.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads")
                 or {}).get("items") or []
        wl = _owned(items, self.name)
        if wl:
            self.wl_name = wl["metadata"]["name"]
        return wl

    def w_wl(self) -> Obj | None:
        if not self.wl_name:
            self.m_wl()
        return self.w.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads/"
                          f"{self.wl_name}") if self.wl_name else None

    def w_job(self, name: str | None = None) -> Obj | None:
        return self.w.get(f"/apis/batch/v1/namespaces/{NS}/jobs/{name or self.name}")

    def w_running(self) -> bool:
        sel = f"?labelSelector=batch.kubernetes.io/job-name%3D{self.name}"
        pods = (self.w.get(f"/api/v1/namespaces/{NS}/pods{sel}") or {}).get("items") or []
        return any(p["status"].get("phase") == "Running" for p in pods)

    def w_pods_gone(self) -> bool:
        sel = f"?labelSelector=batch.kubernetes.io/job-name%3D{self.name}"
        pods = (self.w.get(f"/api/v1/namespaces/{NS}/pods{sel}") or {}).get("items")
        return pods == [] or (pods is not None and not any(
            p["status"].get("phase") in ("Pending", "Running") for p in pods))

    def placed(self) -> bool:
        wl = self.m_wl()
        return _check(wl).get("state") == "Ready" \
            and ((wl or {}).get("status") or {}).get("clusterName") == "worker1" \
            and self.w_running()

    def describe(self) -> str:
        """What was last seen, for a failure."""
        wl, copy = self.m_wl(), self.w_wl()
        chk = _check(wl)
        meta = (copy or {}).get("metadata") or {}
        return (f"manager check {chk.get('state')!r} {chk.get('message')!r}, clusterName "
                f"{((wl or {}).get('status') or {}).get('clusterName')!r}, manager Workload "
                f"{_conds(wl)}; worker copy uid {meta.get('uid')!r} deleting "
                f"{bool(meta.get('deletionTimestamp'))} finalizers {meta.get('finalizers')} "
                f"{_conds(copy)}; worker Job {'present' if self.w_job() else 'absent'}")

    def set_active(self, active: bool) -> None:
        self.manager.kubectl("patch", "workload", "-n", NS, self.wl_name, "--type=merge",
                             "-p", json.dumps({"spec": {"active": active}}))

    def redo_event(self) -> bool:
        """The manager's ``MultiKueue`` Event on the Workload saying it was evicted on
        worker1 (Kueue's and pykueue's: the check's Retry message)."""
        sel = "?fieldSelector=reason%3DMultiKueue"
        items = (self.m.get(f"/api/v1/namespaces/{NS}/events{sel}") or {}).get("items") or []
        return any(e.get("involvedObject", {}).get("name") == self.wl_name
                   and REDO in (e.get("message") or "") for e in items)


def stopped_and_released(sc: Scenario, ev: Eviction, since: float) -> None:
    """The steps after the manager's Workload of ``ev`` was evicted there: no pod left on
    the worker, the manager's quota released, the worker's Job and copy deleted."""
    sc.step("worker: no pod of the Job left", ev.w_pods_gone, since, 120)
    sc.step("manager: quota released (QuotaReserved=False)",
            lambda: (cond(ev.m_wl(), "QuotaReserved") or {}).get("status") == "False",
            since, 120)
    sc.step("worker: Job and Workload copy deleted",
            lambda: ev.w_job() is None and ev.w_wl() is None, since, 120)


def evict_on_manager(manager: mk.Site, worker: mk.Site, direction: str) -> Scenario:
    """The manager's Workload deactivated while its Job runs on worker1: the worker stops
    it (pykueue's manager deletes the copies; Kueue's sets DeactivationTarget
    ``WorkloadEvictedOnManagerCluster`` on the copy, which the worker's Kueue deactivates),
    the manager's quota is released, the copies go; reactivated, it runs on worker1 again."""
    ev = Eviction(manager, worker, f"interop-{direction}-evm")
    sc = Scenario("eviction on the manager", ev.describe)
    apply(manager, job(ev.name, 600))
    t0 = time.monotonic()
    try:
        sc.step("manager: check Ready, pod Running on worker1 (since create)", ev.placed, t0)
        sc.step("manager: the worker Job's status mirrored (active=1)",
                lambda: ((ev.m.get(f"/apis/batch/v1/namespaces/{NS}/jobs/{ev.name}") or {})
                         .get("status") or {}).get("active") == 1, t0, 60)
        t1 = sc.act(lambda: ev.set_active(False))
        sc.step("manager: Workload Evicted (deactivated)",
                lambda: is_true(ev.m_wl(), "Evicted"), t1, 60)
        stopped_and_released(sc, ev, t1)
        t2 = sc.act(lambda: ev.set_active(True))
        sc.step("reactivated: check Ready, pod Running on worker1 again", ev.placed, t2, 120)
    finally:
        manager.kubectl("delete", "job", "-n", NS, ev.name, "--wait=false", check=False)
    sc.step("manager Job deleted: worker's Job and copy deleted",
            lambda: ev.w_job() is None and ev.w_wl() is None, time.monotonic(), 120)
    if sc.failure and direction == "b" and kueue_log_has(
            manager, f'"name":"{ev.name}"', "restore info", "field is immutable"):
        sc.known = ("Kueue v0.17.1's manager cannot stop its own Job once the worker Job's "
                    "status (startTime) is mirrored: 'restore info: ... spec.template: field "
                    "is immutable' in its log, so it never releases the quota (Kueue's, "
                    "cf. kueue#15380; pykueue's manager clears the mirrored counts instead)")
    return sc


def kueue_log_has(site: mk.Site, *needles: str) -> bool:
    """A line of ``site``'s Kueue manager log holding every one of ``needles``."""
    try:
        with open(site.state / "logs" / "kueue.log", encoding="utf-8",
                  errors="replace") as f:
            return any(all(n in line for n in needles) for line in f)
    except OSError:
        return False


def sized(obj: Obj, cpus: int) -> Obj:
    """``obj`` (a ``job``) with its pod asking for ``cpus`` CPUs."""
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = str(cpus)
    return obj


def urgent_job(name: str, cpus: int) -> Obj:
    """A Job of priority ``interop-high`` (1000) asking for ``cpus`` CPUs."""
    hi = sized(job(name, 600), cpus)
    hi["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = HIGH
    return hi


def preempting(site: mk.Site, checks: list[str]) -> None:
    """``site``'s ClusterQueue preempts lower priorities within it; WorkloadPriorityClass
    ``interop-high`` (1000) there."""
    cq = queues(4, checks)[2]
    cq["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    apply(site, cq, {"apiVersion": K, "kind": "WorkloadPriorityClass",
                     "metadata": {"name": HIGH}, "value": 1000})


def preempt_on_manager(manager: mk.Site, worker: mk.Site, direction: str) -> Scenario:
    """The manager's Workload of a Job (2 CPUs) running on worker1 preempted on the manager
    by a Job of priority 1000 asking for 3 of its 4 CPUs (WorkloadPriorityClass
    ``interop-high`` on the manager only: the worker's copy carries the priority): the worker
    stops it (pykueue's manager
    deletes the copies; Kueue's sets DeactivationTarget ``WorkloadEvictedOnManagerCluster``
    on the copy, which the worker deactivates), the manager's quota is released, and the
    preemptor runs on worker1."""
    ev = Eviction(manager, worker, f"interop-{direction}-evp")
    sc = Scenario("preemption on the manager", ev.describe)
    urgent = f"interop-{direction}-murgent"
    hi = Eviction(manager, worker, urgent)
    preempting(manager, ["interop-mk"])
    apply(manager, sized(job(ev.name, 600), 2))
    t0 = time.monotonic()
    try:
        sc.step("manager: check Ready, pod Running on worker1 (since create)", ev.placed, t0)
        t1 = sc.act(lambda: apply(manager, urgent_job(urgent, 3)))
        sc.step("manager: Workload Evicted (Preempted) by the priority-1000 Job",
                lambda: (c := cond(ev.m_wl(), "Evicted")) and c.get("status") == "True"
                and c.get("reason") == "Preempted", t1, 60)
        stopped_and_released(sc, ev, t1)
        sc.step("the priority-1000 Job: check Ready, pod Running on worker1", hi.placed, t1,
                120)
    finally:
        for name in (ev.name, urgent):
            manager.kubectl("delete", "job", "-n", NS, name, "--wait=false", check=False)
    sc.step("manager Jobs deleted: worker's Jobs and copies deleted",
            lambda: ev.w_job() is None and ev.w_wl() is None and hi.w_job() is None
            and hi.w_wl() is None, time.monotonic(), 120)
    return sc


def evict_on_worker(manager: mk.Site, worker: mk.Site, direction: str) -> Scenario:
    """The copy preempted on worker1 by a Job local to it (priority 1000, all of worker1's
    4 CPUs; the worker's ClusterQueue preempts LowerPriority): the manager redoes the
    admission at once (Kueue's ``MultiKueueRedoAdmissionOnEvictionInWorker``, on by
    default): its check goes Retry (Event ``MultiKueue``: "Workload evicted on worker
    cluster"), it evicts and requeues the Workload, whose new copy waits on worker1; the
    preemptor deleted, the Workload runs on worker1 again."""
    ev = Eviction(manager, worker, f"interop-{direction}-evw")
    sc = Scenario("eviction on the worker", ev.describe)
    urgent = f"interop-{direction}-urgent"
    preempting(worker, [])
    apply(manager, job(ev.name, 600))
    t0 = time.monotonic()
    try:
        sc.step("manager: check Ready, pod Running on worker1 (since create)", ev.placed, t0)
        first = (ev.w_wl() or {}).get("metadata", {}).get("uid")
        t1 = sc.act(lambda: apply(worker, urgent_job(urgent, 4)))
        sc.step("worker: copy Evicted (Preempted) by the priority-1000 Job",
                lambda: (c := cond(ev.w_wl(), "Evicted")) and c.get("status") == "True"
                and c.get("reason") == "Preempted", t1, 60)
        sc.step(f"manager: Event MultiKueue '{REDO}...'", ev.redo_event, t1, 60)

        def requeued() -> bool:
            wl = ev.m_wl()
            copy = ev.w_wl() or {}
            return _check(wl).get("state") == "Pending" \
                and not ((wl or {}).get("status") or {}).get("clusterName") \
                and copy.get("metadata", {}).get("uid") not in (None, first) \
                and not is_true(copy, "QuotaReserved")
        sc.step("manager: requeued, check Pending, a new copy waiting on worker1", requeued,
                t1, 120)
        sc.step("worker: the priority-1000 Job admitted",
                lambda: is_true(_owned((ev.w.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/"
                                                 f"{NS}/workloads") or {}).get("items") or [],
                                       urgent), "Admitted"), t1, 120)
        t2 = sc.act(lambda: worker.kubectl("delete", "job", "-n", NS, urgent,
                                           "--wait=false"))
        sc.step("preemptor deleted: check Ready, pod Running on worker1 again", ev.placed,
                t2, 120)
    finally:
        manager.kubectl("delete", "job", "-n", NS, ev.name, "--wait=false", check=False)
        worker.kubectl("delete", "job", "-n", NS, urgent, "--wait=false", check=False)
    sc.step("manager Job deleted: worker's Job and copy deleted",
            lambda: ev.w_job() is None and ev.w_wl() is None, time.monotonic(), 120)
    return sc


def eviction_table(scenarios: list[Scenario]) -> str:
    lines = []
    for sc in scenarios:
        lines.append(f"{sc.title} (seconds since the trigger)")
        for desc, t in sc.rows:
            cell = f"{t:6.1f}s" if t is not None else "      -"
            verdict = "PASS" if t is not None else "KUEUE" if sc.known else "FAIL"
            lines.append(f"  {desc:80s} {cell}  {verdict}")
        if sc.known:
            lines.append(f"KUEUE: {sc.failure}\n  {sc.known}")
    return "\n".join(lines)


# ---------------------------------------------------------------- one direction

@dataclass
class Result:
    direction: str
    times: list[dict[str, float]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    setup_s: float = 0.0
    connect_s: float = 0.0
    evictions: list[Scenario] = field(default_factory=list)


def connected(manager: mk.Site) -> Callable[[], bool]:
    def ok() -> bool:
        r = manager.kubectl("get", "multikueuecluster", "worker1", "-o", "json", check=False)
        a = manager.kubectl("get", "admissioncheck", "interop-mk", "-o", "json", check=False)
        return r.returncode == 0 and a.returncode == 0 and is_true(
            json.loads(r.stdout), "Active") and is_true(json.loads(a.stdout), "Active")
    return ok


TITLES = {"a": "a: pykueue manager -> Kueue v0.17.1 worker",
          "b": "b: Kueue v0.17.1 manager -> pykueue worker"}


def run_direction(direction: str, all_sites: list[mk.Site], jobs: int, run: float,
                  timeout: float, evictions: bool = True) -> Result:
    """Direction ``a`` (pykueue manager, Kueue worker) or ``b`` (Kueue manager, pykueue
    worker) on fresh labs; the labs are left running (the caller stops them)."""
    manager, worker = all_sites[0], all_sites[1]
    title = TITLES[direction]
    res = Result(title)
    print(f"\n=== {title} ===")
    t = time.monotonic()
    for s in (manager, worker):
        stop(s)
    if direction == "a":
        mk.start(manager)
        start_kueue(worker)
        register(manager, worker, "pykueue-system")
    else:
        mk.start(worker)
        # Kueue's defaults (gcInterval 1m, origin "multikueue", workerLostTimeout 15m),
        # written out so the run says what it used.
        start_kueue(manager, {"gcInterval": "1m", "origin": "multikueue",
                              "workerLostTimeout": "15m"})
        register(manager, worker, kueue_lab.NAMESPACE)
    apply(worker, *queues(4, []))
    apply(manager, *multikueue_objects(["worker1"]))
    apply(manager, *queues(4, ["interop-mk"]))
    res.setup_s = time.monotonic() - t
    t = time.monotonic()
    try:
        wait("worker1's MultiKueueCluster and the check Active on the manager",
             connected(manager), 90)
    except TimeoutError as exc:
        res.failures.append(str(exc))
        return res
    res.connect_s = time.monotonic() - t
    print(f"interop: labs up in {res.setup_s:.0f}s, worker1 Active on the manager after "
          f"{res.connect_s:.1f}s")
    for i in range(jobs):
        name = f"interop-{direction}-{i + 1}"
        seen, last = follow(manager, worker, name, run, timeout)
        res.times.append(seen)
        if last:
            missing = next(d for k, d, _ in STEPS if k not in seen)
            res.failures.append(f"{name}: step '{missing}' not seen in {timeout:.0f}s; {last}")
        print(f"interop: {name}: {len(seen)}/{len(STEPS)} steps")
    if evictions:
        for scenario in (evict_on_manager, preempt_on_manager, evict_on_worker):
            sc = scenario(manager, worker, direction)
            res.evictions.append(sc)
            if sc.failure and not sc.known:
                res.failures.append(sc.failure)
            print(f"interop: {sc.title}: {sum(t is not None for _, t in sc.rows)}/"
                  f"{len(sc.rows)} steps")
    return res


def table(res: Result) -> str:
    n = len(res.times)
    head = f"{'step':66s} " + " ".join(f"{'job' + str(i + 1):>7s}" for i in range(n)) \
        + "  result"
    lines = [f"--- {res.direction} (labs up {res.setup_s:.0f}s, cluster Active "
             f"{res.connect_s:.1f}s) ---", head]
    for key, desc, _ in STEPS:
        cells = [f"{t[key]:6.1f}s" if key in t else "      -" for t in res.times]
        ok = n > 0 and all(key in t for t in res.times)
        lines.append(f"{desc:66s} " + " ".join(cells) + f"  {'PASS' if ok else 'FAIL'}")
    lines.append("latency (seconds, per job; polled every 0.1 s)")
    for label, a, b in LATENCIES:
        vals = [t[b] - t[a] for t in res.times if a in t and b in t]
        cells = [f"{x:6.1f}s" for x in vals] + ["      -"] * (n - len(vals))
        lines.append(f"  {label:64s} " + " ".join(cells))
    if res.evictions:
        lines.append(eviction_table(res.evictions))
    for f in res.failures:
        lines.append(f"FAIL: {f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--direction", choices=("a", "b", "both"), default="both")
    p.add_argument("--jobs", type=int, default=2, help="Jobs per direction, one after another")
    p.add_argument("--run", type=float, default=5.0, help="seconds each Job's pod runs")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per Job")
    p.add_argument("--keep", action="store_true", help="leave the last direction's labs up")
    p.add_argument("--no-evictions", action="store_true",
                   help="skip the eviction scenarios (on the manager, on the worker)")
    a = p.parse_args(argv)
    kueue_lab.bin_dir()  # exits with a hint when `make kueue` was not run
    all_sites = mk.sites()
    results = []
    try:
        for d in ("a", "b") if a.direction == "both" else (a.direction,):
            try:
                results.append(run_direction(d, all_sites, a.jobs, a.run, a.timeout,
                                             not a.no_evictions))
            except (RuntimeError, TimeoutError, subprocess.CalledProcessError) as exc:
                detail = getattr(exc, "stderr", "") or ""
                results.append(Result(TITLES[d],
                                      failures=[f"setup failed: {exc} {detail}".strip()]))
            print(table(results[-1]))
    finally:
        if not a.keep:
            for s in all_sites[:2]:
                stop(s)
    print("\n=== MultiKueue interoperability with Kueue v0.17.1 ===")
    for r in results:
        print(table(r) + "\n")
    ok = all(not r.failures and r.times for r in results)
    print("interop: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
