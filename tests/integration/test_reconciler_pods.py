"""Plain Pods on the real control plane (issue 17): a queued Pod (created gated, as the
webhook makes it) is admitted whole or waits gated with the reason; admitted, it is ungated
and placed; deleting it frees its quota for the next; deactivating its Workload stops it."""

from __future__ import annotations

import json

import pytest

from app.wire.workload import workload_name_for_owner
from tests.integration.reconciler_support import (
    apply,
    cond,
    is_admitted,
    make_queue,
    manager_fixture,  # noqa: F401 - fixture
    namespace,
    rlab_fixture,  # noqa: F401 - fixture
    unique,
)
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
GATE = "kueue.x-k8s.io/admission"


def gated_pod(name: str, ns: str, queue: str, cpu: str = "1") -> dict:
    """A Pod as pykueue's webhook stores it: managed label and the admission gate."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"kueue.x-k8s.io/queue-name": queue,
                                    "kueue.x-k8s.io/managed": "true"}},
            "spec": {"schedulingGates": [{"name": GATE}],
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": cpu}}}]}}


def pod_workload(lab: LabHandle, ns: str, name: str) -> dict | None:
    p = lab.get("pod", name, "-n", ns)
    r = lab.kubectl("get", "workloads.kueue.x-k8s.io", "-n", ns, "-o", "json",
                    workload_name_for_owner("Pod", "", name, p["metadata"]["uid"]), check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def gates(lab: LabHandle, ns: str, name: str) -> list[str]:
    return [g["name"] for g in lab.get("pod", name, "-n", ns)["spec"].get("schedulingGates") or []]


def test_plain_pods_are_admitted_whole_wait_gated_and_free_quota_when_deleted(
        rlab: LabHandle, manager) -> None:
    ns = namespace(rlab, "pods")
    cq = unique("pods-cq")
    make_queue(rlab, cq, (ns,), cpu="2")
    try:
        apply(rlab, gated_pod("p1", ns, "lq"), gated_pod("p2", ns, "lq"))
        for name in ("p1", "p2"):
            wait_for(lambda n=name: is_admitted(pod_workload(rlab, ns, n)), 30, f"{name} admitted")
            wait_for(lambda n=name: GATE not in gates(rlab, ns, n)
                     and rlab.get("pod", n, "-n", ns)["spec"].get("nodeName"), 60,
                     f"{name} ungated and placed")
            p = rlab.get("pod", name, "-n", ns)
            assert p["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "main"
        apply(rlab, gated_pod("p3", ns, "lq"))
        qr = wait_for(lambda: (w := pod_workload(rlab, ns, "p3"))
                      and (c := cond(w, "QuotaReserved")) and c["status"] == "False" and c,
                      30, "p3 pending")
        assert "cpu" in qr["message"], qr
        assert GATE in gates(rlab, ns, "p3") and not rlab.get("pod", "p3", "-n", ns)["spec"].get(
            "nodeName")
        # p1 goes: its Workload goes with it, and p3 takes the freed cpu.
        old = pod_workload(rlab, ns, "p1")
        rlab.kubectl("delete", "pod", "p1", "-n", ns, "--wait=false")
        wait_for(lambda: rlab.kubectl("get", "workloads.kueue.x-k8s.io", old["metadata"]["name"],
                                      "-n", ns, check=False).returncode != 0, 60,
                 "p1's Workload deleted")
        wait_for(lambda: is_admitted(pod_workload(rlab, ns, "p3")), 60, "p3 admitted")
        wait_for(lambda: GATE not in gates(rlab, ns, "p3"), 30, "p3 ungated")
        # Deactivating p2's Workload evicts it: the Pod is deleted (Kueue stops a Pod so).
        w2 = pod_workload(rlab, ns, "p2")
        rlab.kubectl("patch", "workloads.kueue.x-k8s.io", w2["metadata"]["name"], "-n", ns,
                     "--type=merge", "-p", '{"spec": {"active": false}}')
        wait_for(lambda: rlab.kubectl("get", "pod", "p2", "-n", ns,
                                      check=False).returncode != 0, 60, "p2 deleted")
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def group_pod(name: str, ns: str, group: str, total: int, cpu: str = "1") -> dict:
    """A member of a pod group as pykueue's webhook stores it (gate, role hash)."""
    from app.integrations.pod.webhook_rules import role_hash

    p = gated_pod(name, ns, "lq", cpu)
    p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = group
    p["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": str(total)}
    p["metadata"]["annotations"]["kueue.x-k8s.io/role-hash"] = role_hash(p)
    return p


