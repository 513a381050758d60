#!/usr/bin/env python3
"""The MultiKueue scenario, played on three labs and narrated as it happens
(`make run-multikueue`; docs/multikueue.md).

A manager cluster keeps one queue of GPU Jobs; worker1 has 8 A100s (flavor ``a100``, node
a100-0), worker2 8 L4s (flavor ``l4``, node l4-0); pykueue runs on all three
(hack/multikueue_lab.py: LAB_STATE_DIR / LAB_PORT_BASE name the manager, the workers are at
port base + 100 and + 200 in ``<state>/../.lab-w1`` and ``.lab-w2``).

1. Queues: the manager's ClusterQueue (16 GPUs, no nodes of its own to run them) has a
   MultiKueue AdmissionCheck whose MultiKueueConfig lists both workers; each worker has a
   ClusterQueue of its own GPU model.
2. A burst of four 4-GPU Jobs on the manager: copies of each Workload go to both workers
   (AllAtOnce); the first worker to reserve quota wins, so each worker takes two (8 GPUs
   each); each Job is created on its winner only and its pods run there.
3. The manager's Jobs follow: the workers' Job status (4 active pods) is mirrored.
4. worker1 is stopped (its kube-apiserver killed): the manager sees it ClientConnectionFailed,
   keeps its Workloads admitted for workerLostTimeout (**10 s in this scenario**: the manager's
   pykueue runs with ``PYKUEUE_MULTIKUEUE__WORKER_LOST_TIMEOUT_SECONDS=10``; Kueue's default is
   15 min), then their check goes Retry ("Reserving remote lost"), they are evicted, requeued
   and dispatched to worker2, where they wait for L4 quota and run once worker2's first two
   Jobs finish.
5. Everything finishes: the manager's Workloads are Finished, their Jobs Complete, the copies
   deleted on worker2.
6. JobSet (when pykueue has the MultiKueue JobSet adapter, ``app.core.multikueue.ADAPTERS``;
   skipped with one line otherwise): the JobSet operator is started on the three labs and a
   2-replica JobSet on the manager runs on worker2.

Each step waits for the real state (deadlines; ``ScenarioError`` when one passes) and the
timeline (seconds per step) is printed at the end. The labs are left up
(``make multikueue-lab-down`` stops them); ``--down`` stops them at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))
sys.path.insert(0, str(ROOT))

import multikueue_lab as mk  # noqa: E402
from multikueue_interop import apply, cond, is_true  # noqa: E402

MK = "kueue.x-k8s.io/multikueue"
K = "kueue.x-k8s.io/v1beta2"
NS = "mk-demo"
GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
MODELS = {"worker1": ("a100", "NVIDIA-A100-SXM4-80GB"), "worker2": ("l4", "NVIDIA-L4")}
WORKER_LOST_TIMEOUT = 10
Obj = dict[str, Any]


class ScenarioError(AssertionError):
    """A state the scenario waits for did not come before its deadline."""


def get(site: mk.Site, *args: str) -> Obj | None:
    r = site.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def items(site: mk.Site, *args: str) -> list[Obj]:
    return (get(site, *args) or {}).get("items") or []


def wait(what: str, fn: Callable[[], Any], timeout: float) -> Any:
    return mk.wait_until(what, fn, timeout, 0.5, ScenarioError)


def gpu_job(name: str, gpus: int, run: str) -> Obj:
    """A batch/v1 Job of one pod asking ``gpus`` GPUs (any model: the worker's flavor picks
    the node), running ``run`` on the lab's kwok node."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"kueue.x-k8s.io/queue-name": "gpu"}},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 3, "template": {
                "metadata": {"annotations": {"lab.pykueue.dev/run-duration": run}},
                "spec": {"restartPolicy": "Never",
                         "tolerations": [{"key": GPU, "operator": "Exists",
                                          "effect": "NoSchedule"}],
                         "containers": [{"name": "train", "image": "registry.example/train",
                                         "resources": {"requests": {GPU: str(gpus),
                                                                    "cpu": "1"},
                                                       "limits": {GPU: str(gpus)}}}]}}}}


def queues(flavor: str, product: str | None, gpus: int, checks: list[str]) -> list[Obj]:
    rf: Obj = {"apiVersion": K, "kind": "ResourceFlavor", "metadata": {"name": flavor}}
    if product:
        rf["spec"] = {"nodeLabels": {PRODUCT: product}}
    spec: Obj = {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu", GPU], "flavors": [{"name": flavor, "resources": [
            {"name": "cpu", "nominalQuota": 64}, {"name": GPU, "nominalQuota": gpus}]}]}]}
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, rf,
            {"apiVersion": K, "kind": "ClusterQueue", "metadata": {"name": "gpu"}, "spec": spec},
            {"apiVersion": K, "kind": "LocalQueue", "metadata": {"name": "gpu", "namespace": NS},
             "spec": {"clusterQueue": "gpu"}}]


