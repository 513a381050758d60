#!/usr/bin/env python3
"""The seed scenario, played on the lab and narrated as it happens (`make run`).

Two teams share 8 A100s and 8 L4s. Each team's ClusterQueue (manifests/samples/gpu) is
guaranteed 4 GPUs per model and may borrow 4 more in the cohort ``ai-platform``; inference may
reclaim what it lent (``reclaimWithinCohort: Any``).

0. Without pykueue: two unlabelled Jobs (4 + 6 pods x 1 A100 GPU) get partially placed.
1. inference submits serve-4, research train-6: serve-4 runs whole, train-6 waits whole.
2. serve-4 finishes: train-6 starts by itself, borrowing 2 A100s from inference.
3. inference submits serve-4b: it reclaims, train-6 is evicted whole and requeued.
4. research submits eval-4a and eval-4b (any GPU): A100 for the first, L4 for the second.
5. Everything finishes, train-6 runs when A100 quota frees, the queues end empty.
6. Not only Jobs: inference runs a Deployment (each pod queued on its own), research a
   StatefulSet (its 4 pods admitted as one group); both land on their flavor's GPU node.
   When the lab runs the LeaderWorkerSet operator (`make run` starts every built operator),
   inference also serves LeaderWorkerSet llm (a leader and a worker, 1 A100 each): its group
   is one Workload of 2 pods, admitted whole, its pods on a100-0 too. When it runs the
   trainer (Kubeflow Trainer v2.2.0, with JobSet), research also submits TrainJob finetune
   (2 nodes x 1 GPU on TrainingRuntime torch-2node): one Workload (podSet node x2) admitted
   whole, the trainer's JobSet runs its 2 pods on the flavor's node.
7. Training operators (when the lab runs Kubeflow's training-operator: `make run` starts
   it): research submits PyTorchJob ddp (master + 3 workers, 1 A100 each), admitted whole
   with its pods on a100-0, and ddp-wide (master + 4 workers), which waits whole since 9
   A100s exceed research's 8; ddp succeeds (the operator's decision), ddp-wide starts by
   itself.

Every step waits for pykueue's real decisions (read from the API server) and prints them with
the ``pykueue status`` table. ``Scenario(..., check=True)`` raises ``ScenarioError`` when an
outcome differs from the expected one; tests/e2e runs it that way.

    python hack/scenario.py            # expects `hack/lab.py up` and `hack/lab.py pykueue-up`
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))

import lab as labmod  # noqa: E402

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
DURATION = "lab.pykueue.dev/run-duration"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


class ScenarioError(AssertionError):
    """An outcome of the scenario differs from what Kueue's rules lead to."""


