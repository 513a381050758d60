"""Only the garbage collector (and the built-in controllers that release a pod, and pykueue)
may remove the controller ownerReference of a pod of an admitted job (brk27 M3): a tenant
that freed its running Spark executors from their driver had them run on uncounted once the
application was preempted, a pod without a controller counting only for an orphaned
Workload. ``kubectl delete --cascade=orphan`` goes on working: the lab's
kube-controller-manager runs its garbage collector as ``system:kube-controller-manager``
(``--use-service-account-credentials=false``), one of ``webhook.owner_reference_releasers``.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_pod_owner_reference_escape import running
from tests.e2e.test_workload_kinds import QUEUE, gpu_queue, long_job
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


def controllers(lab: LabHandle, ns: str, name: str) -> list[str]:
    """The kinds of pod ``name``'s controller ownerReferences ([] without one)."""
    refs = lab.get("pod", name, "-n", ns)["metadata"].get("ownerReferences") or []
    return [o["kind"] for o in refs if o.get("controller")]


def test_a_tenant_cannot_free_its_pod_but_the_garbage_collector_orphans_it(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """Before: the tenant's removal of the Job reference from its Running pod was allowed
    (the Job controller adopted the pod back; a driver pod adopts no executor). Now refused;
    the Job deleted with ``--cascade=orphan`` leaves its pod without the reference."""
    from tests.e2e.test_jobset import tenant

    ns, cq = gpu_queue(lab, "ownrel", 1)
    try:
        as_tenant = tenant(lab, ns)
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=long_job("j", ns, {QUEUE: "lq"}))
        wait_for(lambda: len(running(lab, ns)) == 1, 60, "the Job's pod Running")
        name = running(lab, ns)[0]["metadata"]["name"]
        for patch in ([{"op": "remove", "path": "/metadata/ownerReferences"}],
                      [{"op": "replace", "path": "/metadata/ownerReferences/0/controller",
                        "value": False}]):
            r = lab.kubectl(*as_tenant, "patch", "pod", name, "-n", ns, "--type=json",
                            "-p", json.dumps(patch), check=False)
            assert r.returncode != 0, patch
            assert "metadata.ownerReferences" in r.stderr and "cannot be removed" in r.stderr
            assert "system:kube-controller-manager" in r.stderr, r.stderr
        assert controllers(lab, ns, name) == ["Job"]
        # The garbage collector orphans the pod of a Job deleted with --cascade=orphan.
        lab.kubectl(*as_tenant, "delete", "job", "j", "-n", ns, "--cascade=orphan")
        wait_for(lambda: lab.kubectl("get", "job", "j", "-n", ns, check=False).returncode,
                 30, "the Job gone")
        wait_for(lambda: not lab.get("pod", name, "-n", ns)["metadata"].get(
            "ownerReferences"), 30, "the pod's Job reference removed")
        assert [p["metadata"]["name"] for p in running(lab, ns)] == [name]
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
