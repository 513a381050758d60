"""waitForPodsReady in the lab, on by default (Kueue v0.19's default), with the real operators
(``make operators``) and on fragmented nodes.

pykueue runs here with only the timeout and the backoff shortened (``TIMEOUT`` s, backoff
``BACKOFF`` s): waitForPodsReady itself is left to its default. The GPU nodes are fake nodes of
this module's own (kwok), so a running pod bound to one by name (``blocker``, not queued, as a
node taken by someone else) decides what fits:

- per kind family, Kueue v0.17.1's ``PodsReady`` of each kind: a PyTorchJob (the
  training-operator's ``Running`` condition), an MPIJob (the mpi-operator's), a RayJob
  (``status.rayClusterStatus.state``), a RayCluster (``status.state``), a RayService
  (condition ``Ready``), a TrainJob (its JobSet's) and an AppWrapper of a
  batch Job (the AppWrapper controller's condition ``PodsReady``), admitted while
  their node is taken, are evicted whole with reason ``PodsReadyTimeout`` after the timeout
  and queued again (``requeueState.count``); once the node is free each is admitted again and
  its Workload gets ``PodsReady=True`` (all but the RayJob and the RayService: under kwok
  KubeRay never refreshes a RayJob's copy of its cluster's state, as it asks the Ray dashboard
  first, nor sets a RayService Ready, which needs Ray Serve). Kinds whose
  operator is not running are skipped with the reason;
- two 4-GPU gangs (batch Jobs of 4 one-GPU pods) on two 4-GPU nodes fragmented by a running
  one-GPU pod: 7 GPUs free for 8 pods, so one gang sits half-placed; it is evicted after the
  timeout and queued again, the other runs and finishes, then the first runs.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest

from tests.e2e.test_appwrapper import appwrapper
from tests.e2e.test_breaker12_findings import training_runtime, trainjob
from tests.e2e.test_jobset import QUEUE, condition
from tests.e2e.test_kubeflow import mpijob, pytorchjob
from tests.e2e.test_operator_lifecycle import lasting, raycluster, rayjob_lasting
from tests.e2e.test_ray import rayservice
from tests.integration.test_operators import operators_running
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import operators as ops  # noqa: E402
import scenario  # noqa: E402

pytestmark = pytest.mark.lab
TIMEOUT = 15  # seconds: waitForPodsReady's timeout for the pykueue of this module
BACKOFF = 3  # seconds: the requeue backoff's base (and twice that its maximum)
POOL = "lab.pykueue.dev/pods-ready-pool"
GPU = "nvidia.com/gpu"
V = "kueue.x-k8s.io/v1beta2"


@pytest.fixture(scope="module")
def ready_operators(lab: LabHandle) -> Iterator[tuple[set[str], str]]:
    """The training-operator, mpi-operator (when port 8080 is free), KubeRay and the AppWrapper
    controller, started before pykueue (which discovers their CRDs at start)."""
    with operators_running(lab, ["training-operator", "mpi-operator", "kuberay",
                                 "appwrapper", "jobset", "trainer"]) as started:
        yield started


@pytest.fixture(scope="module")
def short_timeout(ready_operators: tuple[set[str], str], lab: LabHandle
                  ) -> Iterator[tuple[set[str], str]]:
    """pykueue with waitForPodsReady's timeout and backoff shortened, its enablement left to
    the default."""
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    labmod.pykueue_down(handle)
    scenario.prepare(handle)
    labmod.pykueue_up(handle, extra_env={
        "PYKUEUE_WAIT_FOR_PODS_READY__TIMEOUT_SECONDS": str(TIMEOUT),
        "PYKUEUE_WAIT_FOR_PODS_READY__REQUEUING_STRATEGY__BACKOFF_BASE_SECONDS": str(BACKOFF),
        "PYKUEUE_WAIT_FOR_PODS_READY__REQUEUING_STRATEGY__BACKOFF_MAX_SECONDS": str(2 * BACKOFF)})
    try:
        yield ready_operators
    finally:
        labmod.pykueue_down(handle)


def node(name: str, pool: str, gpus: int) -> dict[str, Any]:
    """A fake GPU node (kwok) of ``pool``, tainted as the lab's GPU nodes."""
    alloc = {"cpu": "64", "memory": "256Gi", "pods": "110", GPU: str(gpus)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, "type": "kwok", POOL: pool}},
            "spec": {"taints": [{"key": GPU, "effect": "NoSchedule"}]},
            "status": {"allocatable": alloc, "capacity": alloc}}


