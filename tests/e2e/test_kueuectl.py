"""Kueue's own kubectl plugin, ``kueuectl`` v0.17.1 (``make kueuectl``), against pykueue.

Every verb a Kueue user types runs unchanged against the lab with pykueue as the controller,
and each test checks the effect through the API, not kueuectl's own output only:

- ``create resourceflavor / clusterqueue / localqueue`` make objects that pykueue activates
  (ClusterQueue and LocalQueue ``Active=True``); ``list`` of each shows them;
- ``list workload`` shows admitted and pending Workloads, with each pending one's position in
  its LocalQueue (read by kueuectl from the visibility API); ``list pods --for job/NAME``;
- ``stop localqueue --keep-already-running`` (stopPolicy Hold): a Workload that fits once quota
  frees stays pending until ``resume localqueue``;
- ``stop workload`` (``spec.active: false``): evicted and its Job suspended; ``resume
  workload`` admits it again;
- ``stop clusterqueue`` (stopPolicy HoldAndDrain): admitted Workloads are evicted, its Jobs
  suspended; ``resume clusterqueue`` admits them again;
- ``delete workload --yes``: kueuectl deletes the Job (the API's default for Jobs orphans
  its pod and Workload); once that pod is gone pykueue finishes the orphaned Workload and its
  quota admits the next (after ``resume localqueue``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_jobset import condition, owned_workload
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import scenario  # noqa: E402

pytestmark = pytest.mark.lab
QUEUE = "kueue.x-k8s.io/queue-name"
WAIT = 60  # seconds for pykueue to react to one change


def kueuectl_binary() -> Path:
    """``kueuectl`` as ``make kueuectl`` caches it (hack/build-kueue.sh)."""
    version = next(line.split()[-1] for line in
                   (ROOT / "hack" / "tools" / "kueue" / "go.mod").read_text().splitlines()
                   if "sigs.k8s.io/kueue " in line)
    cache = Path(os.environ.get("PYKUEUE_KUEUE_CACHE") or
                 Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                 / "pykueue" / "kueue")
    return cache / version / "kueuectl"


class Kueuectl:
    """``kueuectl`` against the lab, as the lab's admin."""

    def __init__(self, lab: LabHandle, binary: Path) -> None:
        self.lab, self.binary = lab, binary

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([str(self.binary), "--kubeconfig", str(self.lab.kubeconfig), *args],
                           text=True, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise AssertionError(f"kueuectl {' '.join(args)} failed ({r.returncode}): "
                                 f"{r.stderr.strip()} {r.stdout.strip()}")
        return r

    def table(self, *args: str) -> list[dict[str, str]]:
        """The rows of a ``list`` verb's table, keyed by its upper-case column names."""
        lines = [ln for ln in self(*args).stdout.splitlines() if ln.strip()]
        if not lines or lines[0].startswith("No resources"):
            return []
        header = lines[0]
        # Columns are left-aligned and at least two spaces apart; names may hold one space.
        starts = [0, *(m.start() for m in re.finditer(r"(?<=  )\S", header))]
        names = [header[s:e].strip() for s, e in zip(starts, [*starts[1:], None], strict=True)]
        return [{n: ln[s:e].strip() for n, s, e in zip(names, starts, [*starts[1:], None],
                                                         strict=True)} for ln in lines[1:]]


@pytest.fixture(scope="module")
def kctl(pykueue_in_lab: labmod.Lab, lab: LabHandle) -> Kueuectl:
    binary = kueuectl_binary()
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `make kueuectl` (make test builds it)")
    return Kueuectl(lab, binary)


@pytest.fixture
def queue(kctl: Kueuectl, lab: LabHandle) -> Iterator[dict[str, str]]:
    """A ResourceFlavor, a ClusterQueue of 2 CPUs on it and a LocalQueue in a fresh namespace,
    all made with kueuectl's create verbs; deleted afterwards."""
    run = uuid.uuid4().hex[:6]
    names = {"ns": f"kctl-{run}", "rf": f"kctl-rf-{run}", "cq": f"kctl-cq-{run}", "lq": "jobs"}
    lab.create_namespace(names["ns"])
    kctl("create", "resourceflavor", names["rf"])
    kctl("create", "clusterqueue", names["cq"], "--nominal-quota", f"{names['rf']}:cpu=2",
         "--preemption-within-cluster-queue", "Never")
    kctl("create", "localqueue", names["lq"], "-n", names["ns"], "-c", names["cq"])
    try:
        yield names
    finally:
        lab.kubectl("delete", "namespace", names["ns"], "--wait=false", check=False)
        # ~10 s on a quiet machine; over 120 s once with two lanes of make test on 2 cores
        # (the namespace controller requeues while the pods terminate).
        wait_for(lambda: not lab.get("workloads.kueue.x-k8s.io", "-n", names["ns"])["items"],
                 300, f"the Workloads of {names['ns']} gone")
        lab.kubectl("delete", "clusterqueue", names["cq"], "--wait=false", check=False)
        lab.kubectl("delete", "resourceflavor", names["rf"], "--wait=false", check=False)


def job(name: str, ns: str, lq: str) -> str:
    """A one-pod batch Job of 1 CPU in LocalQueue ``lq`` that runs for ten minutes (kwok)."""
    return json.dumps({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: lq}},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {
            "metadata": {"annotations": {scenario.DURATION: "600s"}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "registry.example/train:latest",
                "resources": {"requests": {"cpu": "1"}}}]}}}})


