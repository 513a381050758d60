"""LeaderWorkerSet through pykueue with the real LWS operator (sigs.k8s.io/lws v0.8.0, the
version Kueue v0.17.1 requires; ``make operators``): each replica group (leader + ``size - 1``
workers) is one pod group, one Workload (podSets ``leader`` 1 and ``worker`` ``size - 1``),
admitted whole; its pods land on the flavor's node and count in the ClusterQueue's usage.
Raising ``size`` on an admitted one is refused (Kueue #13279); a rollout keeps each group's
Workload for the replacement pods; scaling ``replicas`` down takes
a group's Workload and quota away; one that does not fit waits whole with every pod gated, and
deleting the admitted one frees the quota for it. Skipped with the reason when the operator is
not built."""

from __future__ import annotations

import json
from collections.abc import Iterator

import lab as labmod  # noqa: E402  (hack/ is on sys.path through tests.e2e.test_jobset)
import operators as ops  # noqa: E402
import pytest

from tests.e2e.test_jobset import A100, QUEUE, condition, queue
from tests.e2e.test_kinds_preemption import cohort
from tests.e2e.test_workload_kinds import LONG, TOLERATION, gpu_container
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
GROUP = "kueue.x-k8s.io/pod-group-name"


@pytest.fixture(scope="module")
def pykueue_with_lws(lab: LabHandle, pykueue_in_lab: labmod.Lab) -> Iterator[labmod.Lab]:
    """The LWS operator (CRD, controller, its webhooks) in the lab beside pykueue: pykueue
    reads no LeaderWorkerSet, so the order does not matter."""
    op = ops.OPERATORS["lws"]
    if not op.built:
        pytest.skip(f"lws {op.version} not built ({op.binary} missing): run `make operators`")
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    running = bool(labmod._pid(handle, "lws"))
    r = lab.lab_cmd("operators-up", "lws", check=False)
    assert r.returncode == 0, f"operators-up lws failed:\n{r.stdout}\n{r.stderr}"
    try:
        yield pykueue_in_lab
    finally:
        if not running:
            lab.lab_cmd("operators-down", "lws", check=False)


def lws(name: str, ns: str, replicas: int, size: int) -> str:
    """A LeaderWorkerSet queued in ``lq``: ``replicas`` groups of a leader and ``size - 1``
    workers, every pod one GPU, running an hour."""
    tpl = {"metadata": LONG, "spec": {"containers": [gpu_container()],
                                      "tolerations": [TOLERATION]}}
    return json.dumps({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                       "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"replicas": replicas, "leaderWorkerTemplate": {
                           "size": size, "leaderTemplate": tpl, "workerTemplate": tpl}}})


def group_workloads(lab: LabHandle, ns: str, name: str) -> dict[str, dict]:
    return {w["metadata"]["name"]: w for w in lab.get("workloads.kueue.x-k8s.io", "-n", ns)[
        "items"] if w["metadata"]["name"].startswith(f"leaderworkerset-{name}-")}


