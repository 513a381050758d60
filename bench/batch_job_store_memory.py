#!/usr/bin/env python3
"""Bytes per batch Job kept by the store of every batch Job (``OTHER_JOBS``, watched while
``integrations.frameworks`` leaves out ``batch/job`` and a kind running pods through batch
Jobs is served), with and without its ``identity_only`` transform.

    .venv/bin/python bench/batch_job_store_memory.py               # 5000 Jobs
    .venv/bin/python bench/batch_job_store_memory.py --jobs 20000

Each Job is a JobSet's child as the API server sends it (JobSet v0.11.1's labels and
annotations, a controller ownerReference, an Indexed completion mode, a pod template of one
container with a command, env, requests and limits, a nodeSelector and a toleration, a
status with conditions), decoded from its own JSON text (name and uid vary), as a list or a
watch event hands it to the informer. ``Informer._apply`` (an ADDED event) fills the store:
``tracemalloc`` counts the bytes still allocated once every Job is stored (the decoded
objects the transform drops are freed), divided by the Job count.

Prints one JSON document: ``jobs``, ``json_bytes_per_job`` (the JSON text's size), and per
variant (``whole``: no transform, as before; ``identity_only``) ``bytes_per_job``, plus
``ratio`` (whole / identity_only).
"""

from __future__ import annotations

import argparse
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.kube.client import JOBS  # noqa: E402
from app.kube.informers import Informer, identity_only  # noqa: E402


def job_text(i: int) -> str:
    """The JSON text of JobSet ``train-<i // 8>``'s child Job ``train-<i // 8>-workers-<i % 8>``."""
    js, idx = f"train-{i // 8}", i % 8
    name, uid, js_uid = f"{js}-workers-{idx}", f"5f0c1a2e-0000-4000-8000-{i:012d}", \
        f"9a7d3b1c-0000-4000-8000-{i // 8:012d}"
    labels = {"jobset.sigs.k8s.io/jobset-name": js, "jobset.sigs.k8s.io/jobset-uid": js_uid,
              "jobset.sigs.k8s.io/replicatedjob-name": "workers",
              "jobset.sigs.k8s.io/replicatedjob-replicas": "8",
              "jobset.sigs.k8s.io/job-index": str(idx),
              "jobset.sigs.k8s.io/job-key": f"{i:040x}", "team": "research"}
    pod_labels = {**labels, "batch.kubernetes.io/controller-uid": uid,
                  "batch.kubernetes.io/job-name": name, "controller-uid": uid, "job-name": name}
    return json.dumps({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": name, "namespace": "research", "uid": uid, "resourceVersion": str(1000 + i),
            "generation": 1, "creationTimestamp": "2026-12-06T12:00:00Z", "labels": labels,
            "annotations": {"jobset.sigs.k8s.io/jobset-name": js,
                            "jobset.sigs.k8s.io/replicatedjob-replicas": "8",
                            "jobset.sigs.k8s.io/job-index": str(idx)},
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                 "name": js, "uid": js_uid, "controller": True,
                                 "blockOwnerDeletion": True}]},
        "spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 0, "completionMode": "Indexed",
            "suspend": False, "manualSelector": False,
            "podReplacementPolicy": "TerminatingOrFailed",
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": {
                    "batch.kubernetes.io/job-completion-index": str(idx)}},
                "spec": {
                    "restartPolicy": "Never", "subdomain": js, "dnsPolicy": "ClusterFirst",
                    "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30,
                    "nodeSelector": {"cloud.example.com/gpu": "a100"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}],
                    "containers": [{
                        "name": "trainer", "image": "registry.example.com/research/train:v3",
                        "command": ["python", "-m", "train", "--epochs", "90"],
                        "env": [{"name": "WORLD_SIZE", "value": "8"},
                                {"name": "MASTER_ADDR", "value": f"{js}-workers-0-0.{js}"}],
                        "resources": {"requests": {"cpu": "8", "memory": "64Gi",
                                                   "nvidia.com/gpu": "1"},
                                      "limits": {"nvidia.com/gpu": "1"}},
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File",
                        "imagePullPolicy": "IfNotPresent"}]}}},
        "status": {"active": 1, "ready": 1, "startTime": "2026-12-06T12:00:05Z",
                   "uncountedTerminatedPods": {}, "terminating": 0,
                   "conditions": []}})


def bytes_per_job(texts: list[str], transform: Any) -> float:
    """Bytes still allocated per Job once the informer's store holds every one of ``texts``
    (each decoded, then applied as an ADDED watch event)."""
    inf = Informer(None, JOBS, transform=transform)  # type: ignore[arg-type]  # never lists
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for text in texts:
        inf._apply({"type": "ADDED", "object": json.loads(text)})  # noqa: SLF001
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(inf.store) == len(texts)
    return (after - before) / len(texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    args = parser.parse_args()
    texts = [job_text(i) for i in range(args.jobs)]
    whole = bytes_per_job(texts, None)
    kept = bytes_per_job(texts, identity_only)
    print(json.dumps({
        "jobs": args.jobs,
        "json_bytes_per_job": round(sum(len(t) for t in texts) / len(texts)),
        "whole": {"bytes_per_job": round(whole)},
        "identity_only": {"bytes_per_job": round(kept)},
        "ratio": round(whole / kept, 1)}, indent=1))


if __name__ == "__main__":
    main()
