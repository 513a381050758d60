"""Issue 18, KubeRay's RayJob through pykueue with the real operator (KubeRay v1.6.0,
``make operators``): a queued RayJob is created suspended by pykueue's webhook
(``spec.suspend``), admitted whole (one Workload: head, each worker group, the submitter), and
its RayCluster's pods land on the flavors' nodes (GPU workers on a100-0, the head on a CPU
node); one that does not fit waits whole with no RayCluster and no pod. Skipped with the reason
when the operator is not built."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.e2e.test_jobset import (
    QUEUE,
    admitted,
    condition,
    drop,
    landed_on_a100,
    owned_workload,
)
from tests.e2e.test_kubeflow import GPU_TOLERATION
from tests.e2e.test_workload_kinds import gpu_container, live
from tests.integration.test_operators import operators_running
from tests.labfixture import WORKLOAD_GC_PROBE, LabHandle, wait_for, wait_gc_watches

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def kuberay(lab: LabHandle) -> Iterator[set[str]]:
    """KubeRay in the lab, before pykueue starts (a CRD installed later is picked up only at
    pykueue's next discovery poll, up to 2 min later)."""
    with operators_running(lab, ["kuberay"]) as (running, _):
        yield running


@pytest.fixture(scope="module")
def pykueue_with_kuberay(kuberay: set[str], pykueue_in_lab: Any) -> set[str]:
    if "kuberay" not in kuberay:
        pytest.skip("kuberay v1.6.0 not built: run `make operators`")
    return kuberay


def cpu_and_gpu_groups(gpus: int) -> list[dict[str, Any]]:
    """A ClusterQueue's resourceGroups: 4 CPUs / 8Gi on default-flavor, ``gpus`` A100s."""
    return [{"coveredResources": ["cpu", "memory"], "flavors": [
                {"name": "default-flavor", "resources": [
                    {"name": "cpu", "nominalQuota": "4"},
                    {"name": "memory", "nominalQuota": "8Gi"}]}]},
            {"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "a100-flavor", "resources": [
                    {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]


@contextmanager
def ray_queue(lab: LabHandle, prefix: str, gpus: int) -> Iterator[str]:
    """A fresh namespace with LocalQueue ``lq`` to a new ClusterQueue of ``gpus`` A100s and
    CPU/memory on default-flavor (for the head and KubeRay's default submitter: 500m, 200Mi),
    both deleted afterwards."""
    ns, cq = f"{prefix}-{uuid.uuid4().hex[:6]}", f"{prefix}-cq-{uuid.uuid4().hex[:6]}"
    lab.create_namespace(ns)
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {}, "resourceGroups": cpu_and_gpu_groups(gpus)}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}}]}))
    try:
        yield ns
    finally:
        drop(lab, ns, cq)


def rayjob(name: str, ns: str, workers: int) -> str:
    """A RayJob queued in ``lq``: a head asking 1 CPU (no GPU) and a worker group ``gpu`` of
    ``workers`` 1-GPU pods; KubeRay's default submitter."""
    image = "rayproject/ray:2.46.0"
    head = {"spec": {"containers": [{"name": "ray-head", "image": image,
                                     "resources": {"requests": {"cpu": "1"}}}]}}
    worker = {"spec": {"containers": [{**gpu_container(1), "name": "ray-worker", "image": image}],
                       "tolerations": [GPU_TOLERATION]}}
    return json.dumps({
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
        "spec": {"entrypoint": "python -c 'print(1)'", "shutdownAfterJobFinishes": True,
                 "rayClusterSpec": {
                     "headGroupSpec": {"rayStartParams": {}, "template": head},
                     "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers,
                                           "minReplicas": 0, "maxReplicas": workers,
                                           "rayStartParams": {}, "template": worker}]}}})


def ray_gc_probes() -> tuple[dict[str, Any], ...]:
    """``wait_gc_watches`` probes for the kinds an orphaned RayJob leaves (a suspended
    RayJob and RayCluster without a queue label: KubeRay starts no pod for them, pykueue
    queues neither; ``WORKLOAD_GC_PROBE``)."""
    job = json.loads(rayjob("x", "ns", 1))
    cluster = job["spec"]["rayClusterSpec"]
    job["metadata"] = {}
    job["spec"]["suspend"] = True
    return (job,
            {"apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": {**cluster,
                                                                      "suspend": True}},
            WORKLOAD_GC_PROBE)


