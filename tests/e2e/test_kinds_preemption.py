"""Issue 17 e2e: preemption by reclaim for every Pod-based kind, through pykueue's real
webhooks and reconciler on the lab; a StatefulSet's ``scale`` subresource; a pod group's
excess pods.

Each reclaim test builds a cohort of two fresh ClusterQueues of 4 A100s each (the lab's one
8-GPU node ``a100-0``): A may borrow, B reclaims (``reclaimWithinCohort: Any``). A borrows B's
idle quota; B then submits; A's Workload is evicted whole (its pods deleted, as Kueue stops
Pods and pod groups), B runs, and A's pods, recreated by their owner (the user for plain Pods),
wait gated until B is gone, then run again.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.e2e.test_workload_kinds import gated, gpu_container, live, pods
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402

pytestmark = pytest.mark.lab
QUEUE = "kueue.x-k8s.io/queue-name"
GROUP = "kueue.x-k8s.io/pod-group-name"
TOTAL = "kueue.x-k8s.io/pod-group-total-count"
WL = "workloads.kueue.x-k8s.io"


@contextmanager
def cohort(lab: LabHandle, prefix: str) -> Iterator[tuple[str, str]]:
    """Namespaces (a, b), each with LocalQueue ``lq``: A's ClusterQueue (4 A100s, may borrow
    4) and B's (4 A100s, reclaims within the cohort). Deleted after, waiting for the pods."""
    tag = uuid.uuid4().hex[:6]
    ns_a, ns_b, co = f"{prefix}-a-{tag}", f"{prefix}-b-{tag}", f"{prefix}-co-{tag}"
    items: list[dict[str, Any]] = []
    for ns, reclaim in ((ns_a, False), (ns_b, True)):
        lab.create_namespace(ns)
        spec: dict[str, Any] = {
            "namespaceSelector": {}, "cohortName": co,
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "a100-flavor", "resources": [
                    {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 4}]}]}]}
        if reclaim:
            spec["preemption"] = {"reclaimWithinCohort": "Any"}
        items += [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                   "metadata": {"name": f"{ns}-cq"}, "spec": spec},
                  {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                   "metadata": {"name": "lq", "namespace": ns},
                   "spec": {"clusterQueue": f"{ns}-cq"}}]
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    try:
        yield ns_a, ns_b
    finally:
        for ns in (ns_a, ns_b):
            lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
            lab.kubectl("delete", "clusterqueue", f"{ns}-cq", "--wait=false", check=False)


def running(lab: LabHandle, ns: str, selector: str) -> int:
    """Live pods matching ``selector`` Running on the A100 node."""
    return sum(1 for p in live(pods(lab, ns, selector))
               if p["spec"].get("nodeName") == "a100-0" and p["status"].get("phase") == "Running")


def events(lab: LabHandle, ns: str, reason: str) -> list[dict[str, Any]]:
    return lab.get("events", "-n", ns, "--field-selector", f"reason={reason}")["items"]


def preempted(lab: LabHandle, ns: str, workload: str) -> bool:
    """The scheduling loop's Preempted event names ``workload`` (it outlives the object)."""
    return any(e["involvedObject"].get("name") == workload
               for e in events(lab, ns, "Preempted"))


def pending_message(lab: LabHandle, ns: str, workload: str) -> str:
    """The QuotaReserved=False message of ``workload`` (``""``: none, or no Workload yet)."""
    r = lab.kubectl("get", WL, workload, "-n", ns, "-o", "json", check=False)
    if r.returncode != 0:
        return ""
    return next((c.get("message", "") for c in json.loads(r.stdout).get("status", {}).get(
        "conditions", []) if c["type"] == "QuotaReserved" and c["status"] == "False"), "")


def deployment(ns: str, name: str, replicas: int) -> str:
    return json.dumps({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [gpu_container()],
                                       "terminationGracePeriodSeconds": 0}}}})


def statefulset(ns: str, name: str, replicas: int) -> str:
    return json.dumps({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
        "spec": {"replicas": replicas, "serviceName": name,
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [gpu_container()],
                                       "terminationGracePeriodSeconds": 0}}}})