def job(name: str, ns: str, pods: int, *, queue: str | None = "team-queue",
        node_selector: dict[str, str] | None = None, tolerate: bool = False,
        duration: str = "15s", max_exec: int | None = None) -> dict[str, Any]:
    """A batch/v1 Job of ``pods`` pods, each requesting 1 ``nvidia.com/gpu``, running for
    ``duration`` (the lab's kwok stage annotation); ``max_exec``: its time limit in seconds
    (label ``kueue.x-k8s.io/max-exec-time-seconds``: the Workload's
    ``maximumExecutionTimeSeconds``, which bounds the ETA of those waiting for it)."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "registry.example/train:latest",
                        "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "100m"},
                                      "limits": {"nvidia.com/gpu": "1"}}}],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerate:
        spec["tolerations"] = [GPU_TOLERATION]
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if queue:
        meta["labels"] = {QUEUE_LABEL: queue}
    if max_exec is not None:
        meta.setdefault("labels", {})["kueue.x-k8s.io/max-exec-time-seconds"] = str(max_exec)
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
        "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 30,
                 "template": {"metadata": {"annotations": {DURATION: duration}}, "spec": spec}},
    }


def pytorchjob(name: str, ns: str, workers: int, *, duration: str) -> dict[str, Any]:
    """A kubeflow.org/v1 PyTorchJob queued in ``team-queue``: Master 1 + Worker ``workers``,
    each pod 1 A100 GPU (the A100 nodeSelector), succeeding after ``duration`` (the lab's kwok
    stage ends any pod with the annotation; the training-operator then marks the job
    Succeeded once its master has)."""
    def replica(n: int) -> dict[str, Any]:
        tpl = job("x", ns, 1, node_selector=A100, duration=duration)["spec"]["template"]
        tpl["spec"]["containers"][0]["name"] = "pytorch"  # the training-operator's rule
        tpl["spec"]["restartPolicy"] = "OnFailure"
        return {"replicas": n, "restartPolicy": "OnFailure", "template": tpl}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_LABEL: "team-queue"}},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}}}


def pod_template(app: str) -> dict[str, Any]:
    """A pod template requesting 1 ``nvidia.com/gpu`` (for a Deployment or StatefulSet)."""
    return {"metadata": {"labels": {"app": app}},
            "spec": {"containers": [{"name": "main", "image": "registry.example/serve:latest",
                                     "resources": {"requests": {"nvidia.com/gpu": "1"},
                                                   "limits": {"nvidia.com/gpu": "1"}}}]}}


def training_runtime(name: str, ns: str) -> dict[str, Any]:
    """A TrainingRuntime (Kubeflow Trainer v2.2.0) of one trainer step ``node`` (a JobSet
    replicatedJob of 1 Job) whose container ``node`` gets the TrainJob's resourcesPerNode;
    its pods last 20 s in the lab (kwok)."""
    pod = {"metadata": {"annotations": {DURATION: "20s"}},
           "spec": {"restartPolicy": "Never",
                    "containers": [{"name": "node", "image": "registry.example/train:latest"}]}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [
                {"name": "node", "template": {
                    "metadata": {"labels": {
                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": pod}}}]}}}}


def trainjob(name: str, ns: str, runtime: str, nodes: int) -> dict[str, Any]:
    """A TrainJob in ``team-queue`` on TrainingRuntime ``runtime``: ``nodes`` nodes of 1 GPU."""
    gpu = {"nvidia.com/gpu": "1"}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_LABEL: "team-queue"}},
            "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org",
                                    "kind": "TrainingRuntime", "name": runtime},
                     "trainer": {"numNodes": nodes,
                                 "resourcesPerNode": {"requests": gpu, "limits": gpu}}}}


class Scenario:
    """The scenario against one lab. ``say`` prints narration; ``check`` makes it assert."""

    def __init__(self, kubectl: Callable[..., subprocess.CompletedProcess[str]], *,
                 status_cmd: list[str] | None = None, say: Callable[[str], None] = print,
                 check: bool = True, timeout: float = 90.0) -> None:
        self.kubectl = kubectl
        self.status_cmd = status_cmd
        self.say = say
        self.check = check
        self.timeout = timeout
        self.outcomes: dict[str, Any] = {}

    # ------------------------------------------------------------------ API helpers
    def get(self, *args: str) -> dict[str, Any]:
        r = self.kubectl("get", *args, "-o", "json", check=False)
        if r.returncode != 0:
            return {}
        return json.loads(r.stdout)

    def apply(self, obj: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def pods(self, ns: str, job_name: str) -> list[dict[str, Any]]:
        return self.get("pods", "-n", ns, "-l", f"batch.kubernetes.io/job-name={job_name}").get(
            "items", [])

    def workload(self, ns: str, job_name: str, kind: str = "Job") -> dict[str, Any] | None:
        """The Workload a ``kind`` object ``ns/job_name`` controls, or None."""
        for wl in self.get("workloads.kueue.x-k8s.io", "-n", ns).get("items", []):
            for ref in wl["metadata"].get("ownerReferences", []):
                if ref.get("kind") == kind and ref.get("name") == job_name:
                    return wl
        return None

    @staticmethod
    def cond(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any] | None:
        if not obj:
            return None
        for c in obj.get("status", {}).get("conditions", []) or []:
            if c.get("type") == ctype:
                return c
        return None

    def is_true(self, obj: dict[str, Any] | None, ctype: str) -> bool:
        c = self.cond(obj, ctype)
        return bool(c and c.get("status") == "True")

    def flavor(self, wl: dict[str, Any] | None) -> str | None:
        adm = (wl or {}).get("status", {}).get("admission")
        if not adm:
            return None
        return adm["podSetAssignments"][0].get("flavors", {}).get("nvidia.com/gpu")

    def wait(self, what: str, fn: Callable[[], Any], timeout: float | None = None) -> Any:
        deadline = time.monotonic() + (timeout or self.timeout)
        last = None
        while time.monotonic() < deadline:
            last = fn()
            if last:
                return last
            time.sleep(0.3)
        raise ScenarioError(f"timed out waiting for {what} (last: {last!r})")

    def wait_admitted(self, ns: str, name: str, kind: str = "Job") -> dict[str, Any]:
        """Wait until the Workload of ``kind`` ``ns/name`` is admitted; returns it. The steps
        submit the next object only then when the story needs this one to go first: the
        core orders Workloads of one creationTimestamp second by uid (Kueue's rule)."""
        return self.wait(f"{ns}/{name} admitted", lambda: (
            w if self.is_true(w := self.workload(ns, name, kind), "Admitted") else None))

    def expect(self, ok: bool, message: str) -> None:
        if not ok and self.check:
            raise ScenarioError(message)
        if not ok:
            self.say(f"   note: {message}")

    def running(self, ns: str, job_name: str) -> list[dict[str, Any]]:
        return [p for p in self.pods(ns, job_name) if p["status"].get("phase") == "Running"]

    def show_status(self, *, eta: bool = False) -> None:
        """Print ``pykueue status``; ``eta``: first wait (up to 15 s) until no ETA reads "not
        computed yet" (a cohort's ETA is recomputed at most every eta_min_interval_seconds,
        5 s: a Workload that came right after a run waits for the next)."""
        if not self.status_cmd:
            return
        env = {**os.environ, "COLUMNS": os.environ.get("COLUMNS", "150")}
        deadline = time.monotonic() + 15
        while True:
            r = subprocess.run(self.status_cmd, text=True, capture_output=True, timeout=30,
                               env=env)
            if not eta or r.returncode != 0 or "not computed yet" not in r.stdout \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        out = r.stdout.rstrip() if r.returncode == 0 else f"   (pykueue status: {r.stderr.strip()})"
        self.say(out)

    def decision(self, ns: str, job_name: str, kind: str = "Job") -> str:
        wl = self.workload(ns, job_name, kind)
        if not wl:
            return f"{ns}/{job_name}: no Workload yet"
        if self.is_true(wl, "Finished"):
            return f"{ns}/{job_name}: finished"
        if self.is_true(wl, "Admitted"):
            return f"{ns}/{job_name}: admitted to {self.flavor(wl)}"
        c = self.cond(wl, "QuotaReserved") or {}
        return f"{ns}/{job_name}: waiting ({c.get('reason', '?')}): {c.get('message', '')}"

    # ------------------------------------------------------------------ steps
    def step0_without_pykueue(self) -> None:
        ns = "no-queue"
        self.say("\n== 0. Without pykueue: the default scheduler places pods one at a time")
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self.wait("default ServiceAccount", lambda: self.get("sa", "default", "-n", ns))
        for name, pods in (("serve-4", 4), ("train-6", 6)):
            self.apply(job(name, ns, pods, queue=None, node_selector=A100, tolerate=True,
                           duration="10m"))
        self.wait("8 A100 pods running", lambda: sum(
            len(self.running(ns, j)) for j in ("serve-4", "train-6")) == 8)
        time.sleep(1.0)
        counts = {j: (len(self.running(ns, j)), len(self.pods(ns, j)))
                  for j in ("serve-4", "train-6")}
        for j, (run, total) in counts.items():
            self.say(f"   {ns}/{j}: {run} of {total} pods Running, {total - run} Pending")
        partial = [j for j, (run, total) in counts.items() if 0 < run < total]
        self.outcomes["step0_partial"] = partial
        self.expect(bool(partial), f"expected a partially placed Job, got {counts}")
        self.say(f"   {', '.join(partial)} holds GPUs it cannot use: a partial gang, the "
                 "hardware idles. Cleaning up.")
        self.kubectl("delete", "namespace", ns, "--wait=false")
        self.wait("the unmanaged pods gone", lambda: not self.get("pods", "-n", ns).get("items"),
                  timeout=120)

    def step1_submit(self) -> None:
        self.say("\n== 1. inference submits serve-4, research submits train-6 (both on A100)")
        self.apply(job("serve-4", "inference", 4, node_selector=A100, duration="12s",
                       max_exec=60))
        # train-6 only once serve-4 holds its quota: pending together, the core's queue order
        # (and which ClusterQueue's head it takes first) would decide, not the story.
        self.wait_admitted("inference", "serve-4")
        self.apply(job("train-6", "research", 6, node_selector=A100, duration="25s"))
        self.wait("serve-4 admitted and its 4 pods running",
                  lambda: self.is_true(self.workload("inference", "serve-4"), "Admitted")
                  and len(self.running("inference", "serve-4")) == 4)
        wl = self.wait("train-6 pending with a reason", lambda: (
            w if (w := self.workload("research", "train-6"))
            and (c := self.cond(w, "QuotaReserved")) and c["status"] == "False" else None))
        self.say("   " + self.decision("inference", "serve-4"))
        self.say("   " + self.decision("research", "train-6"))
        self.expect(self.flavor(self.workload("inference", "serve-4")) == "a100-flavor",
                    "serve-4 should be on a100-flavor")
        self.expect(not self.pods("research", "train-6"), "train-6 must have no pod while it waits")
        self.expect("nvidia.com/gpu" in self.cond(wl, "QuotaReserved")["message"],
                    "the pending reason should name nvidia.com/gpu")
        self.show_status(eta=True)
        self.say("   Starts is train-6's expected start (ETA), \"bounded\": serve-4's time limit "
                 "(60 s, maximumExecutionTimeSeconds)\n   is the latest it can end; it will "
                 "end sooner (it runs 12 s), so train-6 starts before its ETA.")

    def step2_borrow(self) -> None:
        self.say("\n== 2. serve-4 finishes; train-6 starts by itself, borrowing 2 A100s")
        t0 = time.monotonic()
        self.wait("serve-4 finished", lambda: self.is_true(
            self.workload("inference", "serve-4"), "Finished"), timeout=120)
        t_done = time.monotonic()
        self.wait("train-6 admitted with 6 pods running",
                  lambda: self.is_true(self.workload("research", "train-6"), "Admitted")
                  and len(self.running("research", "train-6")) == 6)
        self.outcomes["step2_start_delay"] = time.monotonic() - t_done
        self.say(f"   {self.decision('research', 'train-6')} "
                 f"({time.monotonic() - t_done:.1f}s after serve-4 finished, "
                 f"{time.monotonic() - t0:.1f}s into the step)")
        nodes = {p["spec"].get("nodeName") for p in self.running("research", "train-6")}
        self.expect(nodes == {"a100-0"}, f"train-6 pods should be on a100-0, got {nodes}")
        cq = self.get("clusterqueue", "research-cq")
        borrowed = _flavor_usage(cq, "a100-flavor", "nvidia.com/gpu", "borrowed")
        self.say(f"   research-cq borrows {borrowed} nvidia.com/gpu in a100-flavor")
        self.expect(borrowed == "2", f"research-cq should borrow 2 A100s, status says {borrowed}")
        self.show_status()

    def step3_reclaim(self) -> None:
        self.say("\n== 3. inference submits serve-4b: it reclaims the A100s it lent")
        self.apply(job("serve-4b", "inference", 4, node_selector=A100, duration="20s"))
        wl = self.wait("train-6 evicted", lambda: (
            w if self.is_true(w := self.workload("research", "train-6"), "Evicted") else None))
        ev = self.cond(wl, "Evicted") or {}
        pre = self.cond(wl, "Preempted") or {}
        self.say(f"   research/train-6 evicted whole ({ev.get('reason')}, "
                 f"{pre.get('reason', '')}): {pre.get('message', ev.get('message', ''))}")
        self.wait("serve-4b admitted and running",
                  lambda: self.is_true(self.workload("inference", "serve-4b"), "Admitted")
                  and len(self.running("inference", "serve-4b")) == 4)
        self.wait("train-6 pods gone and the Job suspended",
                  lambda: not self.running("research", "train-6")
                  and self.get("job", "train-6", "-n", "research")["spec"].get("suspend"))
        self.say("   " + self.decision("inference", "serve-4b"))
        self.say("   " + self.decision("research", "train-6") + "  (requeued: it waits again)")
        self.expect(ev.get("reason") == "Preempted", f"Evicted reason {ev.get('reason')}")
        self.show_status(eta=True)

    def step4_fallback(self) -> None:
        self.say("\n== 4. research submits eval-4a and eval-4b (any GPU model)")
        self.apply(job("eval-4a", "research", 4, duration="10s"))
        # eval-4b only once eval-4a is admitted: two Workloads created within one
        # creationTimestamp second are ordered by uid, so "the first gets A100" would be luck.
        self.wait_admitted("research", "eval-4a")
        self.apply(job("eval-4b", "research", 4, duration="10s"))
        for name in ("eval-4a", "eval-4b"):
            self.wait(f"{name} admitted and running",
                      lambda n=name: self.is_true(self.workload("research", n), "Admitted")
                      and len(self.running("research", n)) == 4)
        fa = self.flavor(self.workload("research", "eval-4a"))
        fb = self.flavor(self.workload("research", "eval-4b"))
        nodes_b = {p["spec"].get("nodeName") for p in self.running("research", "eval-4b")}
        self.say(f"   research/eval-4a: admitted to {fa}; research/eval-4b: admitted to {fb}, "
                 f"pods on {', '.join(sorted(n for n in nodes_b if n))}")
        self.say("   (train-6 is ahead of both in research-cq but needs 6 A100s; the queue is "
                 "BestEffortFIFO, so Workloads behind a head that does not fit go first when "
                 "they do: StrictFIFO would hold them)")
        self.expect(fa == "a100-flavor", f"eval-4a should get a100-flavor, got {fa}")
        self.expect(fb == "l4-flavor", f"eval-4b should fall back to l4-flavor, got {fb}")
        self.expect(nodes_b == {"l4-0"}, f"eval-4b pods should be on l4-0, got {nodes_b}")
        self.show_status(eta=True)
        self.say("   (train-6's start may read \"unknown (no end known)\": it needs A100s that "
                 "eval-4a holds, and eval-4a has\n   no time limit and no finished run of "
                 "its shape to learn from yet; docs/status.md, \"ETA\")")

    def step5_drain(self) -> None:
        self.say("\n== 5. Everything finishes; train-6 runs when A100 quota frees")
        self.wait("train-6 admitted again", lambda: self.is_true(
            self.workload("research", "train-6"), "Admitted"), timeout=120)
        self.say("   " + self.decision("research", "train-6"))
        jobs = [("inference", "serve-4b"), ("research", "eval-4a"), ("research", "eval-4b"),
                ("research", "train-6")]
        for ns, name in jobs:
            self.wait(f"{ns}/{name} complete", lambda ns=ns, name=name: any(
                c["type"] == "Complete" and c["status"] == "True"
                for c in self.get("job", name, "-n", ns).get("status", {}).get("conditions", [])),
                timeout=150)
        for cq in ("research-cq", "inference-cq"):
            st = self.wait(f"{cq} empty", lambda cq=cq: (
                s if (s := self.get("clusterqueue", cq).get("status", {}))
                and not s.get("pendingWorkloads") and not s.get("admittedWorkloads")
                and not s.get("reservingWorkloads") else None))
            self.say(f"   {cq}: pending {st.get('pendingWorkloads', 0)}, "
                     f"admitted {st.get('admittedWorkloads', 0)}")
        self.show_status()

    def step6_other_kinds(self, *, with_lws: bool = False, with_trainjob: bool = False) -> None:
        self.say("\n== 6. Not only Jobs: a Deployment (inference) and a StatefulSet (research)"
                 + (", a LeaderWorkerSet (inference)" if with_lws else "")
                 + (", a TrainJob (research)" if with_trainjob else ""))
        if with_lws:
            self.apply({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                        "metadata": {"name": "llm", "namespace": "inference",
                                     "labels": {QUEUE_LABEL: "team-queue"}},
                        "spec": {"replicas": 1, "leaderWorkerTemplate": {
                            "size": 2, "leaderTemplate": pod_template("llm"),
                            "workerTemplate": pod_template("llm")}}})
        self.apply({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "chat", "namespace": "inference",
                                 "labels": {QUEUE_LABEL: "team-queue"}},
                    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "chat"}},
                             "template": pod_template("chat")}})
        self.apply({"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "metadata": {"name": "ring", "namespace": "research",
                                 "labels": {QUEUE_LABEL: "team-queue"}},
                    "spec": {"replicas": 4, "serviceName": "ring",
                             "selector": {"matchLabels": {"app": "ring"}},
                             "template": pod_template("ring")}})

        def placed(ns: str, app: str, n: int) -> list[dict[str, Any]] | None:
            pods = [p for p in self.get("pods", "-n", ns, "-l", f"app={app}").get("items", [])
                    if p["status"].get("phase") == "Running"
                    and not p["metadata"].get("deletionTimestamp")]
            return pods if len(pods) == n else None

        chat = self.wait("the 2 chat pods running", lambda: placed("inference", "chat", 2))
        if with_lws:
            llm = self.wait("the 2 llm pods running", lambda: placed("inference", "llm", 2),
                            timeout=120)
            llm_wl = self.get("workloads.kueue.x-k8s.io", "leaderworkerset-llm-0", "-n",
                              "inference")
            sets = ", ".join(f"{ps['name']} x{ps['count']}" for ps in llm_wl["spec"]["podSets"])
            self.say(f"   inference/llm: group 0 is one Workload ({sets}), admitted to "
                     f"{self.flavor(llm_wl)}; pods on "
                     f"{', '.join(sorted({p['spec']['nodeName'] for p in llm}))}")
            self.expect(sets == "leader x1, worker x1",
                        f"llm's group should be leader x1, worker x1, got {sets}")
            chat = chat + llm
        ring = self.wait("the 4 ring pods running", lambda: placed("research", "ring", 4),
                         timeout=120)
        wls = self.get("workloads.kueue.x-k8s.io", "-n", "inference").get("items", [])
        chat_wls = [w for w in wls if w["metadata"]["name"].startswith("pod-chat-")]
        ring_wl = self.get("workloads.kueue.x-k8s.io", "statefulset-ring", "-n", "research")
        nodes = sorted({p["spec"]["nodeName"] for p in chat + ring})
        self.say(f"   inference/chat: {len(chat_wls)} Workloads, one per pod; research/ring: "
                 f"one Workload for {ring_wl['spec']['podSets'][0]['count']} pods, admitted "
                 f"to {self.flavor(ring_wl)}; pods on {', '.join(nodes)}")
        self.expect(len(chat_wls) == 2, f"chat should have 2 pod Workloads, got {len(chat_wls)}")
        self.expect(ring_wl["spec"]["podSets"][0]["count"] == 4,
                    "ring should be one Workload of 4 pods")
        self.expect(nodes == ["a100-0"], f"chat and ring pods should be on a100-0, got {nodes}")
        if with_trainjob:
            self.step6_trainjob()
        self.show_status()
        self.say("   (chat, ring" + (", llm" if with_lws else "")
                 + (", finetune" if with_trainjob else "")
                 + " are deleted now, so that the queues end empty)")
        self.kubectl("delete", "deployment", "chat", "-n", "inference", "--wait=false")
        self.kubectl("delete", "statefulset", "ring", "-n", "research", "--wait=false")
        if with_lws:
            self.kubectl("delete", "leaderworkerset", "llm", "-n", "inference", "--wait=false")
        if with_trainjob:
            self.kubectl("delete", "trainjob", "finetune", "-n", "research", "--wait=false")
        for cq in ("research-cq", "inference-cq"):
            self.wait(f"{cq} empty again", lambda cq=cq: not (
                (s := self.get("clusterqueue", cq).get("status", {})).get("admittedWorkloads")
                or s.get("reservingWorkloads")), timeout=120)

    def step6_trainjob(self) -> None:
        """research's TrainJob finetune (2 nodes x 1 GPU on TrainingRuntime torch-2node):
        one Workload, podSet ``node`` x2 (the JobSet the trainer builds from the runtime),
        admitted whole beside ring; the trainer's JobSet runs its 2 pods on the flavor's node
        (``a100-0``, or ``l4-0`` when the A100s left to borrow are taken)."""
        self.apply(training_runtime("torch-2node", "research"))
        self.apply(trainjob("finetune", "research", "torch-2node", 2))
        wl = self.wait("finetune admitted", lambda: (
            w if self.is_true(w := self.workload("research", "finetune", "TrainJob"),
                              "Admitted") else None))

        def running() -> list[dict[str, Any]] | None:
            pods = [p for p in self.get("pods", "-n", "research", "-l",
                                        "jobset.sigs.k8s.io/jobset-name=finetune"
                                        ).get("items", [])
                    if p["status"].get("phase") == "Running"
                    and not p["metadata"].get("deletionTimestamp")]
            return pods if len(pods) == 2 else None
        pods = self.wait("the 2 finetune pods running", running, timeout=120)
        sets = ", ".join(f"{ps['name']} x{ps['count']}" for ps in wl["spec"]["podSets"])
        flavor = self.flavor(wl)
        nodes = sorted({p["spec"]["nodeName"] for p in pods})
        self.say(f"   research/finetune (TrainJob): one Workload ({sets}), admitted to "
                 f"{flavor}; the trainer's JobSet runs its pods on {', '.join(nodes)}")
        self.expect(sets == "node x2", f"finetune's Workload should be node x2, got {sets}")
        want = {"a100-flavor": ["a100-0"], "l4-flavor": ["l4-0"]}.get(str(flavor))
        self.expect(nodes == want, f"finetune's pods should be on {want} ({flavor}), got {nodes}")

    def step7_training_operator(self) -> None:
        self.say("\n== 7. Training operators: research submits PyTorchJobs ddp (master + 3 "
                 "workers) and ddp-wide (master + 4 workers), 1 A100 per pod")
        self.apply(pytorchjob("ddp", "research", 3, duration="15s"))
        # ddp-wide only once ddp is admitted (same creationTimestamp second: uid order).
        self.wait_admitted("research", "ddp", "PyTorchJob")
        self.apply(pytorchjob("ddp-wide", "research", 4, duration="10s"))

        def pods(name: str) -> list[dict[str, Any]]:
            return [p for p in self.get("pods", "-n", "research", "-l",
                                        f"training.kubeflow.org/job-name={name}").get("items", [])
                    if not p["metadata"].get("deletionTimestamp")]

        def running(name: str, n: int) -> list[dict[str, Any]] | None:
            r = [p for p in pods(name) if p["status"].get("phase") == "Running"]
            return r if len(r) == n else None

        ddp = self.wait("ddp admitted and its 4 pods running", lambda: self.is_true(
            self.workload("research", "ddp", "PyTorchJob"), "Admitted") and running("ddp", 4))
        wl = self.wait("ddp-wide pending with a reason", lambda: (
            w if (w := self.workload("research", "ddp-wide", "PyTorchJob"))
            and (c := self.cond(w, "QuotaReserved")) and c["status"] == "False" else None))
        roles = sorted(p["metadata"]["labels"].get("training.kubeflow.org/replica-type", "?")
                       for p in ddp)
        nodes = sorted({p["spec"].get("nodeName") for p in ddp})
        adm = self.workload("research", "ddp", "PyTorchJob")["status"]["admission"]
        sets = ", ".join(f"{a['name']} x{a.get('count', '?')} on {a['flavors']['nvidia.com/gpu']}"
                         for a in adm["podSetAssignments"])
        self.say(f"   research/ddp: admitted whole ({sets}); pods {', '.join(roles)} on "
                 f"{', '.join(nodes)}")
        self.say("   " + self.decision("research", "ddp-wide", "PyTorchJob"))
        self.expect(nodes == ["a100-0"], f"ddp's pods should be on a100-0, got {nodes}")
        self.expect(not pods("ddp-wide"), "ddp-wide must have no pod while it waits (gang)")
        self.expect("nvidia.com/gpu" in self.cond(wl, "QuotaReserved")["message"],
                    "ddp-wide's pending reason should name nvidia.com/gpu")
        self.show_status()
        done = self.wait("ddp Succeeded", lambda: (
            j if self.is_true(j := self.get("pytorchjob", "ddp", "-n", "research"), "Succeeded")
            else None), timeout=120)
        t_done = time.monotonic()
        wide = self.wait("ddp-wide admitted and its 5 pods running", lambda: self.is_true(
            self.workload("research", "ddp-wide", "PyTorchJob"), "Admitted")
            and running("ddp-wide", 5))
        self.outcomes["step7_start_delay"] = time.monotonic() - t_done
        msg = (self.cond(done, "Succeeded") or {}).get("message", "")
        self.say(f"   research/ddp: Succeeded, the training-operator's decision from its pods "
                 f"({msg!r}); its Workload "
                 f"{self.decision('research', 'ddp', 'PyTorchJob').split(': ', 1)[1]}")
        self.say(f"   research/ddp-wide: started by itself "
                 f"{time.monotonic() - t_done:.1f}s later, 5 pods on "
                 f"{', '.join(sorted({p['spec'].get('nodeName') for p in wide}))}")
        self.wait("ddp-wide Succeeded", lambda: self.is_true(
            self.get("pytorchjob", "ddp-wide", "-n", "research"), "Succeeded"), timeout=120)
        st = self.wait("research-cq empty", lambda: (
            s if not (s := self.get("clusterqueue", "research-cq").get("status", {})).get(
                "admittedWorkloads") and not s.get("pendingWorkloads")
            and not s.get("reservingWorkloads") else None), timeout=120)
        self.say(f"   ddp-wide Succeeded; research-cq: pending {st.get('pendingWorkloads', 0)}, "
                 f"admitted {st.get('admittedWorkloads', 0)}")
        self.show_status()

    def run(self, *, with_step0: bool = True, with_operators: bool = False,
            with_lws: bool = False, with_trainjob: bool = False) -> dict[str, Any]:
        """Play the steps; ``with_operators``: also step 7 (needs the training-operator
        running in the lab and pykueue started after it); ``with_lws``: a LeaderWorkerSet in
        step 6 (needs the LeaderWorkerSet operator running in the lab); ``with_trainjob``: a
        TrainJob in step 6 (needs the trainer and JobSet running, pykueue started after)."""
        if with_step0:
            self.step0_without_pykueue()
        self.step1_submit()
        self.step2_borrow()
        self.step3_reclaim()
        self.step4_fallback()
        self.step5_drain()
        self.step6_other_kinds(with_lws=with_lws, with_trainjob=with_trainjob)
        if with_operators:
            self.step7_training_operator()
        return self.outcomes