def wl_of(lab: LabHandle, ns: str, name: str) -> dict[str, Any]:
    return wait_for(lambda: owned_workload(lab, ns, "Job", name), WAIT, f"the Workload of {name}")


def admitted(lab: LabHandle, ns: str, name: str) -> bool:
    w = owned_workload(lab, ns, "Job", name)
    return bool(w and (condition(w, "Admitted") or {}).get("status") == "True")


def finished_or_gone(lab: LabHandle, ns: str, workload: str) -> bool:
    r = lab.kubectl("get", "workloads.kueue.x-k8s.io", workload, "-n", ns, "-o", "json",
                    check=False)
    if r.returncode != 0:
        return "NotFound" in r.stderr
    return (condition(json.loads(r.stdout), "Finished") or {}).get("status") == "True"


def suspended(lab: LabHandle, ns: str, name: str) -> bool:
    return bool(lab.get("job", name, "-n", ns)["spec"].get("suspend"))


def submit(lab: LabHandle, q: dict[str, str], *names: str) -> None:
    """Create the Jobs in order, each after the previous one's Workload exists (queue order
    is creation order)."""
    for n in names:
        lab.apply(job(n, q["ns"], q["lq"]))
        wl_of(lab, q["ns"], n)


def active(obj: dict[str, Any]) -> bool:
    return (condition(obj, "Active") or {}).get("status") == "True"


def test_create_and_list_verbs(kctl: Kueuectl, lab: LabHandle, queue: dict[str, str]) -> None:
    q = queue
    cq = wait_for(lambda: (lambda o: o if active(o) else None)(
        lab.get("clusterqueue", q["cq"])), WAIT, "the ClusterQueue Active")
    rg = cq["spec"]["resourceGroups"]
    assert rg[0]["flavors"][0]["name"] == q["rf"]
    assert rg[0]["flavors"][0]["resources"] == [{"name": "cpu", "nominalQuota": "2"}]
    assert cq["spec"]["namespaceSelector"] == {}
    wait_for(lambda: active(lab.get("localqueue", q["lq"], "-n", q["ns"])), WAIT,
             "the LocalQueue Active")
    assert any(r["NAME"] == q["rf"] for r in kctl.table("list", "resourceflavor"))
    row = next(r for r in kctl.table("list", "clusterqueue") if r["NAME"] == q["cq"])
    assert row["ACTIVE"] == "true", row
    lq_rows = kctl.table("list", "localqueue", "-n", q["ns"])
    assert [(r["NAME"], r["CLUSTERQUEUE"]) for r in lq_rows] == [(q["lq"], q["cq"])]


def test_list_workload_and_pods(kctl: Kueuectl, lab: LabHandle, queue: dict[str, str]) -> None:
    q = queue
    submit(lab, q, "a", "b", "c", "d")
    wait_for(lambda: admitted(lab, q["ns"], "a") and admitted(lab, q["ns"], "b"), WAIT,
             "a and b admitted (2 CPUs)")
    wait_for(lambda: [r["NAME"] for r in kctl.table("list", "workload", "-n", q["ns"])
                      if r["STATUS"] == "PENDING" and r["POSITION IN QUEUE"] != ""] == [
                          owned_workload(lab, q["ns"], "Job", n)["metadata"]["name"]
                          for n in ("c", "d")] or None, WAIT, "c and d pending with positions")
    rows = {r["JOB NAME"]: r for r in kctl.table("list", "workload", "-n", q["ns"])}
    assert {n: rows[n]["STATUS"] for n in "abcd"} == {
        "a": "ADMITTED", "b": "ADMITTED", "c": "PENDING", "d": "PENDING"}
    # Queue order: creation time, then (same second: c and d are created within one) the
    # Workload's uid, pykueue's tie-break (Kueue leaves equal times unordered).
    wls = {n: owned_workload(lab, q["ns"], "Job", n)["metadata"] for n in "cd"}
    first, second = sorted("cd", key=lambda n: (wls[n]["creationTimestamp"], wls[n]["uid"]))
    assert (rows[first]["POSITION IN QUEUE"], rows[second]["POSITION IN QUEUE"]) == ("0", "1")
    assert {rows[n]["CLUSTERQUEUE"] for n in "abcd"} == {q["cq"]}
    assert {rows[n]["LOCALQUEUE"] for n in "abcd"} == {q["lq"]}
    pending = kctl.table("list", "workload", "-n", q["ns"], "--status", "pending")
    assert sorted(r["JOB NAME"] for r in pending) == ["c", "d"]
    pods = wait_for(lambda: kctl.table("list", "pods", "--for", "job/a", "-n", q["ns"]) or None,
                    WAIT, "job a's pod listed")
    assert [p["NAME"] for p in pods] == [
        p["metadata"]["name"] for p in lab.get("pods", "-n", q["ns"], "-l", "job-name=a")["items"]]