def jobset_adapter() -> bool:
    """pykueue's MultiKueue has an adapter for JobSet (``app.core.multikueue.ADAPTERS``)."""
    try:
        from app.core import multikueue as core
    except ImportError:
        return False
    return any(getattr(a, "kind", None) == "JobSet" for a in getattr(core, "ADAPTERS", ()))


class Scenario:
    """The scenario on ``sites`` (manager, worker1, worker2); ``say`` prints narration."""

    def __init__(self, sites: list[mk.Site], say: Callable[[str], None] = print) -> None:
        self.manager, self.w1, self.w2 = sites
        self.workers = {"worker1": self.w1, "worker2": self.w2}
        self.say = say
        self.t0 = time.monotonic()
        self.timeline: list[tuple[str, float]] = []
        self._step_t = self.t0

    def at(self) -> str:
        return f"[{time.monotonic() - self.t0:5.1f}s]"

    def step(self, title: str) -> None:
        self.say(f"\n== {title}")

    def done(self, label: str) -> None:
        now = time.monotonic()
        self.timeline.append((label, now - self._step_t))
        self._step_t = now

    # ---------------------------------------------------------------- reading
    def workload(self, site: mk.Site, job: str, kind: str = "Job") -> Obj | None:
        return next((w for w in items(site, "workloads", "-n", NS)
                     if any(r.get("kind") == kind and r.get("name") == job
                            for r in w["metadata"].get("ownerReferences") or [])), None)

    def placement(self, job: str) -> str | None:
        """The worker the manager's Workload of ``job`` went to, once its check is Ready."""
        wl = self.workload(self.manager, job)
        st = (wl or {}).get("status") or {}
        ready = any(c.get("state") == "Ready" for c in st.get("admissionChecks") or [])
        return st.get("clusterName") if ready and is_true(wl, "Admitted") else None

    def running_on(self, site: mk.Site, job: str) -> int:
        return sum(1 for p in items(site, "pods", "-n", NS, "-l",
                                    f"batch.kubernetes.io/job-name={job}")
                   if p["status"].get("phase") == "Running")

    def flavor_on(self, site: mk.Site, job: str) -> str:
        wl = self.workload(site, job) or {}
        psa = ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or [{}]
        return (psa[0].get("flavors") or {}).get(GPU, "?")

    # ---------------------------------------------------------------- steps
    def setup(self) -> None:
        self.step("1. Queues: the manager's ClusterQueue dispatches through MultiKueue; "
                  "worker1 has A100s, worker2 L4s")
        for name, site in self.workers.items():
            flavor, product = MODELS[name]
            apply(site, *queues(flavor, product, 8, []))
            self.say(f"   {name}: ClusterQueue gpu, flavor {flavor} ({PRODUCT}={product}), "
                     f"8 GPUs")
        apply(self.manager,
              {"apiVersion": K, "kind": "MultiKueueConfig", "metadata": {"name": "gpu"},
               "spec": {"clusters": ["worker1", "worker2"]}},
              {"apiVersion": K, "kind": "AdmissionCheck", "metadata": {"name": "multikueue"},
               "spec": {"controllerName": MK, "parameters": {
                   "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "gpu"}}},
              *queues("gpu", None, 16, ["multikueue"]))
        self.say("   manager: ClusterQueue gpu (16 GPUs) with AdmissionCheck multikueue -> "
                 "MultiKueueConfig gpu [worker1, worker2]")

        def active() -> bool:
            return all(is_true(get(self.manager, "multikueuecluster", n), "Active")
                       for n in self.workers) and is_true(
                get(self.manager, "admissioncheck", "multikueue"), "Active")
        wait("both MultiKueueClusters and the check Active", active, 60)
        self.say(f"   {self.at()} worker1 and worker2 Connected; check multikueue Active")
        self.done("1. queues, clusters connected")

    def burst(self, jobs: list[str]) -> dict[str, str]:
        self.step(f"2. A burst of {len(jobs)} Jobs (4 GPUs each, any model) on the manager")
        for j in jobs:
            apply(self.manager, gpu_job(j, 4, "30s"))
        self.say(f"   {self.at()} submitted {', '.join(jobs)}; each Workload is copied to "
                 "both workers, the first to reserve quota wins")
        placed = wait("every Job placed on a worker", lambda: (
            p if all((p := {j: self.placement(j) for j in jobs}).values()) else None), 90)
        for j in jobs:
            w = placed[j]
            other = "worker2" if w == "worker1" else "worker1"
            wait(f"{j}'s pod running on {w}", lambda j=j, w=w:
                 self.running_on(self.workers[w], j) == 1, 60)
            if get(self.workers[other], "job", "-n", NS, j) is not None:
                raise ScenarioError(f"{j} exists on {other} too")
            self.say(f"   {self.at()} {j} -> {w}, flavor {self.flavor_on(self.workers[w], j)}, "
                     f"pod Running there (none on {other}, none on the manager)")
        per = {w: sorted(j for j in jobs if placed[j] == w) for w in self.workers}
        if any(len(v) != 2 for v in per.values()):
            raise ScenarioError(f"expected two Jobs per worker (8 GPUs each), got {per}")
        if items(self.manager, "pods", "-n", NS):
            raise ScenarioError("a pod runs on the manager")
        self.done("2. burst placed, pods running on the workers")
        return placed

    def mirrored(self, jobs: list[str]) -> None:
        self.step("3. The manager's Jobs follow their worker's Job (status mirrored)")
        wait("status.active=1 on every manager Job", lambda: all(
            ((get(self.manager, "job", "-n", NS, j) or {}).get("status") or {}).get("active")
            == 1 for j in jobs), 30)
        for j in jobs:
            st = (get(self.manager, "job", "-n", NS, j) or {}).get("status") or {}
            self.say(f"   {j}: manager Job active={st.get('active')} startTime="
                     f"{st.get('startTime')}")
        self.done("3. status mirrored to the manager")

    def stop_worker1(self, placed: dict[str, str]) -> list[str]:
        lost = sorted(j for j, w in placed.items() if w == "worker1")
        self.step(f"4. worker1 stops (its kube-apiserver killed); workerLostTimeout is "
                  f"{WORKER_LOST_TIMEOUT}s in this scenario (Kueue's default: 15 min)")
        pid = int((self.w1.state / "pids" / "kube-apiserver.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        t_stop = time.monotonic()
        self.say(f"   {self.at()} worker1's API server killed; {', '.join(lost)} ran there")
        c = wait("worker1 inactive on the manager", lambda: (
            c if (c := cond(get(self.manager, "multikueuecluster", "worker1"), "Active"))
            and c["status"] == "False" else None), 60)
        self.say(f"   {self.at()} manager: worker1 Active=False ({c['reason']})")
        self.done("4a. worker1 stopped and seen inactive")

        def moved(j: str) -> bool:
            # The eviction resets status.clusterName (Kueue resets it with the reservation).
            wl = self.workload(self.manager, j) or {}
            return bool(wl) and (wl.get("status") or {}).get("clusterName") != "worker1"
        wait("worker1's Workloads evicted (clusterName reset)",
             lambda: all(moved(j) for j in lost), WORKER_LOST_TIMEOUT + 60)
        lost_after = time.monotonic() - t_stop
        for j in lost:
            wl = self.workload(self.manager, j) or {}
            ev = cond(wl, "Evicted") or {}
            rq = cond(wl, "Requeued") or {}
            self.say(f"   {self.at()} {j}: evicted ({ev.get('reason', '?')}: "
                     f"{ev.get('message', '')!r}), Requeued={rq.get('status')}, "
                     f"clusterName reset, waiting for a worker again")
        self.say(f"   {lost_after:.1f}s after worker1 stopped: workerLostTimeout "
                 f"({WORKER_LOST_TIMEOUT}s) counts from the check's Ready transition, as "
                 "Kueue's does (its lastTransitionTime), not from the loss")
        self.done("4b. worker1's Workloads evicted after workerLostTimeout")
        wait("worker1's Jobs placed on worker2", lambda: all(
            self.placement(j) == "worker2" for j in lost), 120)
        for j in lost:
            wait(f"{j}'s pod running on worker2",
                 lambda j=j: self.running_on(self.w2, j) == 1, 90)
            self.say(f"   {self.at()} {j} -> worker2, flavor {self.flavor_on(self.w2, j)}, pod "
                     "Running (it waited for L4 quota there)")
        self.done("4c. requeued onto worker2 and running")
        return lost

    def finish(self, jobs: list[str], lost: list[str]) -> None:
        self.step("5. Everything finishes; the manager follows, the copies go")
        wait("every manager Workload Finished", lambda: all(
            is_true(self.workload(self.manager, j), "Finished") for j in jobs), 120)
        wait("every manager Job Complete", lambda: all(
            is_true(get(self.manager, "job", "-n", NS, j), "Complete") for j in jobs), 60)
        wait("the copies deleted on worker2", lambda: not any(
            get(self.w2, "job", "-n", NS, j) for j in jobs), 60)
        self.say(f"   {self.at()} {len(jobs)} Workloads Finished, Jobs Complete on the manager; "
                 f"worker2's copies deleted ({', '.join(lost)} finished there after the move)")
        self.done("5. finished, mirrored, copies deleted")

    def jobset(self) -> None:
        self.step("6. A JobSet through MultiKueue")
        if not jobset_adapter():
            self.say("   Skipped: this pykueue has no MultiKueue JobSet adapter "
                     "(app.core.multikueue.ADAPTERS without JobSet)")
            return
        for site in (self.manager, self.w2):
            r = site.lab("operators-up", "jobset", check=False)
            if r.returncode != 0:
                self.say(f"   Skipped: the JobSet operator did not start on {site.name}: "
                         f"{(r.stderr or r.stdout).strip()[-200:]}")
                return
        tpl = gpu_job("x", 1, "10s")["spec"]["template"]
        js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "js", "namespace": NS,
                           "labels": {"kueue.x-k8s.io/queue-name": "gpu"}},
              "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {
                  "spec": {"parallelism": 1, "completions": 1, "template": tpl}}}]}}
        # pykueue picks up a newly served kind at its next discovery: retry the create.
        wait("the JobSet accepted on the manager", lambda: self.manager.kubectl(
            "apply", "-f", "-", input=json.dumps(js), check=False).returncode == 0, 60)
        w = wait("the JobSet placed", lambda: (
            (st := (self.workload(self.manager, "js", "JobSet") or {}).get("status") or {})
            .get("clusterName")), 120)
        self.say(f"   {self.at()} JobSet js -> {w}")
        wait("the JobSet's pods running on the worker", lambda: sum(
            1 for p in items(self.workers[w], "pods", "-n", NS, "-l",
                             "jobset.sigs.k8s.io/jobset-name=js")
            if p["status"].get("phase") == "Running") == 2, 90)
        self.say(f"   {self.at()} its 2 pods Running on {w}")
        wait("the JobSet Completed on the manager", lambda: is_true(
            get(self.manager, "jobset", "-n", NS, "js"), "Completed"), 120)
        self.say(f"   {self.at()} JobSet js Completed on the manager (status mirrored)")
        self.done("6. JobSet placed, run, mirrored")

    def run(self) -> None:
        jobs = [f"train-{i}" for i in range(1, 5)]
        self.setup()
        placed = self.burst(jobs)
        self.mirrored(jobs)
        lost = self.stop_worker1(placed)
        self.finish(jobs, lost)
        self.jobset()


