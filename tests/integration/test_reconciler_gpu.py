"""GPU samples on the real control plane: flavors are tried in order (A100, then L4), the
flavor's nodeLabels and tolerations are injected so the real kube-scheduler puts every pod of
a Job on its flavor's node, and a Job never has some but not all of its pods (gang).
KQ-21 on the API server: no duplicate tolerations, no template change on re-injection after a
restart, exact restore on eviction."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.reconciler_support import (
    ManagerThread,
    UsageSampler,
    apply,
    cond,
    is_admitted,
    job_manifest,
    job_obj,
    job_pods,
    manager_fixture,  # noqa: F401 - fixture
    namespace,
    reset_samples,
    rlab_fixture,  # noqa: F401 - fixture
    settings_for,
    unique,
    workload_of,
)
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab

GPU = "nvidia.com/gpu"
A100 = "NVIDIA-A100-SXM4-80GB"


class PodWatcher:
    """Samples the pods of the given Jobs every 100 ms; records per Job the pod counts seen."""

    def __init__(self, lab: LabHandle, ns: str, jobs: dict[str, int]) -> None:
        from kubernetes import client, config

        self.core = client.CoreV1Api(config.new_client_from_config(config_file=str(lab.kubeconfig)))
        self.ns, self.jobs = ns, jobs
        self.counts: dict[str, list[tuple[float, int]]] = {j: [] for j in jobs}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pods = self.core.list_namespaced_pod(self.ns).items
            except Exception:  # noqa: BLE001
                continue
            now = time.monotonic()
            for j in self.jobs:
                n = sum(1 for p in pods
                        if (p.metadata.labels or {}).get("batch.kubernetes.io/job-name") == j)
                self.counts[j].append((now, n))
            time.sleep(0.1)

    def partial_spans(self, job: str) -> float:
        """Longest time (s) the Job had some but not all of its pods."""
        want, longest, start = self.jobs[job], 0.0, None
        for t, n in self.counts[job]:
            if 0 < n < want:
                start = t if start is None else start
                longest = max(longest, t - start)
            else:
                start = None
        return longest

    def __enter__(self) -> PodWatcher:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(10)


def test_gpu_jobs_land_whole_on_their_flavor_nodes(rlab: LabHandle, manager) -> None:
    reset_samples(rlab, "gpu")
    big = job_manifest("train-a100", "research", "team-queue", parallelism=6, cpu="100m",
                       gpu=1, duration="600s")
    nxt = job_manifest("train-next", "research", "team-queue", parallelism=4, cpu="100m",
                       gpu=1, duration="600s")
    limits = {"research-cq": {f"a100-flavor/{GPU}": 8, f"l4-flavor/{GPU}": 8}}
    with PodWatcher(rlab, "research", {"train-a100": 6, "train-next": 4}) as pw, \
            UsageSampler(rlab, limits) as sampler:
        apply(rlab, big)
        wl = wait_for(lambda: (w := workload_of(rlab, "research", "train-a100")) and
                      is_admitted(w) and w, 60, "train-a100 admitted")
        psa = wl["status"]["admission"]["podSetAssignments"][0]
        assert psa["flavors"][GPU] == "a100-flavor" and psa["count"] == 6
        assert psa["resourceUsage"][GPU] == "6"
        pods = wait_for(lambda: (ps := job_pods(rlab, "research", "train-a100")) and len(ps) == 6
                        and all(p["status"].get("phase") == "Running" for p in ps) and ps,
                        90, "6 pods running")
        assert {p["spec"]["nodeName"] for p in pods} == {"a100-0"}
        tpl = job_obj(rlab, "research", "train-a100")["spec"]["template"]
        assert tpl["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": A100}
        assert tpl["spec"]["tolerations"] == [{"key": GPU, "operator": "Exists",
                                               "effect": "NoSchedule"}]
        assert tpl["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"
        # What the webhook and the extender read from this process (app.state).
        view, adm_ok = manager.on_loop(lambda m: (
            m.extender_state.workload_for_pod("research", "train-a100"),
            m.admission_lookup.is_admitted("research", "train-a100")))
        assert adm_ok is True and view.admitted
        assert [f.name for f in view.pod_set_flavors["main"]] == ["default-flavor",
                                                                  "a100-flavor"]
        assert manager.on_loop(lambda m: m.extender_state.workload_for_pod(
            "research", "no-such-job")) is None

        # 6 of research's a100 ceiling (4 nominal + 4 borrowing) are used, the cohort has 2
        # a100 left: 4 more GPUs go to the next flavor, l4.
        apply(rlab, nxt)
        wl2 = wait_for(lambda: (w := workload_of(rlab, "research", "train-next")) and
                       is_admitted(w) and w, 60, "train-next admitted")
        assert wl2["status"]["admission"]["podSetAssignments"][0]["flavors"][GPU] == "l4-flavor"
        pods2 = wait_for(lambda: (ps := job_pods(rlab, "research", "train-next")) and len(ps) == 4
                         and all(p["status"].get("phase") == "Running" for p in ps) and ps,
                         90, "4 pods running")
        assert {p["spec"]["nodeName"] for p in pods2} == {"l4-0"}
        assert job_obj(rlab, "research", "train-next")["spec"]["template"]["spec"][
            "nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}
        time.sleep(1)
    # Gang: the pods of a Job are created together (the Job controller's burst), never left
    # partial; no pod is ever Pending for lack of capacity.
    for job in ("train-a100", "train-next"):
        assert pw.partial_spans(job) < 3.0, (job, pw.partial_spans(job))
        assert pw.counts[job][-1][1] == pw.jobs[job]
    assert not sampler.violations, sampler.violations[:5]
    rlab.kubectl("delete", "jobs", "--all", "-n", "research", "--wait=false")


KQ21_TOLS = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
             {"key": "t0", "operator": "Equal", "value": "v0", "effect": "NoSchedule"}]


def test_KQ_21_injection_without_duplicates_no_change_on_restart_exact_restore(
        rlab: LabHandle) -> None:
    rf, cq = unique("kq21-gpu"), unique("kq21-cq")
    ns = namespace(rlab, "kq21")
    apply(rlab,
          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
           "metadata": {"name": rf},
           "spec": {"nodeLabels": {"nvidia.com/gpu.product": A100},
                    "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
                                    {"key": "t0", "value": "v0", "effect": "NoSchedule"}]}},
          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
           "metadata": {"name": cq},
           "spec": {"namespaceSelector": {}, "resourceGroups": [
               {"coveredResources": ["cpu"], "flavors": [
                   {"name": rf, "resources": [{"name": "cpu", "nominalQuota": "4"}]}]},
               {"coveredResources": [GPU], "flavors": [
                   {"name": f"{rf}-g", "resources": [{"name": GPU, "nominalQuota": "8"}]}]}]}},
          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
           "metadata": {"name": f"{rf}-g"},
           "spec": {"nodeLabels": {"nvidia.com/gpu.product": A100},
                    "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
                                    {"key": "t0", "value": "v0", "effect": "NoSchedule"}]}},
          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
           "metadata": {"name": "lq", "namespace": ns}, "spec": {"clusterQueue": cq}})
    apply(rlab, job_manifest("j", ns, "lq", cpu="100m", gpu=1, duration="600s",
                             tolerations=KQ21_TOLS, node_selector={}))
    submitted = job_obj(rlab, ns, "j")["spec"]["template"]
    mt = ManagerThread(settings_for(rlab)).start()
    try:
        running = wait_for(lambda: (j := job_obj(rlab, ns, "j"))["spec"].get("suspend") is False
                           and j, 60, "Job j started")
    finally:
        mt.stop()
    spec = running["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": A100}
    assert spec["tolerations"] == KQ21_TOLS  # two flavors x two tolerations, no duplicate
    # Step 2: a new process re-examines the running Job: no write to it at all.
    generation = running["metadata"]["generation"]
    mt = ManagerThread(settings_for(rlab)).start()
    try:
        wait_for(lambda: mt.m.jobs.reconciles >= 1, 30, "the Job reconciled after restart")
        time.sleep(2)
        again = job_obj(rlab, ns, "j")
        assert again["metadata"]["generation"] == generation
        assert again["spec"]["template"] == running["spec"]["template"]
        assert again["metadata"].get("annotations") == running["metadata"].get("annotations")
        # Step 3: evict (deactivate the Workload): suspended, template exactly as submitted.
        wl = workload_of(rlab, ns, "j")
        rlab.kubectl("patch", "workloads.kueue.x-k8s.io", wl["metadata"]["name"], "-n", ns,
                     "--type=merge", "-p", '{"spec": {"active": false}}')
        stopped = wait_for(lambda: (j := job_obj(rlab, ns, "j"))["spec"].get("suspend") is True
                           and "pykueue.dev/original-pod-scheduling" not in
                           (j["metadata"].get("annotations") or {}) and j, 60,
                           "Job j stopped and restored")
        assert stopped["spec"]["template"] == submitted
        ev = cond(workload_of(rlab, ns, "j"), "Evicted")
        assert ev and ev["status"] == "True" and ev["reason"] == "Deactivated"
        wait_for(lambda: not (workload_of(rlab, ns, "j").get("status") or {}).get("admission"),
                 60, "quota released after the pods are gone")
    finally:
        mt.stop()
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")