def pods_of(lab: LabHandle, ns: str, name: str) -> list[dict]:
    return [p for p in lab.get("pods", "-n", ns, "-l",
                               f"leaderworkerset.sigs.k8s.io/name={name}")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def is_admitted(w: dict) -> bool:
    return bool((c := condition(w, "Admitted")) and c["status"] == "True")


def test_a_leaderworkerset_is_admitted_group_by_group_and_waits_whole_when_it_does_not_fit(
        lab: LabHandle, pykueue_with_lws: labmod.Lab) -> None:
    with queue(lab, "lws", 6) as ns:
        lab.apply(lws("serve", ns, 2, 3))
        wls = wait_for(lambda: len(w := group_workloads(lab, ns, "serve")) == 2
                       and all(map(is_admitted, w.values())) and w, 90,
                       "serve's 2 group Workloads admitted")
        assert sorted(wls) == ["leaderworkerset-serve-0", "leaderworkerset-serve-1"]
        for w in wls.values():
            assert [(p["name"], p["count"]) for p in w["spec"]["podSets"]] == [
                ("leader", 1), ("worker", 2)]
            assert [a["flavors"]["nvidia.com/gpu"] for a in
                    w["status"]["admission"]["podSetAssignments"]] == ["a100-flavor"] * 2
        pods = wait_for(lambda: len(r := [p for p in pods_of(lab, ns, "serve")
                                          if p["status"].get("phase") == "Running"]) == 6
                        and r, 120, "serve's 6 pods running")
        assert {p["spec"]["nodeName"] for p in pods} == {"a100-0"}
        assert all(p["spec"]["nodeSelector"] == A100 for p in pods)
        assert sorted(p["metadata"]["labels"][GROUP] for p in pods) == \
            ["leaderworkerset-serve-0"] * 3 + ["leaderworkerset-serve-1"] * 3
        cq = lab.get("localqueue", "lq", "-n", ns)["spec"]["clusterQueue"]
        wait_for(lambda: [(r["name"], r["total"]) for f in (lab.get("clusterqueue", cq).get(
            "status") or {}).get("flavorsUsage") or [] for r in f["resources"]] == [
            ("nvidia.com/gpu", "6")], 30, "the ClusterQueue's usage at 6 GPUs")

        # Kueue #13279: a bigger group after admission would run pods no quota covers.
        r = lab.kubectl("patch", "leaderworkerset", "serve", "-n", ns, "--type=merge", "-p",
                        '{"spec":{"leaderWorkerTemplate":{"size":4}}}', check=False)
        assert r.returncode != 0 and "spec.leaderWorkerTemplate.size" in r.stderr, r.stderr
        assert len(pods_of(lab, ns, "serve")) == 6

        # A rollout (a new image: the shape stays) replaces every pod of each group; the
        # replacements run on their group's Workload, which stays (it used to go with the last
        # original pod and leave them running on no quota).
        lab.kubectl("patch", "leaderworkerset", "serve", "-n", ns, "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": f"/spec/leaderWorkerTemplate/{t}/spec/containers/0/image",
              "value": "busybox:2"} for t in ("leaderTemplate", "workerTemplate")]))
        wait_for(lambda: len(r := [p for p in pods_of(lab, ns, "serve")
                                   if p["status"].get("phase") == "Running"]) == 6
                 and all(p["spec"]["containers"][0]["image"] == "busybox:2" for p in r), 120,
                 "serve's 6 pods replaced and running")
        wls = group_workloads(lab, ns, "serve")
        assert sorted(wls) == ["leaderworkerset-serve-0", "leaderworkerset-serve-1"]
        assert all(map(is_admitted, wls.values()))

        # Scaling replicas down takes a group, its Workload and its quota away.
        lab.kubectl("patch", "leaderworkerset", "serve", "-n", ns, "--type=merge", "-p",
                    '{"spec":{"replicas":1}}')
        wait_for(lambda: sorted(group_workloads(lab, ns, "serve")) == [
            "leaderworkerset-serve-0"] and len(pods_of(lab, ns, "serve")) == 3, 90,
            "group 1 of serve gone with its Workload")

        # 4 more GPUs do not fit in 6 - 3: the group waits whole, its pods all gated.
        lab.apply(lws("late", ns, 1, 4))
        late = wait_for(lambda: (w := group_workloads(lab, ns, "late").get(
            "leaderworkerset-late-0")) and (c := condition(w, "QuotaReserved"))
            and c["status"] == "False" and c, 90, "late's group Workload pending")
        assert "nvidia.com/gpu" in late["message"] and "nominal 6, usage 3" in late["message"], \
            late
        waiting = pods_of(lab, ns, "late")
        assert len(waiting) == 4 and not any(p["spec"].get("nodeName") for p in waiting)
        assert all("kueue.x-k8s.io/admission" in [g["name"] for g in
                                                  p["spec"].get("schedulingGates") or []]
                   for p in waiting)

        # Deleting the first frees its quota: the waiting group is admitted and runs.
        lab.kubectl("delete", "leaderworkerset", "serve", "-n", ns, "--wait=false")
        wait_for(lambda: is_admitted(group_workloads(lab, ns, "late").get(
            "leaderworkerset-late-0") or {}), 120, "late's group admitted once serve is gone")
        wait_for(lambda: len([p for p in pods_of(lab, ns, "late")
                              if p["status"].get("phase") == "Running"]) == 4, 120,
                 "late's 4 pods running")
        assert group_workloads(lab, ns, "serve") == {}


def test_a_borrowing_group_is_preempted_whole_by_reclaim_and_readmitted(
        lab: LabHandle, pykueue_with_lws: labmod.Lab) -> None:
    """Two ClusterQueues of 4 A100s in a cohort (``test_kinds_preemption.cohort``): A's
    LeaderWorkerSet ``wide`` (1 group of 6: leader + 5 workers) borrows 2 of B's idle GPUs;
    B's ``claim`` (1 group of 4) reclaims them. A's group is evicted whole (Preempted, every
    pod deleted; the operator's new pods wait gated), B's group runs, and once B's
    LeaderWorkerSet is deleted A's group is admitted again and its 6 pods run."""
    with cohort(lab, "lwsr") as (ns_a, ns_b):
        lab.apply(lws("wide", ns_a, 1, 6))

        def running(ns: str, name: str) -> int:
            return sum(1 for p in pods_of(lab, ns, name)
                       if p["status"].get("phase") == "Running" and p["spec"].get("nodeName"))
        wait_for(lambda: running(ns_a, "wide") == 6, 120, "wide's 6 pods running")
        lab.apply(lws("claim", ns_b, 1, 4))
        wait_for(lambda: running(ns_b, "claim") == 4, 180, "claim's 4 pods running")
        evicted = [e for e in lab.get("events", "-n", ns_a, "--field-selector",
                                      "reason=Preempted")["items"]
                   if e["involvedObject"].get("name") == "leaderworkerset-wide-0"]
        assert evicted, "no Preempted event on wide's group Workload"
        wait_for(lambda: (p := pods_of(lab, ns_a, "wide")) and running(ns_a, "wide") == 0
                 and all("kueue.x-k8s.io/admission" in [g["name"] for g in
                                                        x["spec"].get("schedulingGates") or []]
                         for x in p), 90, "wide's new pods gated, none running")
        lab.kubectl("delete", "leaderworkerset", "claim", "-n", ns_b, "--wait=false")
        wait_for(lambda: running(ns_a, "wide") == 6, 180, "wide's 6 pods running again")