@contextmanager
def gpu_pool(lab: LabHandle, gpus: list[int]) -> Iterator[tuple[str, list[str], str]]:
    """Fake GPU nodes of their own (one per entry of ``gpus``, that many GPUs each), a
    ResourceFlavor selecting them, a namespace with LocalQueue ``lq`` to a ClusterQueue of
    ``sum(gpus)`` GPUs on that flavor and 8 CPUs / 16Gi on default-flavor (Ray heads and
    submitters). Yields (namespace, node names, ClusterQueue); all deleted afterwards."""
    tag = uuid.uuid4().hex[:6]
    pool, ns, cq = f"ready-{tag}", f"ready-{tag}", f"ready-cq-{tag}"
    names = [f"ready-{tag}-{i}" for i in range(len(gpus))]
    lab.create_namespace(ns)
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        *(node(n, pool, g) for n, g in zip(names, gpus, strict=True)),
        {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": pool},
         "spec": {"nodeLabels": {POOL: pool}}},
        {"apiVersion": V, "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {}, "resourceGroups": [
             {"coveredResources": ["cpu", "memory"], "flavors": [
                 {"name": "default-flavor", "resources": [
                     {"name": "cpu", "nominalQuota": "8"},
                     {"name": "memory", "nominalQuota": "16Gi"}]}]},
             {"coveredResources": [GPU], "flavors": [
                 {"name": pool, "resources": [{"name": GPU, "nominalQuota": sum(gpus)}]}]}]}},
        {"apiVersion": V, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns},
         "spec": {"clusterQueue": cq}}]}))
    try:
        yield ns, names, cq
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        wait_for(lambda: not lab.get("pods", "-n", ns)["items"], 120, f"the pods of {ns} gone")
        lab.kubectl("delete", "resourceflavor", pool, "--wait=false", check=False)
        lab.kubectl("delete", "node", *names, "--wait=false", check=False)