def _flavor_usage(cq: dict[str, Any], flavor: str, resource: str, field: str) -> str | None:
    for fu in cq.get("status", {}).get("flavorsUsage", []) or []:
        if fu.get("name") == flavor:
            for r in fu.get("resources", []):
                if r.get("name") == resource:
                    return str(r.get(field, "0"))
    return None


def viewer_token(lab: labmod.Lab) -> str:
    """A token of a ServiceAccount allowed to read pykueue's status API (cluster-wide get)."""
    labmod.kubectl(lab, "apply", "-f", str(ROOT / "hack" / "lab" / "status-viewer.yaml"))
    return labmod.sa_token(lab, "pykueue-system", "pykueue-status-viewer", 3600)


def prepare(lab: labmod.Lab) -> None:
    """Apply the samples (seed, then the GPU variant of the same queues) and clear old runs."""
    for ns in ("research", "inference"):
        labmod.kubectl(lab, "delete", "jobs.batch", "--all", "-n", ns, "--ignore-not-found",
                       "--wait=true", check=False)
    labmod.kubectl(lab, "delete", "deployment", "chat", "-n", "inference", "--ignore-not-found",
                   "--wait=true", check=False)
    labmod.kubectl(lab, "delete", "statefulset", "ring", "-n", "research", "--ignore-not-found",
                   "--wait=true", check=False)
    labmod.kubectl(lab, "delete", "namespace", "no-queue", "--ignore-not-found", "--wait=true",
                   check=False)
    if labmod.kubectl(lab, "get", "crd", "leaderworkersets.leaderworkerset.x-k8s.io",
                      check=False).returncode == 0:
        labmod.kubectl(lab, "delete", "leaderworkerset", "llm", "-n", "inference",
                       "--ignore-not-found", "--wait=true", check=False)
    if labmod.kubectl(lab, "get", "crd", "trainjobs.trainer.kubeflow.org",
                      check=False).returncode == 0:
        labmod.kubectl(lab, "delete", "trainjob", "finetune", "-n", "research",
                       "--ignore-not-found", "--wait=true", check=False)
    if labmod.kubectl(lab, "get", "crd", "pytorchjobs.kubeflow.org", check=False).returncode == 0:
        labmod.kubectl(lab, "delete", "pytorchjobs.kubeflow.org", "--all", "-n", "research",
                       "--ignore-not-found", "--wait=true", check=False)
    labmod.kubectl(lab, "apply", "-k", str(ROOT / "manifests" / "samples" / "seed"))
    labmod.kubectl(lab, "apply", "-k", str(ROOT / "manifests" / "samples" / "gpu"))
    for ns in ("research", "inference"):
        labmod.kubectl(lab, "wait", "--for=jsonpath={.metadata.name}=default", "--timeout=60s",
                       "sa/default", "-n", ns)


