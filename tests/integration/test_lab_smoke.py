"""Issue 2: the lab is a real control plane: Jobs run through the real controller-manager,
scheduler and kwok; GPU taints are honoured; teardown leaves no process behind."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from tests.labfixture import LabHandle, start_lab, wait_for

DURATION = "lab.pykueue.dev/run-duration"


def _job(name: str, ns: str, *, parallelism: int, gpu: int = 0, tolerate_gpu: bool = False,
         duration: str = "1s") -> str:
    container: dict = {"name": "main", "image": "busybox", "command": ["true"]}
    if gpu:
        container["resources"] = {"requests": {"nvidia.com/gpu": str(gpu)},
                                  "limits": {"nvidia.com/gpu": str(gpu)}}
    spec: dict = {"restartPolicy": "Never", "containers": [container]}
    if tolerate_gpu:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists",
                                "effect": "NoSchedule"}]
    return json.dumps({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
                 "template": {"metadata": {"annotations": {DURATION: duration}},
                              "spec": spec}},
    })


def _pods(lab: LabHandle, ns: str, job: str) -> list[dict]:
    return lab.get("pods", "-n", ns, "-l", f"batch.kubernetes.io/job-name={job}")["items"]


def test_nodes_are_ready_with_gpu_capacity(lab: LabHandle) -> None:
    nodes = {n["metadata"]["name"]: n for n in lab.get("nodes")["items"]}
    assert {"a100-0", "l4-0", "cpu-0", "cpu-1"} <= set(nodes)
    a100 = nodes["a100-0"]
    assert a100["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert a100["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert a100["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert "nvidia.com/gpu" not in nodes["cpu-0"]["status"]["allocatable"]
    for n in nodes.values():
        ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", n["metadata"]["name"]


def test_job_with_three_pods_runs_to_complete(lab: LabHandle) -> None:
    ns = f"smoke-{uuid.uuid4().hex[:6]}"
    lab.create_namespace(ns)
    lab.apply(_job("three", ns, parallelism=3))
    job = wait_for(lambda: next((c for c in lab.get("job", "three", "-n", ns)["status"]
                                 .get("conditions", []) if c["type"] == "Complete"
                                 and c["status"] == "True"), None), 90, "Job three Complete")
    assert job
    status = lab.get("job", "three", "-n", ns)["status"]
    assert status["succeeded"] == 3
    pods = _pods(lab, ns, "three")
    assert len(pods) == 3 and all(p["status"]["phase"] == "Succeeded" for p in pods)
    assert all(p["spec"]["nodeName"] in {"cpu-0", "cpu-1"} for p in pods)
    lab.kubectl("delete", "namespace", ns, "--wait=false")


def test_gpu_job_lands_on_gpu_node_only_with_toleration(lab: LabHandle) -> None:
    ns = f"smoke-{uuid.uuid4().hex[:6]}"
    lab.create_namespace(ns)
    lab.apply(_job("gpu-tol", ns, parallelism=1, gpu=1, tolerate_gpu=True, duration="30s"))
    lab.apply(_job("gpu-notol", ns, parallelism=1, gpu=1, tolerate_gpu=False, duration="30s"))
    pod = wait_for(lambda: next((p for p in _pods(lab, ns, "gpu-tol")
                                 if p["status"].get("phase") == "Running"), None),
                   60, "gpu-tol pod Running")
    assert pod["spec"]["nodeName"] in {"a100-0", "l4-0"}
    # The untolerated pod exists but the real scheduler cannot place it anywhere.
    notol = wait_for(lambda: next((p for p in _pods(lab, ns, "gpu-notol")
                                   if any(c["type"] == "PodScheduled" and c["status"] == "False"
                                          for c in p["status"].get("conditions", []))), None),
                     60, "gpu-notol pod Unschedulable")
    assert not notol["spec"].get("nodeName")
    assert notol["status"]["phase"] == "Pending"
    cond = next(c for c in notol["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["reason"] == "Unschedulable"
    msg = cond["message"]
    assert "untolerated taint" in msg or "Insufficient nvidia.com/gpu" in msg
    lab.kubectl("delete", "namespace", ns, "--wait=false")


def test_second_lab_starts_and_tears_down_leaving_no_process(lab: LabHandle,
                                                            tmp_path: Path) -> None:
    """A separate lab instance (own state and ports): every recorded pid is gone after down."""
    other, started = start_lab(tmp_path / "lab2", lab.port_base + 100, lab.bin_dir)
    assert started
    pids = {p.stem: int(p.read_text()) for p in (other.state / "pids").glob("*.pid")}
    assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                         "kwok"}
    for pid in pids.values():
        os.kill(pid, 0)  # alive
    r = other.lab_cmd("down")
    assert "lab: down" in r.stdout
    for name, pid in pids.items():
        stat = Path(f"/proc/{pid}/stat")
        alive = stat.exists() and not stat.read_text().split(") ", 1)[-1].startswith("Z")
        assert not alive, f"{name} (pid {pid}) still running after lab down"
    assert not other.state.exists()
    # Stopping twice is harmless.
    assert other.lab_cmd("down").returncode == 0
