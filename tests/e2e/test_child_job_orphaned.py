"""brk28 (H), closed: the orphaning delete of an owner between a pod and its queued object,
here a JobSet's child batch Job (docs/security.md, the table of what a tenant tries).

A tenant (``edit``) deletes the child Job ``train-workers-0`` of its admitted JobSet (1 Job x
1 GPU) with ``--cascade=orphan``: the garbage collector (a ``webhook.owner_reference_releasers``
identity) removes the pod's controller reference; the JobSet operator makes the Job again
(a new uid), whose Job controller does not adopt the old pod (its selector is the new
``controller-uid``) and starts a new one. Before: the old pod ran on beside it, uncounted (two
GPU pods Running on an admission of one, and still Running after the Workload was
deactivated). Now the old pod is a stray of the JobSet (``framework.stray_pod``): the pod
event of the collector's update wakes the JobSet's reconcile, which deletes it (Event
``DeletedOrphanedPods``), and the new pod runs alone."""

from __future__ import annotations

import time

import pytest

from tests.e2e.test_jobset import (  # noqa: F401  (fixtures)
    _long_jobset,
    admitted,
    jobset_operator,
    pykueue_with_jobset,
    queue,
    tenant,
)
from tests.e2e.test_kinds_preemption import events
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


def _pods(lab: LabHandle, ns: str) -> list[dict]:
    return lab.get("pods", "-n", ns, "-l", "jobset.sigs.k8s.io/jobset-name=train")["items"]


def _running(pods: list[dict]) -> list[dict]:
    """The pods Running and not being deleted (those on a GPU for good)."""
    return [p for p in pods if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]


def test_a_jobset_child_job_orphaned_does_not_run_twice(lab: LabHandle,
                                                        pykueue_with_jobset) -> None:  # noqa: F811
    with queue(lab, "orphan-child", 2) as ns:
        as_tenant = tenant(lab, ns)
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=_long_jobset("train", ns, 1))
        wait_for(lambda: admitted(lab, ns, "JobSet", "train"), 60, "train admitted")
        old = wait_for(lambda: _running(_pods(lab, ns)), 90, "train-workers-0's pod")[0]
        old_uid = old["metadata"]["uid"]
        t0 = time.monotonic()
        lab.kubectl(*as_tenant, "delete", "job", "train-workers-0", "-n", ns,
                    "--cascade=orphan")
        # Sample until the old pod is deleted (or marked) and the new one runs: the
        # deletion's window is how long the old pod ran without a controller.
        peak, overlap_from, overlap, deleted_at, samples = 0, None, 0.0, None, []
        new: dict | None = None
        while time.monotonic() - t0 < 60:
            pods = _pods(lab, ns)
            now = round(time.monotonic() - t0, 2)
            run = _running(pods)
            mine = [p for p in pods if p["metadata"]["uid"] == old_uid]
            if deleted_at is None and (not mine or mine[0]["metadata"].get("deletionTimestamp")):
                deleted_at = now
            peak = max(peak, len(run))
            if len(run) > 1:
                overlap_from = overlap_from if overlap_from is not None else now
            elif overlap_from is not None:
                overlap += now - overlap_from
                overlap_from = None
            samples.append((now, len(run), [p["metadata"]["name"] for p in run]))
            new = next((p for p in run if p["metadata"]["uid"] != old_uid), None)
            if deleted_at is not None and new is not None and len(run) == 1:
                break
            time.sleep(0.25)
        print(f"\nold pod deleted {deleted_at} s after the orphaning delete; the new pod "
              f"Running at {samples[-1][0]} s; peak {peak} Running, 2 Running for "
              f"{overlap:.2f} s")
        for s in samples[::4]:
            print(" ", s)
        assert deleted_at is not None, "the orphaned pod was never deleted"
        assert new is not None, "the JobSet's new pod never ran"
        # Deleted at once (the pod event wakes the reconcile), before or soon after the
        # replacement runs: at most one pod Running outside such a window.
        assert deleted_at < 10, deleted_at
        assert overlap < 5, f"two pods Running for {overlap:.2f} s"
        evs = events(lab, ns, "DeletedOrphanedPods")
        assert any(e["involvedObject"].get("name") == "train"
                   and e["involvedObject"].get("kind") == "JobSet" for e in evs), evs
        # Then the JobSet is deactivated: its Job is suspended, its (one) pod deleted, and
        # nothing runs on with the quota released.
        wl = admitted(lab, ns, "JobSet", "train")
        assert wl is not None
        lab.kubectl("patch", "workloads.kueue.x-k8s.io", wl["metadata"]["name"], "-n", ns,
                    "--type=merge", "-p", '{"spec": {"active": false}}')
        wait_for(lambda: not [p for p in _pods(lab, ns)
                              if p["status"].get("phase") in ("Pending", "Running")
                              and not p["metadata"].get("deletionTimestamp")],
                 60, "no pod of train left running after the deactivation")