def prepare(sites: list[mk.Site]) -> None:
    """The three labs up with pykueue (restarted: this checkout's code, the manager's with
    the short workerLostTimeout); the workers registered; the demo namespace fresh on every lab."""
    os.environ["PYKUEUE_MULTIKUEUE__WORKER_LOST_TIMEOUT_SECONDS"] = str(WORKER_LOST_TIMEOUT)
    for s in sites:
        if s.name != "manager" and s.lab("status", check=False).returncode != 0:
            s.lab("down", check=False)  # a worker stopped by an earlier run: start afresh
        s.lab("up")
        s.lab("pykueue-down", check=False)  # this checkout's pykueue, the manager's settings
        s.lab("pykueue-up")
        s.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=true",
                  "--timeout=120s", check=False)
        print(f"run-multikueue: {s.name} up ({s.state}, pykueue :{s.pykueue_port})")
    mk.register_workers(sites[0], sites[1:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--down", action="store_true", help="stop the three labs at the end")
    a = p.parse_args(argv)
    sites = mk.sites()
    t = time.monotonic()
    prepare(sites)
    print(f"run-multikueue: labs ready in {time.monotonic() - t:.0f}s; manager's pykueue with "
          f"multikueue.worker_lost_timeout_seconds={WORKER_LOST_TIMEOUT}")
    sc = Scenario(sites)
    ok = True
    try:
        sc.run()
    except ScenarioError as exc:
        ok = False
        print(f"\nrun-multikueue: FAILED: {exc}")
    finally:
        print("\n== Timeline (seconds per step)")
        for label, secs in sc.timeline:
            print(f"   {secs:6.1f}s  {label}")
        print(f"   {time.monotonic() - sc.t0:6.1f}s  total")
        if a.down:
            mk.down(sites)
        else:
            print(f"\nExplore: KUBECONFIG={sites[0].state / 'kubeconfig'} .k8sbin/current/kubectl "
                  f"get wl,jobs -n {NS} (workers: {sites[1].state}, {sites[2].state}); "
                  "`make multikueue-lab-down` stops the three labs")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