def group_workload(lab: LabHandle, ns: str, group: str) -> dict | None:
    r = lab.kubectl("get", "workloads.kueue.x-k8s.io", group, "-n", ns, "-o", "json",
                    check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def test_pod_groups_are_admitted_whole_or_wait_whole(rlab: LabHandle, manager) -> None:
    ns = namespace(rlab, "groups")
    cq = unique("groups-cq")
    make_queue(rlab, cq, (ns,), cpu="4")
    try:
        # 6 x 1 cpu in a 4-cpu queue: one Workload, never admitted, every pod gated.
        apply(rlab, *[group_pod(f"big-{i}", ns, "big", 6) for i in range(6)])
        qr = wait_for(lambda: (w := group_workload(rlab, ns, "big"))
                      and (c := cond(w, "QuotaReserved")) and c["status"] == "False" and c,
                      30, "group big pending")
        assert "cpu" in qr["message"]
        assert group_workload(rlab, ns, "big")["spec"]["podSets"][0]["count"] == 6
        # A group missing a member gets no Workload, and says why on its pod.
        apply(rlab, *[group_pod(f"short-{i}", ns, "short", 3) for i in range(2)])
        wait_for(lambda: any(e["reason"] == "ErrWorkloadCompose" and "2 of 3" in e["message"]
                             for e in rlab.get("events", "-n", ns)["items"]), 30,
                 "short says it waits for its third pod")
        assert group_workload(rlab, ns, "short") is None
        # 3 x 1 cpu fits: all three ungated and placed together.
        apply(rlab, *[group_pod(f"fit-{i}", ns, "fit", 3) for i in range(3)])
        wait_for(lambda: is_admitted(group_workload(rlab, ns, "fit")), 30, "fit admitted")
        wait_for(lambda: all(GATE not in gates(rlab, ns, f"fit-{i}")
                             and rlab.get("pod", f"fit-{i}", "-n", ns)["spec"].get("nodeName")
                             for i in range(3)), 60, "the three fit pods placed")
        assert all(GATE in gates(rlab, ns, f"big-{i}") for i in range(6))
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")


def test_a_pod_group_named_like_a_jobs_workload_gets_nothing_of_it(
        rlab: LabHandle, manager) -> None:
    """Attack found in review: a group named after an admitted Job's Workload used to finish
    that Workload (its quota released while the Job ran). Now the group just waits."""
    from tests.integration.reconciler_support import job_manifest, workload_of

    ns = namespace(rlab, "clash")
    cq = unique("clash-cq")
    make_queue(rlab, cq, (ns,), cpu="4")
    try:
        apply(rlab, job_manifest("victim", ns, "lq", parallelism=2, cpu="1", duration="600s"))
        wl = wait_for(lambda: (w := workload_of(rlab, ns, "victim")) and is_admitted(w) and w,
                      30, "victim admitted")
        name = wl["metadata"]["name"]
        apply(rlab, group_pod("thief", ns, name, 1))
        wait_for(lambda: any(e["reason"] == "WorkloadNameConflict"
                             for e in rlab.get("events", "-n", ns)["items"]), 30,
                 "the group says the name is taken")
        after = workload_of(rlab, ns, "victim")
        assert is_admitted(after) and not cond(after, "Finished"), after["status"]
        assert after["metadata"]["uid"] == wl["metadata"]["uid"]
        assert GATE in gates(rlab, ns, "thief")
    finally:
        rlab.kubectl("delete", "namespace", ns, "--wait=false")
        rlab.kubectl("delete", "clusterqueue", cq, "--wait=false")