@contextmanager
def blocker(lab: LabHandle, node_name: str, gpus: int) -> Iterator[Callable[[], None]]:
    """A running pod taking ``gpus`` GPUs of ``node_name``, bound by name (no scheduler, no
    queue: someone else's pod, in kube-system, a namespace pykueue never manages). Yields a
    function that deletes it and waits until it is gone."""
    name = f"blocker-{uuid.uuid4().hex[:6]}"
    lab.apply(json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"nodeName": node_name, "tolerations": [{"key": GPU, "operator": "Exists"}],
                 "containers": [{"name": "c", "image": "busybox", "resources": {
                     "requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}}))

    def gone() -> None:
        lab.kubectl("delete", "pod", name, "-n", "kube-system", "--wait=false", check=False)
        wait_for(lambda: not lab.kubectl("get", "pod", name, "-n", "kube-system",
                                         check=False).stdout.strip(), 60, f"{name} gone")
    wait_for(lambda: lab.get("pod", name, "-n", "kube-system")["status"].get("phase")
             == "Running", 60, f"{name} running on {node_name}")
    try:
        yield gone
    finally:
        gone()


def workloads(lab: LabHandle, ns: str) -> dict[str, dict[str, Any]]:
    """The Workloads of ``ns`` by their owner's ``Kind/name``."""
    out = {}
    for w in lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]:
        for r in w["metadata"].get("ownerReferences") or []:
            if r.get("controller"):
                out[f"{r['kind']}/{r['name']}"] = w
    return out


def timed_out(w: dict[str, Any] | None) -> bool:
    """Evicted for PodsReadyTimeout (the condition as pykueue writes it, with its requeue)."""
    e = condition(w, "Evicted")
    return bool(w and e and e["status"] == "True" and e["reason"] == "PodsReadyTimeout"
                and e["message"] == f"Exceeded the PodsReady timeout "
                                    f"{w['metadata']['namespace']}/{w['metadata']['name']}"
                and (w["status"].get("requeueState") or {}).get("count", 0) >= 1)


def gather(lab: LabHandle, ns: str, keys: set[str], test: Callable[[dict[str, Any]], bool],
           timeout: float, what: str) -> dict[str, dict[str, Any]]:
    """The first look at each Workload of ``keys`` (``workloads``) that passes ``test``; fails
    after ``timeout`` seconds naming those never seen so."""
    seen: dict[str, dict[str, Any]] = {}

    def look() -> bool:
        for k, w in workloads(lab, ns).items():
            if k in keys and k not in seen and test(w):
                seen[k] = w
        return seen.keys() == keys
    try:
        wait_for(look, timeout, what)
    except AssertionError as exc:
        raise AssertionError(f"{sorted(keys - seen.keys())} not {what}") from exc
    return seen


def pods_ready(w: dict[str, Any] | None) -> bool:
    a, p = condition(w, "Admitted"), condition(w, "PodsReady")
    return bool(a and a["status"] == "True" and p and p["status"] == "True"
                and p["reason"] == "Started")


def t(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# Kind -> (operator, a queued object asking 2 GPUs in all). Pods last an hour (the lab's kwok
# ends a pod with lab.pykueue.dev/run-duration after that long), so none finishes here.
KINDS: dict[str, tuple[str, Callable[[str, str], dict[str, Any]]]] = {
    "PyTorchJob": ("training-operator", lambda n, ns: json.loads(pytorchjob(n, ns, 1))),
    "MPIJob": ("mpi-operator", lambda n, ns: lasting(json.loads(mpijob(n, ns, 2)), "1h")),
    "RayJob": ("kuberay", rayjob_lasting),  # its submitter (a Job's pod) lasts an hour too
    "RayCluster": ("kuberay", raycluster),
    # A batch Job of 2 one-GPU pods wrapped; its PodsReady is the AppWrapper controller's
    # condition (Kueue v0.17.1 AppWrapper.PodsReady).
    "AppWrapper": ("appwrapper", lambda n, ns: json.loads(appwrapper(n, ns, 2))),
    # A head and 2 one-GPU workers; PodsReady is condition Ready (Kueue v0.17.1
    # RayService.PodsReady), which KubeRay sets once Ray Serve answers: never under kwok.
    "RayService": ("kuberay", lambda n, ns: json.loads(rayservice(n, ns, 2))),
    # 2 nodes of 1 GPU on its own TrainingRuntime (created with it); PodsReady is its
    # JobSet's (Kueue v0.17.1 TrainJob.PodsReady).
    "TrainJob": ("trainer", lambda n, ns: [json.loads(training_runtime(ns, 2, 1)),
                                           json.loads(trainjob(n, ns))]),
}
# Kinds whose PodsReady kwok's pods never give (see the module doc and KINDS).
NEVER_READY_UNDER_KWOK = {"RayJob", "RayService"}


def test_each_operator_kind_is_timed_out_until_its_pods_are_ready(
        lab: LabHandle, short_timeout: tuple[set[str], str]) -> None:
    running, busy = short_timeout
    kinds = [k for k, (op, _) in KINDS.items() if op in running]
    left_out = {k: (busy if op == "mpi-operator" and busy else
                    f"{op} {ops.OPERATORS[op].version} not built: run `make operators`")
                for k, (op, _) in KINDS.items() if k not in kinds}
    if not kinds:
        pytest.skip(f"no operator running: {left_out}")
    gpus = 2 * len(KINDS)
    with gpu_pool(lab, [gpus]) as (ns, nodes, _), blocker(lab, nodes[0], gpus) as free:
        # Every GPU of the pool's node is taken: each kind is admitted (quota 2 GPUs a kind)
        # but no GPU pod of it can run.
        for k in kinds:
            made = KINDS[k][1](k.lower(), ns)
            for obj in made if isinstance(made, list) else [made]:
                lab.apply(json.dumps(lasting(obj, "1h")))
        keys = {f"{k}/{k.lower()}" for k in kinds}
        # Each is evicted, waits out its backoff and is admitted again, in its own rhythm:
        # what was seen is kept across looks.
        seen = gather(lab, ns, keys, timed_out, TIMEOUT + 90, "evicted for PodsReadyTimeout")
        for k, w in seen.items():
            assert condition(w, "PodsReady")["status"] == "False", (k, w["status"])
        free()
        # A RayJob's PodsReady is its copy of its cluster's state, which KubeRay refreshes only
        # after asking the Ray head's dashboard for the job, and a RayService's is Ready,
        # which needs Ray Serve: kwok's pods serve neither, so under kwok they never read
        # ready (their cluster does: the RayCluster case).
        keys -= {f"{k}/{k.lower()}" for k in NEVER_READY_UNDER_KWOK}
        ready = gather(lab, ns, keys, pods_ready, 120, "admitted again with PodsReady=True")
        for k, w in ready.items():
            assert w["status"]["requeueState"]["count"] >= 1, k
    if left_out:
        pytest.skip(f"checked {kinds}; left out: {left_out}")


def gang(name: str, ns: str, duration: str) -> str:
    """A batch Job queued in ``lq``: 4 pods of 1 GPU that last ``duration`` (Go duration)."""
    return json.dumps({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
        "spec": {"parallelism": 4, "completions": 4, "template": {
            "metadata": {"annotations": {"lab.pykueue.dev/run-duration": duration}},
            "spec": {"restartPolicy": "Never",
                     "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "c", "image": "busybox", "resources": {
                         "requests": {GPU: "1"}, "limits": {GPU: "1"}}}]}}}})


def test_two_gangs_on_fragmented_nodes_one_times_out_the_other_runs_then_the_first(
        lab: LabHandle, short_timeout: tuple[set[str], str]) -> None:
    with gpu_pool(lab, [4, 4]) as (ns, nodes, _), blocker(lab, nodes[0], 1):
        # 7 GPUs free over two nodes for 2 x 4 pods; each gang's pods last longer than the
        # timeout, so the gang that got all 4 is still running when the other times out.
        for name in ("gang-1", "gang-2"):
            lab.apply(gang(name, ns, f"{TIMEOUT + 12}s"))
        ws = wait_for(lambda: (ws := workloads(lab, ns)) and any(
            timed_out(w) for w in ws.values()) and ws, TIMEOUT + 90, "one gang timed out")
        first = next(k for k, w in ws.items() if timed_out(w))
        other = next(k for k in ws if k != first)
        assert pods_ready(ws[other]), ws[other]["status"]  # it got every GPU it needed
        # The other runs to its end, never evicted; then the first runs.
        done = wait_for(lambda: (w := workloads(lab, ns).get(other))
                        and (f := condition(w, "Finished")) and f["status"] == "True" and w,
                        TIMEOUT + 90, f"{other} finished")
        assert condition(done, "Finished")["reason"] == "Succeeded"
        assert condition(done, "Evicted") is None and not done["status"].get("requeueState")
        back = wait_for(lambda: pods_ready(w := workloads(lab, ns).get(first)) and w,
                        4 * TIMEOUT + 60, f"{first} admitted again with PodsReady=True")
        assert back["status"]["requeueState"]["count"] >= 1
        # Its pods were all Ready only once a pod of the other had ended and freed its GPU
        # (whole seconds on both sides).
        ended = [t(c["lastTransitionTime"]) for p in lab.get(
                     "pods", "-n", ns, "-l", f"job-name={other.split('/')[1]}")["items"]
                 for c in p["status"].get("conditions") or []
                 if c["type"] == "Ready" and c.get("reason") == "PodCompleted"]
        assert len(ended) == 4, ended
        assert t(condition(back, "PodsReady")["lastTransitionTime"]) >= min(ended) - 1