def placed(lab: LabHandle, ns: str, workers: int) -> dict[str, list[dict]] | None:
    """Running pods by ``ray.io/node-type`` once the head and ``workers`` workers run."""
    by: dict[str, list[dict]] = {}
    for p in lab.get("pods", "-n", ns)["items"]:
        if p["spec"].get("nodeName") and p["status"].get("phase") == "Running":
            by.setdefault(p["metadata"]["labels"].get("ray.io/node-type", ""), []).append(p)
    return by if len(by.get("head", [])) == 1 and len(by.get("worker", [])) == workers else None


def test_a_rayjob_is_admitted_whole_and_its_pods_land_on_the_flavor_nodes(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:
    with ray_queue(lab, "ray", 2) as ns:
        lab.apply(rayjob("tune", ns, 2))
        wl = wait_for(lambda: (w := owned_workload(lab, ns, "RayJob", "tune"))
                      and (c := condition(w, "Admitted")) and c["status"] == "True" and w,
                      60, "tune's Workload admitted")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("head", 1), ("gpu", 2), ("submitter", 1)]
        flavors = {a["name"]: a["flavors"] for a in wl["status"]["admission"]["podSetAssignments"]}
        assert flavors == {"head": {"cpu": "default-flavor"},
                           "gpu": {"nvidia.com/gpu": "a100-flavor"},
                           "submitter": {"cpu": "default-flavor", "memory": "default-flavor"}}
        by = wait_for(lambda: placed(lab, ns, 2), 90, "tune's head and 2 workers running")
        landed_on_a100(by["worker"], ["gpu", "gpu"])
        assert by["head"][0]["spec"]["nodeName"] in ("cpu-0", "cpu-1")
        assert by["head"][0]["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "head"
        # KubeRay's default submitter template was written with its podSet label.
        job = lab.get("rayjob", "tune", "-n", ns)
        assert job["spec"]["submitterPodTemplate"]["metadata"]["labels"] == {
            "kueue.x-k8s.io/podset": "submitter"}
        # The RayCluster KubeRay made carries the RayJob's queue label but no Workload of its
        # own: it is the RayJob's (Kueue's managed-ancestor rule).
        (cluster,) = lab.get("rayclusters", "-n", ns)["items"]
        assert cluster["metadata"]["labels"][QUEUE] == "lq"
        assert [w["metadata"]["name"] for w in
                lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]] == [
            wl["metadata"]["name"]]


