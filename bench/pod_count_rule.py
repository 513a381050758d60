#!/usr/bin/env python3
"""Cost of the Pod webhook's count rule at CREATE with many terminal pods under one object.

    .venv/bin/python bench/pod_count_rule.py                 # 100, 1,000, 10,000 terminal pods
    .venv/bin/python bench/pod_count_rule.py --terminal 50000 --checks 200

A tenant's admitted PyTorchJob (2 workers admitted) with one worker Running and N Failed
ones under it (a tenant can leave them by the thousand: the training operator keeps failed
pods). Each check is ``PodCreateCheck.errors`` for a new worker, in process, stores built
as the informers keep them (no API server). Prints one JSON document: per N, the mean and
p99 milliseconds per check and whether the check allowed the pod (it must: one of two
places is free). The count reads the pods that hold quota under the controller uid
(``reconciler.holding_pods_controlled_by``), so the cost should not grow with N.
"""

from __future__ import annotations

import argparse
import json
import time
from types import SimpleNamespace
from typing import Any

from app.config import Settings
from app.controllers.pod_create_check import PodCreateCheck
from app.integrations import default_registry
from app.integrations.kubeflow.kubeflow import PYTORCHJOB
from app.kube.client import JOBS
from app.kube.context import POD, WL
from app.kube.informers import Store

NS = "t"
SPEC = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}


def _pod(name: str, phase: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NS, "uid": f"{name}-uid",
        "labels": {"training.kubeflow.org/job-name": "ddp", "kueue.x-k8s.io/podset": "worker"},
        "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                             "name": "ddp", "uid": "ddp-uid", "controller": True}]},
        "spec": SPEC, "status": {"phase": phase}}


def _check(terminal: int) -> tuple[PodCreateCheck, dict[str, Store]]:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"namespace": NS, "name": "ddp", "uid": "ddp-uid",
                        "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
           "spec": {"runPolicy": {"suspend": False}, "pytorchReplicaSpecs": {
               "Worker": {"replicas": 2, "template": {"spec": SPEC}}}}}
    wl = {"metadata": {"namespace": NS, "name": PYTORCHJOB.workload_name(job),
                       "resourceVersion": "1"},
          "spec": {"queueName": "lq", "podSets": [
              {"name": "worker", "count": 2, "template": {"spec": SPEC}}]},
          "status": {"conditions": [{"type": "QuotaReserved", "status": "True"},
                                    {"type": "Admitted", "status": "True"}],
                     "admission": {"clusterQueue": "cq", "podSetAssignments": [
                         {"name": "worker", "count": 2, "flavors": {"cpu": "default"}}]}}}
    stores = {k: Store(JOBS) for k in (PYTORCHJOB.key, WL, POD)}
    stores[PYTORCHJOB.key].put(job)
    stores[WL].put(wl)
    stores[POD].put(_pod("ddp-worker-0", "Running"))
    for i in range(terminal):
        stores[POD].put(_pod(f"ddp-worker-1-failed-{i}", "Failed"))
    ctx = SimpleNamespace(store=lambda k: stores.get(k) or Store(JOBS), synced=True,
                          settings=Settings(controllers_enabled=False))
    return PodCreateCheck(ctx, default_registry()), stores  # type: ignore[arg-type]


def measure(terminal: int, checks: int) -> dict[str, Any]:
    check, _ = _check(terminal)
    new = _pod("ddp-worker-1", "Pending")
    allowed = check.errors(new, dry_run=True) == []  # also builds the store's indexes once
    times = []
    for _ in range(checks):
        t0 = time.perf_counter()
        check.errors(new, dry_run=True)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"terminal_pods": terminal, "checks": checks, "allowed": allowed,
            "mean_ms": round(sum(times) / len(times), 3),
            "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--terminal", type=int, action="append",
                        help="terminal pods under the object (repeatable; default 100, 1000, "
                        "10000)")
    parser.add_argument("--checks", type=int, default=500)
    args = parser.parse_args(argv)
    rows = [measure(n, args.checks) for n in args.terminal or [100, 1000, 10000]]
    print(json.dumps({"rows": rows}, indent=2))
    return 0 if all(r["allowed"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