def main() -> int:
    lab = labmod.from_args(None, None, None)
    prepare(lab)
    token = viewer_token(lab)
    status_cmd = [str(Path(sys.executable).parent / "pykueue"), "status",
                  "--server", f"https://127.0.0.1:{labmod.PYKUEUE_PORT}",
                  "--ca-file", str(ROOT / "certs" / "out" / "ca.crt"), "--token", token]

    def kubectl(*args: str, input: str | None = None, check: bool = True):
        return labmod.kubectl(lab, *args, input=input, check=check)

    t0 = time.monotonic()
    # Step 7 needs the training-operator (`make run` starts it before pykueue, so that
    # pykueue manages PyTorchJobs from its start, not from its next discovery poll).
    operators = bool(labmod._pid(lab, "training-operator"))
    Scenario(kubectl, status_cmd=status_cmd, check=os.environ.get("SCENARIO_CHECK") == "1").run(
        with_operators=operators, with_lws=bool(labmod._pid(lab, "lws")),
        with_trainjob=bool(labmod._pid(lab, "trainer") and labmod._pid(lab, "jobset")))
    if not operators:
        print("\n== 7. Skipped: the training-operator is not running in this lab (`make run` "
              "starts it: `make operators` builds it, `hack/lab.py operators-up` starts it)")
    print(f"\n== Done in {time.monotonic() - t0:.0f}s. Explore:")
    print(f"   export KUBECONFIG={lab.kubeconfig}")
    print("   .k8sbin/current/kubectl get cq,lq,wl -A")
    print("   .k8sbin/current/kubectl describe job train-6 -n research")
    # hack/lab.py finds a moved lab by LAB_STATE_DIR / LAB_PORT_BASE, not by KUBECONFIG.
    moved = " ".join(f"{k}={os.environ[k]}" for k in ("LAB_STATE_DIR", "LAB_PORT_BASE")
                     if os.environ.get(k))
    print(f"   export TOKEN=\"$({moved + ' ' if moved else ''}.venv/bin/python hack/lab.py "
          "sa-token pykueue-system pykueue-status-viewer)\"")
    print(f"   .venv/bin/pykueue status --server https://127.0.0.1:{labmod.PYKUEUE_PORT} "
          "--ca-file certs/out/ca.crt --token \"$TOKEN\"")
    print("   curl --cacert certs/out/ca.crt -H \"Authorization: Bearer $TOKEN\" "
          f"https://127.0.0.1:{labmod.PYKUEUE_PORT}/api/v1/clusterqueues")
    print("   curl --cacert certs/out/ca.crt -H \"Authorization: Bearer $TOKEN\" "
          f"https://127.0.0.1:{labmod.PYKUEUE_PORT}/metrics")
    print(f"   https://127.0.0.1:{labmod.PYKUEUE_PORT}/dashboard#token=$TOKEN   (in a browser; "
          "the CA is certs/out/ca.crt), or:")
    print(f"   .venv/bin/pykueue dashboard --server https://127.0.0.1:{labmod.PYKUEUE_PORT} "
          "--ca-file certs/out/ca.crt --token \"$TOKEN\"")
    print(f"   {moved + ' ' if moved else ''}make lab-down   # stops everything and removes "
          "the lab's state")
    return 0


if __name__ == "__main__":
    sys.exit(main())