def test_a_rayjob_that_does_not_fit_waits_whole_with_no_pod(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:
    with ray_queue(lab, "ray-wait", 2) as ns:
        lab.apply(rayjob("big", ns, 3))  # 3 GPU workers > 2
        qr = wait_for(lambda: (c := condition(owned_workload(lab, ns, "RayJob", "big"),
                                              "QuotaReserved"))
                      and c["status"] == "False" and c, 60, "big's Workload pending")
        assert "nvidia.com/gpu" in qr["message"], qr
        assert lab.get("rayjob", "big", "-n", ns)["spec"]["suspend"] is True
        assert lab.get("rayclusters", "-n", ns)["items"] == []
        assert lab.get("pods", "-n", ns)["items"] == []


def test_a_raycluster_is_admitted_whole_and_its_pods_land_on_the_flavor_nodes(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:
    """A RayCluster queued on its own: head + 2 GPU workers, one Workload (no submitter)."""
    with ray_queue(lab, "raycluster", 2) as ns:
        job = json.loads(rayjob("c", ns, 2))
        lab.apply(json.dumps({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                              "metadata": job["metadata"],
                              "spec": job["spec"]["rayClusterSpec"]}))
        wl = wait_for(lambda: (w := owned_workload(lab, ns, "RayCluster", "c"))
                      and (c := condition(w, "Admitted")) and c["status"] == "True" and w,
                      60, "c's Workload admitted")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("head", 1), ("gpu", 2)]
        by = wait_for(lambda: placed(lab, ns, 2), 90, "c's head and 2 workers running")
        landed_on_a100(by["worker"], ["gpu", "gpu"])
        assert by["head"][0]["spec"]["nodeName"] in ("cpu-0", "cpu-1")


def test_an_evicted_rayjob_is_stopped_whole_and_its_default_submitter_removed(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:
    """Deactivating its Workload evicts it: pykueue suspends it with its spec as submitted
    (the default submitter template it wrote removed), KubeRay deletes its RayCluster and pods,
    the quota is released."""
    with ray_queue(lab, "ray-evict", 2) as ns:
        manifest = rayjob("ev", ns, 1)
        lab.apply(manifest)
        wl = wait_for(lambda: (w := owned_workload(lab, ns, "RayJob", "ev"))
                      and (c := condition(w, "Admitted")) and c["status"] == "True" and w,
                      60, "ev's Workload admitted")
        wait_for(lambda: placed(lab, ns, 1), 90, "ev's head and worker running")
        lab.kubectl("patch", "workloads.kueue.x-k8s.io", wl["metadata"]["name"], "-n", ns,
                    "--type=merge", "-p", '{"spec": {"active": false}}')
        stopped = wait_for(lambda: (j := lab.get("rayjob", "ev", "-n", ns))["spec"].get(
            "suspend") is True and j, 60, "ev suspended")
        # The pod templates as submitted (KubeRay and the CRD add defaults elsewhere).
        sent = json.loads(manifest)["spec"]["rayClusterSpec"]
        got = stopped["spec"]["rayClusterSpec"]
        assert got["headGroupSpec"]["template"] == sent["headGroupSpec"]["template"]
        assert [g["template"] for g in got["workerGroupSpecs"]] == [
            g["template"] for g in sent["workerGroupSpecs"]]
        assert "submitterPodTemplate" not in stopped["spec"]
        wait_for(lambda: not lab.get("pods", "-n", ns)["items"]
                 and not lab.get("rayclusters", "-n", ns)["items"], 90,
                 "ev's RayCluster and pods deleted")
        wait_for(lambda: not ((owned_workload(lab, ns, "RayJob", "ev") or {}).get("status")
                              or {}).get("admission"), 60, "ev's quota released")


VALIDATING = "pykueue-validating-webhook-configuration"


@contextmanager
def webhook_removed(lab: LabHandle, name: str) -> Iterator[None]:
    """pykueue's validating webhook ``name`` unregistered for the block (a webhook bypassed
    or down), then registered again as it was."""
    config = lab.get("validatingwebhookconfiguration", VALIDATING)
    index = next(i for i, w in enumerate(config["webhooks"]) if w["name"] == name)
    entry = config["webhooks"][index]
    lab.kubectl("patch", "validatingwebhookconfiguration", VALIDATING, "--type=json", "-p",
                json.dumps([{"op": "remove", "path": f"/webhooks/{index}"}]))
    try:
        yield
    finally:
        lab.kubectl("patch", "validatingwebhookconfiguration", VALIDATING, "--type=json", "-p",
                    json.dumps([{"op": "add", "path": f"/webhooks/{index}", "value": entry}]))


def test_raycluster_autoscaling_on_update_is_refused_and_an_unreadable_one_is_stopped(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:
    """Before: the UPDATE was accepted, every reconcile then failed ("in-tree autoscaling
    needs elastic Workload slices") and a raise to 4 workers ran 4 GPU pods on an admission
    of 2. After: refused; behind the webhook's back, the RayCluster is stopped."""
    with ray_queue(lab, "rc-auto", 2) as ns:
        job = json.loads(rayjob("c", ns, 2))
        lab.apply(json.dumps({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                              "metadata": job["metadata"], "spec": job["spec"]["rayClusterSpec"]}))
        wait_for(lambda: admitted(lab, ns, "RayCluster", "c"), 60, "c admitted")
        wait_for(lambda: placed(lab, ns, 2), 90, "c's head and 2 workers running")
        r = lab.kubectl("patch", "raycluster", "c", "-n", ns, "--type=merge", "-p",
                        '{"spec": {"enableInTreeAutoscaling": true}}', check=False)
        assert r.returncode != 0 and "spec.enableInTreeAutoscaling" in r.stderr, r.stderr
        with webhook_removed(lab, "vraycluster.pykueue.io"):
            lab.kubectl("patch", "raycluster", "c", "-n", ns, "--type=json", "-p", json.dumps([
                {"op": "add", "path": "/spec/enableInTreeAutoscaling", "value": True},
                {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 4},
                {"op": "replace", "path": "/spec/workerGroupSpecs/0/maxReplicas", "value": 4}]))
            wait_for(lambda: lab.get("raycluster", "c", "-n", ns)["spec"].get("suspend"), 60,
                     "c suspended by pykueue")
        wait_for(lambda: not [p for p in live(lab.get("pods", "-n", ns)["items"])
                              if p["metadata"]["labels"].get("ray.io/node-type") == "worker"],
                 90, "c's workers gone")
        wait_for(lambda: not admitted(lab, ns, "RayCluster", "c"), 60,
                 "c's admission for 2 workers released")


def _gpu_workers(lab: LabHandle, ns: str) -> int:
    """The namespace's worker pods Running (GPU workers)."""
    return sum(1 for p in live(lab.get("pods", "-n", ns)["items"])
               if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
               and p["status"].get("phase") == "Running")


def _workers_admitted(wl: dict | None) -> int:
    """GPU workers the Workload ``wl`` holds quota for (its admitted ``gpu`` podSet)."""
    fin = condition(wl, "Finished")
    admission = ((wl or {}).get("status") or {}).get("admission")
    if not admission or (fin and fin["status"] == "True"):
        return 0
    counts = {p["name"]: p["count"] for p in wl["spec"]["podSets"]}  # type: ignore[index]
    return sum(int(a.get("count", counts.get(a["name"], 0)))
               for a in admission["podSetAssignments"] if a["name"] == "gpu")


def test_a_raised_raycluster_is_readmitted_once_its_workers_are_gone_and_runs_them(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:
    """A tenant raises the workers of its admitted RayCluster from 1 to 3, and to 4 as soon
    as it is admitted again for 3. pykueue stops it
    (``NoMatchingWorkload``) each time and admits it again only once its killed pods are
    gone (Event ``WaitingForPods``); KubeRay then runs the 4 workers. Before: readmitted within a
    second, before its workers were gone; KubeRay v1.6.0 left it in state ``suspended``
    without workers (its scale expectations, then a 300 s requeue): 3 GPUs reserved, 0 GPU
    pods, for minutes."""
    from tests.e2e.test_jobset import tenant

    with ray_queue(lab, "rc-raise", 4) as ns:
        as_tenant = tenant(lab, ns)
        job = json.loads(rayjob("c", ns, 1))
        spec = job["spec"]["rayClusterSpec"]
        spec["workerGroupSpecs"][0]["maxReplicas"] = 4
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=json.dumps({
            "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": job["metadata"],
            "spec": spec}))
        wait_for(lambda: admitted(lab, ns, "RayCluster", "c"), 60, "c admitted")
        wait_for(lambda: placed(lab, ns, 1), 90, "c's head and worker running")

        def raise_to(workers: int) -> None:
            lab.kubectl(*as_tenant, "patch", "raycluster", "c", "-n", ns, "--type=json", "-p",
                        json.dumps([{"op": "replace", "value": workers,
                                     "path": "/spec/workerGroupSpecs/0/replicas"}]))
        samples: list[tuple[int, int]] = []

        def running(workers: int) -> bool:
            samples.append((_workers_admitted(owned_workload(lab, ns, "RayCluster", "c")),
                            _gpu_workers(lab, ns)))
            return samples[-1] == (workers, workers)
        # Raised again as soon as it is admitted for 3, before KubeRay runs them (its state
        # is not ``ready`` then: the status said no pod was left).
        raise_to(3)
        wait_for(lambda: running(3) or samples[-1][0] == 3, 60, "c readmitted for 3 workers")
        raise_to(4)
        try:
            wait_for(lambda: running(4), 90, "c readmitted for 4 workers and running them")
        finally:
            idle = sum(1 for reserved, running in samples if reserved > running)
            print(f"\nraised RayCluster: {len(samples)} samples (~4/s), {idle} with GPUs "
                  f"reserved beyond the Running workers; last {samples[-1:]}")
        events = lab.get("events", "-n", ns, "--field-selector",
                         "reason=WaitingForPods")["items"]
        assert any(e["involvedObject"].get("name") == "c" for e in events), events


def test_the_raycluster_of_an_admitted_rayjob_raised_directly_is_set_back(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:
    """A tenant raises the worker replicas of the RayCluster its admitted RayJob made from 1
    to 4. Before: 4 GPU workers Running on an admission of 1. After: refused by the webhook;
    with the webhook bypassed, the cluster's replicas are set back to the RayJob's admission
    (Event ``ExceedsAncestorAdmission``) and KubeRay deletes the workers beyond it."""
    from tests.e2e.test_jobset import tenant

    with ray_queue(lab, "rj-raise", 4) as ns:
        as_tenant = tenant(lab, ns)
        job = json.loads(rayjob("rj", ns, 1))
        # A submitter that runs an hour: the RayJob stays running (no Ray dashboard here).
        job["spec"]["submitterPodTemplate"] = {
            "metadata": {"annotations": {"lab.pykueue.dev/run-duration": "1h"}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "ray-job-submitter", "image": "rayproject/ray:2.46.0",
                "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}}}]}}
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=json.dumps(job))
        wait_for(lambda: admitted(lab, ns, "RayJob", "rj"), 60, "rj admitted")
        wait_for(lambda: placed(lab, ns, 1), 90, "rj's head and worker running")
        (cluster,) = lab.get("rayclusters", "-n", ns)["items"]
        name = cluster["metadata"]["name"]
        raise_to_4 = ("patch", "raycluster", name, "-n", ns, "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": "/spec/workerGroupSpecs/0/" + f, "value": 4}
             for f in ("maxReplicas", "replicas")]))
        r = lab.kubectl(*as_tenant, *raise_to_4, check=False)
        assert r.returncode != 0 and "belongs to a queued RayJob" in r.stderr, r.stderr
        with webhook_removed(lab, "vraycluster.pykueue.io"):  # bypassed, or down
            lab.kubectl(*as_tenant, *raise_to_4)
        seen = [1]

        def set_back() -> bool:
            seen.append(_gpu_workers(lab, ns))
            rc = lab.get("raycluster", name, "-n", ns)
            return rc["spec"]["workerGroupSpecs"][0]["replicas"] == 1
        try:
            wait_for(set_back, 30, f"{name}'s workers set back to the RayJob's admission (1)")
            wait_for(lambda: seen.append(_gpu_workers(lab, ns)) or seen[-1] == 1 and len(
                [p for p in lab.get("pods", "-n", ns)["items"]
                 if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]) == 1, 60,
                "one worker left")
        finally:
            print(f"\nRayJob's RayCluster raised to 4: at most {max(seen)} GPU workers Running, "
                  "admission of 1")
        events = lab.get("events", "-n", ns, "--field-selector",
                         f"involvedObject.name={name}")["items"]
        assert any(e["reason"] == "ExceedsAncestorAdmission" for e in events), events
        assert admitted(lab, ns, "RayJob", "rj")


def test_an_orphaned_unlabelled_raycluster_of_a_rayjob_cannot_run_beyond_its_admission(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:
    """A tenant removes the queue label from the RayCluster its admitted RayJob made (1 GPU
    worker), deletes the RayJob with ``--cascade=orphan`` and raises the cluster's workers
    to 4. Seen (breaker10): 4 GPU workers Running on a100-0 for 30 s and more, the RayJob's
    Workload Finished within 2 s, ClusterQueue usage 0 on a quota of 4. Expected: the cluster
    stopped (as an orphaned JobSet child Job is: Event ``AncestorGone``), the podset label
    taken out of its templates, and the RayJob's Workload Finished only once the cluster's
    pods are gone."""
    from tests.e2e.test_jobset import tenant

    with ray_queue(lab, "rj-orphan", 4) as ns:
        as_tenant = tenant(lab, ns)
        name = _admitted_rayjob_cluster(lab, ns, as_tenant)
        # The worker outlives its deletion, Running (a long grace period: kwok's
        # ``lab.pykueue.dev/stops-slowly``), until the finalizer goes: the RayJob's orphaned
        # Workload must keep the quota meanwhile (killed, Failed, it would hold none: Kueue
        # KEP-10076 OnTerminal).
        (worker_pod,) = [p["metadata"]["name"] for p in lab.get("pods", "-n", ns)["items"]
                         if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
        hold = json.dumps({"metadata": {"finalizers": ["lab.pykueue.dev/hold"],
                                        "annotations": {"lab.pykueue.dev/stops-slowly": "true"}}})
        lab.kubectl("patch", "pod", worker_pod, "-n", ns, "--type=merge", "-p", hold)
        lab.kubectl(*as_tenant, "label", "raycluster", name, "-n", ns, f"{QUEUE}-")
        wait_gc_watches(lab.kubectl, ns, *ray_gc_probes())
        lab.kubectl(*as_tenant, "delete", "rayjob", "rj", "-n", ns, "--cascade=orphan")
        wait_for(lambda: not lab.get("raycluster", name, "-n", ns)["metadata"].get(
            "ownerReferences"), 30, f"{name} orphaned")
        lab.kubectl(*as_tenant, "patch", "raycluster", name, "-n", ns, "--type=json", "-p",
                    json.dumps([{"op": "replace", "path": "/spec/workerGroupSpecs/0/" + f,
                                 "value": 4} for f in ("maxReplicas", "replicas")]))
        seen = [1]

        def held_or_stopped() -> bool:
            seen.append(_gpu_workers(lab, ns))
            rc = lab.get("raycluster", name, "-n", ns)
            return rc["spec"].get("suspend") is True or \
                rc["spec"]["workerGroupSpecs"][0]["replicas"] <= 1
        try:
            wait_for(held_or_stopped, 30, f"the orphaned {name} stopped or held to 1 worker")
        finally:
            print(f"\norphaned unlabelled RayCluster raised to 4: at most {max(seen)} GPU "
                  "workers Running, admission of 1")

        def finished() -> bool:
            return all(condition(w, "Finished") for w in lab.get("workloads", "-n", ns)["items"])

        def waiting() -> bool:
            return any(e["reason"] == "WaitingForPods" and e["involvedObject"]["kind"] ==
                       "Workload" for e in lab.get("events", "-n", ns)["items"])
        try:
            wait_for(lambda: lab.get("pod", worker_pod, "-n", ns)["metadata"].get(
                "deletionTimestamp"), 30, f"{worker_pod} deleted by the stop")
            wait_for(waiting, 30, "the RayJob's orphaned Workload waiting for the cluster's pods")
            assert not finished(), "the RayJob's Workload released its quota while a worker ran"
        finally:
            lab.kubectl("patch", "pod", worker_pod, "-n", ns, "--type=json", "-p",
                        json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]))
        wait_for(finished, 60, "the RayJob's orphaned Workload Finished once its pods are gone")
        worker = lab.get("raycluster", name, "-n", ns)["spec"]["workerGroupSpecs"][0]
        assert "kueue.x-k8s.io/podset" not in (worker["template"].get("metadata") or {}).get(
            "labels", {}), worker["template"]
        events = lab.get("events", "-n", ns, "--field-selector",
                         f"involvedObject.name={name}")["items"]
        assert any(e["reason"] == "AncestorGone" for e in events), events


def _admitted_rayjob_cluster(lab: LabHandle, ns: str, as_tenant: tuple[str, ...]) -> str:
    """Create, as the tenant, RayJob ``rj`` (head + 1 one-GPU worker, a submitter that runs
    an hour), wait for it to run admitted; returns its RayCluster's name."""
    job = json.loads(rayjob("rj", ns, 1))
    job["spec"]["submitterPodTemplate"] = {
        "metadata": {"annotations": {"lab.pykueue.dev/run-duration": "1h"}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "ray-job-submitter", "image": "rayproject/ray:2.46.0",
            "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}}}]}}
    lab.kubectl(*as_tenant, "apply", "-f", "-", input=json.dumps(job))
    wait_for(lambda: admitted(lab, ns, "RayJob", "rj"), 60, "rj admitted")
    wait_for(lambda: placed(lab, ns, 1), 90, "rj's head and worker running")
    (cluster,) = lab.get("rayclusters", "-n", ns)["items"]
    return str(cluster["metadata"]["name"])


def _gpus_running(lab: LabHandle, ns: str) -> int:
    """nvidia.com/gpu requested by the namespace's Running pods."""
    return sum(int((c.get("resources") or {}).get("requests", {}).get("nvidia.com/gpu", 0))
               for p in live(lab.get("pods", "-n", ns)["items"])
               if p["status"].get("phase") == "Running" for c in p["spec"]["containers"])


def test_a_rayjob_clusters_worker_gpus_raised_directly_do_not_run(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:
    """A tenant sets the GPU request of the worker template of its admitted RayJob's
    RayCluster from 1 to 6 and deletes the worker pod. Seen (breaker10): the patch accepted,
    KubeRay recreates the worker with 6 GPUs: 6 GPUs Running on a100-0 for an admission of 1
    on a 4-GPU quota, for as long as watched. Expected: the write refused while the cluster
    carries the queue label; with the label removed first (the webhook's check skipped), the
    template set back to the RayJob's and the cluster stopped (Event
    ``ExceedsAncestorAdmission``), so no pod of it asks 6 GPUs."""
    from tests.e2e.test_jobset import tenant

    with ray_queue(lab, "rj-gpus", 4) as ns:
        as_tenant = tenant(lab, ns)
        name = _admitted_rayjob_cluster(lab, ns, as_tenant)
        six = {"requests": {"nvidia.com/gpu": "6"}, "limits": {"nvidia.com/gpu": "6"}}
        path = "/spec/workerGroupSpecs/0/template/spec/containers/0/resources"
        patch = json.dumps([{"op": "replace", "value": six, "path": path}])
        r = lab.kubectl(*as_tenant, "patch", "raycluster", name, "-n", ns, "--type=json",
                        "-p", patch, check=False)
        assert r.returncode != 0 and "requests" in r.stderr, r.stderr
        lab.kubectl(*as_tenant, "label", "raycluster", name, "-n", ns, f"{QUEUE}-")
        lab.kubectl(*as_tenant, "patch", "raycluster", name, "-n", ns, "--type=json", "-p",
                    patch)
        lab.kubectl(*as_tenant, "delete", "pod", "-n", ns, "-l",
                    f"ray.io/cluster={name},ray.io/node-type=worker", "--wait=false")
        seen = [1]

        def stopped() -> bool:
            seen.append(_gpus_running(lab, ns))
            rc = lab.get("raycluster", name, "-n", ns)
            gpus = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0][
                "resources"]["requests"]["nvidia.com/gpu"]
            return rc["spec"].get("suspend") is True and str(gpus) == "1"
        try:
            wait_for(stopped, 30, f"{name} set back to 1 GPU per worker and stopped")
            wait_for(lambda: _gpus_running(lab, ns) == 0, 60, f"{name}'s pods gone")
        finally:
            print(f"\nRayJob's RayCluster worker raised to 6 GPUs: at most {max(seen)} GPUs "
                  "Running, admission of 1")
        events = lab.get("events", "-n", ns, "--field-selector",
                         f"involvedObject.name={name}")["items"]
        assert any(e["reason"] == "ExceedsAncestorAdmission" for e in events), events


def test_worker_groups_named_after_a_rayjobs_other_podsets_are_held_to_zero(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:
    """A tenant removes the queue label from its admitted RayJob's RayCluster (accepted) and
    adds two 1-GPU worker groups named ``head`` and ``submitter``. Seen (breaker10): 3 GPU
    workers Running on an admission of 1 (usage 1), for as long as watched. Expected: the
    added groups set back to 0 replicas (Event ``ExceedsAncestorAdmission``)."""
    from tests.e2e.test_jobset import tenant

    with ray_queue(lab, "rj-alias", 4) as ns:
        as_tenant = tenant(lab, ns)
        name = _admitted_rayjob_cluster(lab, ns, as_tenant)
        lab.kubectl(*as_tenant, "label", "raycluster", name, "-n", ns, f"{QUEUE}-")
        group = lab.get("raycluster", name, "-n", ns)["spec"]["workerGroupSpecs"][0]
        lab.kubectl(*as_tenant, "patch", "raycluster", name, "-n", ns, "--type=json", "-p",
                    json.dumps([{"op": "add", "path": "/spec/workerGroupSpecs/-",
                                 "value": {**group, "groupName": g}}
                                for g in ("head", "submitter")]))
        seen = [1]

        def held() -> bool:
            seen.append(_gpu_workers(lab, ns))
            groups = lab.get("raycluster", name, "-n", ns)["spec"]["workerGroupSpecs"]
            return all(g.get("replicas", 0) == 0 for g in groups[1:])
        try:
            wait_for(held, 30, f"{name}'s added worker groups held to 0")
        finally:
            print(f"\nworker groups named head/submitter: at most {max(seen)} GPU workers "
                  "Running, admission of 1")


def rayservice(name: str, ns: str, workers: int) -> str:
    """A RayService queued in ``lq`` whose rayClusterConfig is ``rayjob``'s cluster (a
    1-CPU head, ``workers`` 1-GPU workers in group ``gpu``)."""
    job = json.loads(rayjob(name, ns, workers))
    return json.dumps({"apiVersion": "ray.io/v1", "kind": "RayService",
                       "metadata": job["metadata"],
                       "spec": {"rayClusterConfig": job["spec"]["rayClusterSpec"]}})


def _service_pods(lab: LabHandle, ns: str, name: str) -> list[dict]:
    """The live pods of the RayClusters RayService ``name`` made (KubeRay's
    ``ray.io/originated-from-cr-name`` label on the cluster)."""
    clusters = {c["metadata"]["name"] for c in lab.get("rayclusters", "-n", ns)["items"]
                if c["metadata"]["labels"].get("ray.io/originated-from-cr-name") == name}
    return [p for p in live(lab.get("pods", "-n", ns)["items"])
            if p["metadata"]["labels"].get("ray.io/cluster") in clusters]


def test_a_rayservice_is_admitted_whole_and_one_that_does_not_fit_waits_until_it_is_deleted(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:
    """Two RayServices (head + 2 one-GPU workers) on a queue of 2 GPUs: the first is
    admitted whole and its pods run on a100-0 with the flavor's nodeSelector (KubeRay copies
    ``rayClusterConfig`` onto its RayCluster), the second waits whole, suspended and without a
    pod, with the numbers in its reason; deleting the first frees the quota and the second
    runs. Before: neither queued (no RayService kind), 4 GPU workers created."""
    with ray_queue(lab, "rsvc", 2) as ns:
        lab.apply(rayservice("serve", ns, 2))
        wl = wait_for(lambda: admitted(lab, ns, "RayService", "serve"), 60, "serve admitted")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("head", 1), ("gpu", 2)]
        by = wait_for(lambda: placed(lab, ns, 2), 90, "serve's head and 2 workers running")
        landed_on_a100(by["worker"], ["gpu", "gpu"])
        assert by["head"][0]["spec"]["nodeName"] in ("cpu-0", "cpu-1")
        # Its RayClusters are the RayService's: no Workload of their own.
        assert [w["metadata"]["name"] for w in
                lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]] == [
            wl["metadata"]["name"]]
        lab.apply(rayservice("wait", ns, 2))
        qr = wait_for(lambda: (c := condition(owned_workload(lab, ns, "RayService", "wait"),
                                              "QuotaReserved"))
                      and c["status"] == "False" and c, 60, "wait's Workload pending")
        assert "nvidia.com/gpu" in qr["message"] and "2" in qr["message"], qr
        assert lab.get("rayservice", "wait", "-n", ns)["spec"]["rayClusterConfig"][
            "suspend"] is True
        assert _service_pods(lab, ns, "wait") == []
        lab.kubectl("delete", "rayservice", "serve", "-n", ns)
        wait_for(lambda: admitted(lab, ns, "RayService", "wait"), 90,
                 "wait admitted once serve is deleted")
        pods = wait_for(lambda: len(p := [x for x in _service_pods(lab, ns, "wait")
                                          if x["status"].get("phase") == "Running"]) == 3
                        and p, 90, "wait's head and 2 workers running")
        landed_on_a100([p for p in pods if p["metadata"]["labels"]["ray.io/node-type"]
                        == "worker"], ["gpu", "gpu"])


def test_raising_the_workers_of_an_admitted_rayservice_runs_no_more_pods_than_admitted(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:
    """An admitted RayService (2 GPU workers, queue of 2): its RayCluster's workers raised to
    3 by a tenant is refused (with the webhook bypassed, set back to the admission); the
    RayService's own workers raised to 3 queue it again (it does not fit: it waits, stopped,
    with its numbers) and its pods go. At no point more than 2 GPU workers run."""
    from tests.e2e.test_jobset import tenant

    with ray_queue(lab, "rsvc-raise", 2) as ns:
        as_tenant = tenant(lab, ns)
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=rayservice("serve", ns, 2))
        wait_for(lambda: admitted(lab, ns, "RayService", "serve"), 60, "serve admitted")
        wait_for(lambda: placed(lab, ns, 2), 90, "serve's head and 2 workers running")
        (cluster,) = [c for c in lab.get("rayclusters", "-n", ns)["items"]
                      if not c["spec"].get("suspend")]
        name = cluster["metadata"]["name"]
        raise_to_3 = ("patch", "raycluster", name, "-n", ns, "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": "/spec/workerGroupSpecs/0/" + f, "value": 3}
             for f in ("maxReplicas", "replicas")]))
        r = lab.kubectl(*as_tenant, *raise_to_3, check=False)
        assert r.returncode != 0 and "belongs to a queued RayService" in r.stderr, r.stderr
        with webhook_removed(lab, "vraycluster.pykueue.io"):  # bypassed, or down
            lab.kubectl(*as_tenant, *raise_to_3)
        wait_for(lambda: lab.get("raycluster", name, "-n", ns)["spec"]["workerGroupSpecs"][0][
            "replicas"] == 2, 30, f"{name}'s workers set back to the RayService's admission (2)")
        wait_for(lambda: _gpu_workers(lab, ns) == 2 and len(
            [p for p in lab.get("pods", "-n", ns)["items"]
             if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]) == 2, 60,
            "two workers left")
        seen = [2]
        try:
            lab.kubectl(*as_tenant, "patch", "rayservice", "serve", "-n", ns, "--type=json",
                        "-p", json.dumps([{"op": "replace", "value": 3, "path":
                                           "/spec/rayClusterConfig/workerGroupSpecs/0/" + f}
                                          for f in ("maxReplicas", "replicas")]))
            qr = wait_for(lambda: seen.append(_gpu_workers(lab, ns)) or (
                (w := owned_workload(lab, ns, "RayService", "serve"))
                and [p["count"] for p in w["spec"]["podSets"]] == [1, 3]
                and (c := condition(w, "QuotaReserved")) and c["status"] == "False" and c),
                60, "serve queued again for 3 workers, waiting")
            assert "nvidia.com/gpu" in qr["message"], qr
            wait_for(lambda: seen.append(_gpu_workers(lab, ns)) or not _service_pods(
                lab, ns, "serve"), 90, "serve's pods gone")
        finally:
            print(f"\nraised RayService: at most {max(seen)} GPU workers Running, admission "
                  "of 2")
        assert max(seen) <= 2, seen
        assert lab.get("rayservice", "serve", "-n", ns)["spec"]["rayClusterConfig"][
            "suspend"] is True