def plain_pod(ns: str, name: str, gpus: int, group: tuple[str, int] | None = None) -> dict:
    labels = {QUEUE: "lq", "app": group[0] if group else name}
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels}
    if group:
        labels[GROUP] = group[0]
        meta["annotations"] = {TOTAL: str(group[1])}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [gpu_container(gpus)], "terminationGracePeriodSeconds": 0}}


def pod_group(ns: str, group: str, total: int, names: range) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        plain_pod(ns, f"{group}-{i}", 1, (group, total)) for i in names]})


def test_a_borrowing_statefulset_is_reclaimed_whole_by_a_deployment_and_comes_back(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    with cohort(lab, "rsts") as (ns_a, ns_b):
        lab.apply(statefulset(ns_a, "ring", 6))  # 6 of A's 4 + B's idle 4: borrows 2
        wait_for(lambda: running(lab, ns_a, "app=ring") == 6, 180, "6 ring pods Running")
        # B's Deployment: two pods fit the 2 free GPUs; the third reclaims.
        lab.apply(deployment(ns_b, "serve", 4))
        wait_for(lambda: running(lab, ns_b, "app=serve") == 4, 180, "4 serve pods Running")
        assert preempted(lab, ns_a, "statefulset-ring")
        # A's group went whole: its recreated pods wait gated (6 do not fit in the 4 left).
        wait_for(lambda: (ring := live(pods(lab, ns_a, "app=ring")))
                 and all(gated(p) for p in ring), 90, "ring's recreated pods gated")
        wait_for(lambda: "nvidia.com/gpu" in pending_message(lab, ns_a, "statefulset-ring"),
                 60, "statefulset-ring pending on GPUs")
        assert running(lab, ns_a, "app=ring") == 0
        # `kubectl scale` (the scale subresource) of the queued StatefulSet: N -> M refused,
        # as a patch of spec.replicas is; nothing changed.
        r = lab.kubectl("scale", "statefulset", "ring", "-n", ns_a, "--replicas=4", check=False)
        assert r.returncode != 0 and "scale it to 0 first, then to 4" in r.stderr, r.stderr
        assert lab.get("statefulset", "ring", "-n", ns_a)["spec"]["replicas"] == 6
        # B finishes (its Deployment goes): A's group is admitted again, whole.
        lab.kubectl("delete", "deployment", "serve", "-n", ns_b)
        wait_for(lambda: running(lab, ns_a, "app=ring") == 6, 180, "ring back: 6 Running")
        # Through zero, `kubectl scale` is allowed: the group's quota frees.
        lab.kubectl("scale", "statefulset", "ring", "-n", ns_a, "--replicas=0")
        wait_for(lambda: not live(pods(lab, ns_a, "app=ring")), 120, "ring scaled to 0")


def test_a_borrowing_pod_group_is_evicted_whole_by_a_plain_pod_and_readmitted(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    with cohort(lab, "rgrp") as (ns_a, ns_b):
        lab.apply(pod_group(ns_a, "grp", 6, range(6)))
        wait_for(lambda: running(lab, ns_a, "app=grp") == 6, 120, "6 grp pods Running")
        # B's plain Pod of 4 GPUs: 2 are free, it reclaims A's borrowed 2: the whole group.
        lab.apply(json.dumps(plain_pod(ns_b, "big", 4)))
        wait_for(lambda: running(lab, ns_b, "app=big") == 1, 120, "big Running")
        assert preempted(lab, ns_a, "grp")
        wait_for(lambda: not live(pods(lab, ns_a, "app=grp")), 60, "every grp pod deleted")
        assert len(events(lab, ns_a, "Stopped")) >= 6
        # The user recreates the group, one pod too many: the newest is deleted as excess
        # (Kueue), the 6 others wait gated for the quota B holds.
        lab.apply(pod_group(ns_a, "grp", 6, range(7)))
        wait_for(lambda: any(e["involvedObject"].get("name") == "grp-6"
                             for e in events(lab, ns_a, "ExcessPodDeleted")), 60,
                 "grp-6 deleted as excess")
        wait_for(lambda: len(g := live(pods(lab, ns_a, "app=grp"))) == 6
                 and all(gated(p) for p in g), 60, "6 grp pods gated")
        assert running(lab, ns_a, "app=grp") == 0
        lab.kubectl("delete", "pod", "big", "-n", ns_b)
        wait_for(lambda: running(lab, ns_a, "app=grp") == 6, 120, "grp back: 6 Running")
        assert {p["metadata"]["name"] for p in live(pods(lab, ns_a, "app=grp"))} == \
            {f"grp-{i}" for i in range(6)}


def test_borrowing_deployment_pods_are_reclaimed_by_a_pod_group_and_come_back(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    with cohort(lab, "rdep") as (ns_a, ns_b):
        lab.apply(deployment(ns_a, "web", 6))
        wait_for(lambda: running(lab, ns_a, "app=web") == 6, 120, "6 web pods Running")
        before = {p["metadata"]["name"] for p in live(pods(lab, ns_a, "app=web"))}
        # B's group of 4: 2 GPUs free, 2 of A's single-pod Workloads are reclaimed.
        lab.apply(pod_group(ns_b, "gang", 4, range(4)))
        wait_for(lambda: running(lab, ns_b, "app=gang") == 4, 120, "4 gang pods Running")
        assert len({e["involvedObject"]["name"] for e in events(lab, ns_a, "Preempted")}) == 2
        # The Deployment replaced the 2 deleted pods; the replacements wait gated.
        wait_for(lambda: len(w := live(pods(lab, ns_a, "app=web"))) == 6
                 and sum(map(gated, w)) == 2, 90, "2 web replacements gated")
        assert running(lab, ns_a, "app=web") == 4
        assert len(before & {p["metadata"]["name"] for p in live(pods(lab, ns_a, "app=web"))}) \
            == 4
        lab.kubectl("delete", "pods", "-l", "app=gang", "-n", ns_b)
        wait_for(lambda: running(lab, ns_a, "app=web") == 6, 120, "web back: 6 Running")


def test_a_borrowing_plain_pod_is_reclaimed_by_a_statefulset(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    with cohort(lab, "rpod") as (ns_a, ns_b):
        lab.apply(json.dumps(plain_pod(ns_a, "solo", 6)))
        wait_for(lambda: running(lab, ns_a, "app=solo") == 1, 120, "solo Running")
        wl_name = next(w["metadata"]["name"] for w in lab.get(WL, "-n", ns_a)["items"]
                       if w["metadata"]["ownerReferences"][0]["name"] == "solo")
        lab.apply(statefulset(ns_b, "ring", 4))
        wait_for(lambda: running(lab, ns_b, "app=ring") == 4, 180, "4 ring pods Running")
        assert preempted(lab, ns_a, wl_name)
        # Kueue stops a plain Pod by deleting it: no retry, its Workload goes with it.
        wait_for(lambda: lab.kubectl("get", "pod", "solo", "-n", ns_a, check=False)
                 .returncode != 0, 60, "solo deleted")
        wait_for(lambda: not lab.get(WL, "-n", ns_a)["items"], 60, "solo's Workload gone")


def test_a_new_pod_group_with_excess_pods_loses_the_newest_and_runs(
        lab: LabHandle, pykueue_in_lab: labmod.Lab) -> None:
    with cohort(lab, "xs") as (ns_a, _):
        lab.apply(pod_group(ns_a, "trio", 2, range(2)))
        lab.apply(pod_group(ns_a, "trio", 2, range(2, 3)))  # created last: the excess one
        wait_for(lambda: running(lab, ns_a, "app=trio") == 2, 120, "2 trio pods Running")
        assert {p["metadata"]["name"] for p in live(pods(lab, ns_a, "app=trio"))} == \
            {"trio-0", "trio-1"}
        (ev,) = events(lab, ns_a, "ExcessPodDeleted")
        assert ev["involvedObject"]["name"] == "trio-2" and ev["message"] == "Excess pod deleted"
        wl = lab.get(WL, "trio", "-n", ns_a)
        assert [ps["count"] for ps in wl["spec"]["podSets"]] == [2]