def test_stop_and_resume_localqueue_workload_clusterqueue(
        kctl: Kueuectl, lab: LabHandle, queue: dict[str, str]) -> None:
    q = queue
    submit(lab, q, "a", "b", "c")
    wait_for(lambda: admitted(lab, q["ns"], "a") and admitted(lab, q["ns"], "b"), WAIT,
             "a and b admitted")

    # LocalQueue stopped, running Workloads kept: c stays pending when a's quota frees.
    kctl("stop", "localqueue", q["lq"], "-n", q["ns"], "--keep-already-running")
    assert lab.get("localqueue", q["lq"], "-n", q["ns"])["spec"]["stopPolicy"] == "Hold"
    wait_for(lambda: (condition(lab.get("localqueue", q["lq"], "-n", q["ns"]), "Active") or {})
             .get("status") == "False", WAIT, "the LocalQueue inactive")
    wl_a = wl_of(lab, q["ns"], "a")["metadata"]["name"]
    kctl("delete", "workload", wl_a, "-n", q["ns"], "--yes")
    wait_for(lambda: lab.kubectl("get", "job", "a", "-n", q["ns"], check=False).returncode != 0,
             WAIT, "job a deleted by `delete workload`")
    # kueuectl deletes the Job with the API's default propagation for Jobs (orphan): its pod
    # runs on, and pykueue keeps a's quota until that pod is gone (quota follows the pods).
    lab.kubectl("delete", "pod", "-n", q["ns"], "-l", "batch.kubernetes.io/job-name=a",
                "--wait=false")
    wait_for(lambda: finished_or_gone(lab, q["ns"], wl_a), WAIT,
             "a's orphaned Workload finished once its pod is gone")
    wait_for(lambda: (lambda c: c and "stop" in c.get("message", "").lower())(
        condition(owned_workload(lab, q["ns"], "Job", "c"), "QuotaReserved")), WAIT,
        "c pending because its LocalQueue is stopped")
    assert not admitted(lab, q["ns"], "c") and admitted(lab, q["ns"], "b")
    kctl("resume", "localqueue", q["lq"], "-n", q["ns"])
    assert "stopPolicy" not in lab.get("localqueue", q["lq"], "-n", q["ns"])["spec"] or \
        lab.get("localqueue", q["lq"], "-n", q["ns"])["spec"]["stopPolicy"] == "None"
    wait_for(lambda: admitted(lab, q["ns"], "c"), WAIT, "c admitted after resume")

    # One Workload stopped: evicted, its Job suspended; resumed: admitted again.
    wl_b = wl_of(lab, q["ns"], "b")["metadata"]["name"]
    kctl("stop", "workload", wl_b, "-n", q["ns"])
    assert lab.get("workload", wl_b, "-n", q["ns"])["spec"]["active"] is False
    wait_for(lambda: not admitted(lab, q["ns"], "b") and suspended(lab, q["ns"], "b"), WAIT,
             "b evicted and suspended")
    kctl("resume", "workload", wl_b, "-n", q["ns"])
    wait_for(lambda: admitted(lab, q["ns"], "b") and not suspended(lab, q["ns"], "b"), WAIT,
             "b admitted again")

    # ClusterQueue stopped with drain: every admitted Workload evicted; resumed: admitted.
    kctl("stop", "clusterqueue", q["cq"])
    assert lab.get("clusterqueue", q["cq"])["spec"]["stopPolicy"] == "HoldAndDrain"
    wait_for(lambda: not any(admitted(lab, q["ns"], n) for n in "bc")
             and suspended(lab, q["ns"], "b") and suspended(lab, q["ns"], "c"), WAIT,
             "b and c evicted by the drain")
    # The ClusterQueue's status (Active=False, Stopped) is written apart from the evictions.
    wait_for(lambda: next(r for r in kctl.table("list", "clusterqueue")
                          if r["NAME"] == q["cq"])["ACTIVE"] == "false", WAIT,
             "kueuectl lists the stopped ClusterQueue inactive")
    kctl("resume", "clusterqueue", q["cq"])
    wait_for(lambda: admitted(lab, q["ns"], "b") and admitted(lab, q["ns"], "c"), WAIT,
             "b and c admitted after the ClusterQueue resumed")
