"""brk28 (M): a tenant that may patch ``rayclusters/status`` (the lab tenant of
tests/e2e/test_jobset.py ``tenant``: ``ray.io`` ``*``) writes ``status.conditions:
[RayClusterSuspended True]`` and ``state: suspended`` (every 0.1 s, KubeRay resets it while
the cluster runs); once pykueue suspends its preempted cluster, KubeRay v1.6.0 reads it as
already suspended and deletes no pod (``reconcilePods``). Before, pykueue counted none of the
Running pods then (kray28's rule) and released the quota while they ran on; now they count
and pykueue deletes them (``RayCluster.operator_stopped``, ``framework.stop_pods_left``), so
the quota goes only once no pod runs. Unit: tests/unit/test_brk28_ray_status_forged.py."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.e2e.test_jobset import condition, owned_workload, tenant
from tests.e2e.test_ray import (
    kuberay,  # noqa: F401 - fixture
    placed,
    pykueue_with_kuberay,  # noqa: F401 - fixture
    ray_queue,
    rayjob,
)
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab

FORGED = json.dumps({"status": {"state": "suspended", "conditions": [
    {"type": "RayClusterSuspended", "status": "True", "reason": "RayClusterSuspended",
     "message": "", "lastTransitionTime": "2026-12-06T14:00:00Z"}]}})


def test_a_forged_suspended_status_keeps_no_pod_running_after_the_release(
        lab: LabHandle, pykueue_with_kuberay: set[str]) -> None:  # noqa: F811
    with ray_queue(lab, "brk28-forge", 1) as ns:
        as_tenant = tenant(lab, ns)
        job = json.loads(rayjob("c", ns, 1))
        lab.apply(json.dumps({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                              "metadata": job["metadata"],
                              "spec": job["spec"]["rayClusterSpec"]}), *as_tenant)
        wl = wait_for(lambda: (w := owned_workload(lab, ns, "RayCluster", "c"))
                      and (c := condition(w, "Admitted")) and c["status"] == "True" and w,
                      60, "c's Workload admitted")
        wait_for(lambda: placed(lab, ns, 1), 90, "c's head and worker running")
        stop = threading.Event()

        def forge() -> None:
            while not stop.is_set():
                lab.kubectl(*as_tenant, "patch", "raycluster", "c", "-n", ns,
                            "--subresource=status", "--type=merge", "-p", FORGED,
                            check=False)
                time.sleep(0.1)
        t = threading.Thread(target=forge, daemon=True)
        t.start()
        try:
            time.sleep(2)
            # The preemption, as an admin's deactivation: pykueue evicts and suspends c.
            lab.kubectl("patch", "workloads.kueue.x-k8s.io", wl["metadata"]["name"], "-n", ns,
                        "--type=merge", "-p", '{"spec": {"active": false}}')
            wait_for(lambda: lab.get("raycluster", "c", "-n", ns)["spec"].get("suspend"), 30,
                     "c suspended by pykueue")
            time.sleep(5)
        finally:
            stop.set()
            t.join(10)
        seen = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 40:
            w = owned_workload(lab, ns, "RayCluster", "c") or {}
            running = [p["metadata"]["name"] for p in lab.get("pods", "-n", ns)["items"]
                       if p["status"].get("phase") == "Running"
                       and not p["metadata"].get("deletionTimestamp")]
            seen.append((round(time.monotonic() - t0), bool((w.get("status") or {})
                                                             .get("admission")), running))
            if not seen[-1][1] and not seen[-1][2]:
                break  # released with no pod left: nothing forges any more to undo it
            time.sleep(2)
        print("\n(t, Workload holds quota, Running pods not being deleted):")
        for s in seen[::3]:
            print(" ", s)
        rc = lab.get("raycluster", "c", "-n", ns)
        print("cluster status:", rc.get("status", {}).get("state"),
              [(c["type"], c["status"]) for c in rc.get("status", {}).get("conditions") or []])
        released_while_running = [s for s in seen if not s[1] and s[2]]
        assert not released_while_running, released_while_running[:3]
        assert not seen[-1][1] and not seen[-1][2], seen[-1]  # its pods gone, then released
        assert any(e["involvedObject"].get("name") == "c" for e in lab.get(
            "events", "-n", ns, "--field-selector", "reason=DeletedPods")["items"])
