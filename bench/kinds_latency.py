#!/usr/bin/env python3
"""Admission -> pods Running, per job kind, on the lab (issue 30's number; `make bench-kinds`).

For each kind (Job, JobSet, PyTorchJob, MPIJob, RayJob, LeaderWorkerSet, TrainJob,
AppWrapper) whose operator runs in the lab, one object asking 2 one-GPU pods is queued, alone,
in a namespace of its own with a ClusterQueue of 8 GPUs on the A100 node (a flavor that adds
the GPU taint's toleration; and CPU for Ray's head and submitter), and two durations are
taken from its Workload's ``Admitted`` to all its 2 GPU pods ``Running``:

- ``api_s``: from the API's timestamps (the Workload's ``Admitted`` lastTransitionTime to the
  latest GPU container's ``state.running.startedAt``), whole seconds each, so +-1 s;
- ``seen_s``: from this script's polling (admission first seen to the pods first seen Running;
  one look every ``--poll`` s, each a kubectl call, so a few tenths under load).

The object is then deleted and its pods awaited gone before the next kind. Prints a table and
one JSON object (``{"kinds": {kind: {"api_s", "seen_s", "pods"}}, "skipped": {kind: why}}``;
a kind whose operator is not running, or whose pods do not run within 180 s, is skipped).
Expects the lab up with pykueue and the operators (`make bench-kinds` starts them as `make run`
does); leaves the lab running. Not part of `make test`.

    LAB_STATE_DIR=... LAB_PORT_BASE=... .venv/bin/python bench/kinds_latency.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "hack"))

import lab as labmod  # noqa: E402
import scenario  # noqa: E402

from tests.e2e.test_appwrapper import appwrapper  # noqa: E402
from tests.e2e.test_jobset import jobset  # noqa: E402
from tests.e2e.test_kubeflow import mpijob, pytorchjob  # noqa: E402
from tests.e2e.test_leaderworkerset import lws  # noqa: E402
from tests.e2e.test_operator_lifecycle import lasting, rayjob_lasting  # noqa: E402
from tests.e2e.test_workload_kinds import long_job  # noqa: E402

GPU = "nvidia.com/gpu"
V = "kueue.x-k8s.io/v1beta2"


def _job(name: str, ns: str) -> dict[str, Any]:
    job = json.loads(long_job(name, ns, {"kueue.x-k8s.io/queue-name": "lq"}))
    job["spec"]["parallelism"] = job["spec"]["completions"] = 2
    return job


def _trainjob(name: str, ns: str) -> dict[str, Any]:
    tj = scenario.trainjob(name, ns, f"{name}-rt", 2)
    tj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    return tj


# kind -> (operators it needs, builder of an object queued in ``lq`` with 2 one-GPU pods).
KINDS: dict[str, tuple[tuple[str, ...], Callable[[str, str], dict[str, Any]]]] = {
    "Job": ((), _job),
    "JobSet": (("jobset",), lambda n, ns: json.loads(jobset(n, ns, ("w", 1, 2)))),
    "PyTorchJob": (("training-operator",), lambda n, ns: json.loads(pytorchjob(n, ns, 1))),
    "MPIJob": (("mpi-operator",), lambda n, ns: json.loads(mpijob(n, ns, 2))),
    "RayJob": (("kuberay",), rayjob_lasting),
    "LeaderWorkerSet": (("lws",), lambda n, ns: json.loads(lws(n, ns, 1, 2))),
    "TrainJob": (("jobset", "trainer"), _trainjob),
    "AppWrapper": (("appwrapper",), lambda n, ns: json.loads(appwrapper(n, ns, 2))),
}


def stamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class Bench:
    def __init__(self, lab: labmod.Lab, poll: float) -> None:
        self.lab, self.poll = lab, poll

    def get(self, *args: str) -> dict[str, Any]:
        out = labmod.kubectl(self.lab, "get", *args, "-o", "json")
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    def apply(self, obj: dict[str, Any]) -> None:
        labmod.kubectl(self.lab, "apply", "-f", "-", input=json.dumps(obj))

    def wait(self, what: str, fn: Callable[[], Any], timeout: float = 180) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if got := fn():
                return got
            time.sleep(self.poll)
        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")

    def queue(self, ns: str) -> str:
        """ClusterQueue of 8 A100 GPUs and 4 CPUs / 8Gi, LocalQueue ``lq`` in ``ns``."""
        cq = f"{ns}-cq"
        self.apply({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": "bench-a100"},
             "spec": {"nodeLabels": scenario.A100, "tolerations": [scenario.GPU_TOLERATION]}},
            {"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": "bench-cpu"}},
            {"apiVersion": V, "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": {
                "namespaceSelector": {}, "resourceGroups": [
                    {"coveredResources": ["cpu", "memory"], "flavors": [
                        {"name": "bench-cpu", "resources": [
                            {"name": "cpu", "nominalQuota": "4"},
                            {"name": "memory", "nominalQuota": "8Gi"}]}]},
                    {"coveredResources": [GPU], "flavors": [
                        {"name": "bench-a100", "resources": [
                            {"name": GPU, "nominalQuota": 8}]}]}]}},
            {"apiVersion": V, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns},
             "spec": {"clusterQueue": cq}}]})
        self.wait(f"sa/default in {ns}", lambda: labmod.kubectl(
            self.lab, "get", "sa", "default", "-n", ns, check=False).returncode == 0, 60)
        return cq

    def gpu_pods(self, ns: str) -> list[dict[str, Any]]:
        return [p for p in self.get("pods", "-n", ns)["items"]
                if not p["metadata"].get("deletionTimestamp")
                and any(GPU in ((c.get("resources") or {}).get("requests") or {})
                        for c in p["spec"]["containers"])]

    def admitted(self, ns: str) -> dict[str, Any] | None:
        for w in self.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]:
            for c in (w.get("status") or {}).get("conditions") or []:
                if c["type"] == "Admitted" and c["status"] == "True":
                    return c
        return None

    def one(self, kind: str, build: Callable[[str, str], dict[str, Any]]) -> dict[str, Any]:
        """One object of ``kind`` queued alone: its durations (module doc)."""
        ns = f"bench-{kind.lower()}-{uuid.uuid4().hex[:5]}"
        cq = self.queue(ns)
        try:
            obj = lasting(build("b", ns), "1h")
            if kind == "TrainJob":
                self.apply(scenario.training_runtime("b-rt", ns))
            self.apply(obj)
            cond = self.wait(f"{kind} admitted", lambda: self.admitted(ns))
            t_admitted = time.monotonic()

            def running() -> list[dict[str, Any]] | None:
                pods = [p for p in self.gpu_pods(ns) if p["status"].get("phase") == "Running"]
                return pods if len(pods) >= 2 else None
            pods = self.wait(f"{kind}'s 2 GPU pods running", running)
            seen = time.monotonic() - t_admitted
            started = [stamp(s["state"]["running"]["startedAt"]) for p in pods
                       for s in p["status"].get("containerStatuses") or []
                       if (s.get("state") or {}).get("running")]
            api = max(started) - stamp(cond["lastTransitionTime"]) if started else None
            return {"api_s": api, "seen_s": round(seen, 2), "pods": len(pods)}
        finally:
            labmod.kubectl(self.lab, "delete", "namespace", ns, "--wait=false", check=False)
            labmod.kubectl(self.lab, "delete", "clusterqueue", cq, "--wait=false", check=False)
            self.wait(f"the pods of {ns} gone", lambda: not self.get(
                "pods", "-n", ns)["items"], 180)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="objects per kind (median kept)")
    parser.add_argument("--poll", type=float, default=0.2, help="seconds between looks")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset")
    args = parser.parse_args()
    lab = labmod.from_args(None, None, None)
    bench = Bench(lab, args.poll)
    results: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for kind in args.kinds.split(","):
        needs, build = KINDS[kind]
        missing = [op for op in needs if not labmod._pid(lab, op)]
        if missing:
            skipped[kind] = f"{', '.join(missing)} not running in the lab"
            continue
        try:
            runs = [bench.one(kind, build) for _ in range(args.rounds)]
        except TimeoutError as exc:
            skipped[kind] = f"failed: {exc}"
            continue
        apis = [r["api_s"] for r in runs if r["api_s"] is not None]
        results[kind] = {"api_s": statistics.median(apis) if apis else None,
                         "seen_s": statistics.median(r["seen_s"] for r in runs),
                         "pods": runs[-1]["pods"], "rounds": len(runs)}
        print(f"{kind}: {results[kind]}", file=sys.stderr, flush=True)
    print(f"{'kind':<16} {'api_s':>6} {'seen_s':>7} {'pods':>4}")
    for kind, r in results.items():
        api = "-" if r["api_s"] is None else f"{r['api_s']:.0f}"
        print(f"{kind:<16} {api:>6} {r['seen_s']:>7.2f} {r['pods']:>4}")
    for kind, why in skipped.items():
        print(f"{kind:<16} skipped: {why}")
    print(json.dumps({"kinds": results, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
