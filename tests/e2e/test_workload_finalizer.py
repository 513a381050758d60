"""A deleted Job's quota is held through a restart of pykueue while its pods run out their
grace period (``jobs.workload_finalizer``: the Workload carries Kueue's
``kueue.x-k8s.io/resource-in-use`` finalizer; docs/security.md), on the lab. Without it the
garbage collector deletes the Workload with the Job, the hold lives in pykueue's memory, and a
restart meanwhile forgets it: the next Job was admitted beside the pods still running."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.e2e.test_deleted_job_quota_held import (
    QUOTA,
    b_runs,
    cq_gpu_usage,
    held_job,
    job_workload,
    pending_on_gpus,
    pods_of,
    release,
)
from tests.e2e.test_job_being_deleted_stopped import HOLD, QUEUE, running, two_pod_job
from tests.e2e.test_workload_kinds import gpu_queue
from tests.labfixture import ROOT, WORKLOAD_GC_PROBE, LabHandle, wait_for, wait_gc_watches

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import scenario  # noqa: E402

pytestmark = pytest.mark.lab
IN_USE = "kueue.x-k8s.io/resource-in-use"
ENV = {"PYKUEUE_JOBS__WORKLOAD_FINALIZER": "true"}


@contextmanager
def pykueue_finalizing(lab: LabHandle) -> Iterator[labmod.Lab]:
    """pykueue restarted with ``jobs.workload_finalizer`` on for the block; stopped after."""
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    labmod.pykueue_down(handle)
    scenario.prepare(handle)
    labmod.pykueue_up(handle, extra_env=ENV)
    try:
        yield handle
    finally:
        labmod.pykueue_down(handle)


@pytest.fixture(scope="module")
def finalizing(lab: LabHandle) -> Iterator[labmod.Lab]:
    """pykueue with ``jobs.workload_finalizer`` on; stopped after the module."""
    with pykueue_finalizing(lab) as handle:
        yield handle


def test_a_deleted_jobs_quota_is_held_through_a_restart_until_its_pods_are_gone(
        lab: LabHandle, finalizing: labmod.Lab) -> None:
    """A 2-GPU ClusterQueue: Job ``a`` (2 one-GPU pods, kept Running while deleted by the
    test's finalizer) runs; its Workload carries ``resource-in-use``. ``a`` is deleted: the
    Workload stays, being deleted, admitted, while the pods run. pykueue is restarted. Job
    ``b`` (2 GPUs) waits (pending on every look, the ClusterQueue showing a's 2 GPUs) while
    a's pods run; once they are gone, a's Workload goes and ``b`` runs. The namespace's
    deletion completes (no Workload left stuck by the finalizer)."""
    ns, cq = gpu_queue(lab, "fin", QUOTA)
    try:
        lab.apply(held_job("a", ns))
        wait_for(lambda: len(running(pods_of(lab, ns, "a"), "a")) == 2, 90, "a's 2 pods Running")
        wl = job_workload(lab, ns, "a")
        assert wl is not None and IN_USE in (wl["metadata"].get("finalizers") or []), wl
        name = wl["metadata"]["name"]
        wait_gc_watches(lab.kubectl, ns, WORKLOAD_GC_PROBE)  # it deletes a's Workload
        lab.kubectl("delete", "job", "a", "-n", ns, "--wait=false")
        wait_for(lambda: lab.kubectl("get", "job", "a", "-n", ns, check=False).returncode,
                 60, "Job a gone")

        def deleting() -> bool:
            w = lab.get("workloads.kueue.x-k8s.io", name, "-n", ns)
            return bool(w["metadata"].get("deletionTimestamp"))
        wait_for(deleting, 60, "a's Workload being deleted, kept by the finalizer")

        labmod.pykueue_down(finalizing)
        labmod.pykueue_up(finalizing, extra_env=ENV)

        lab.apply(two_pod_job("b", ns, {QUEUE: "lq"}))
        looks: list[str] = []

        def b_waits() -> bool:
            assert len(running(pods_of(lab, ns, "a"), "a")) == 2
            pending_on_gpus(job_workload(lab, ns, "b"), looks, "a's pods still run")
            assert not running(pods_of(lab, ns, "b"), "b")
            return len(looks) >= 5
        wait_for(b_waits, 90, "b's Workload pending on 5 looks after the restart")
        assert cq_gpu_usage(lab, cq) == (QUOTA, 1), lab.get("clusterqueue", cq).get("status")

        release(lab, pods_of(lab, ns, "a"))
        wait_for(lambda: not pods_of(lab, ns, "a"), 60, "a's pods gone")
        wait_for(lambda: lab.kubectl("get", "workloads.kueue.x-k8s.io", name, "-n", ns,
                                     check=False).returncode, 60, "a's Workload gone")
        b_runs(lab, ns, cq, 0, "b admitted and its 2 pods Running once a's pods are gone")
    finally:
        release(lab, [p for p in lab.get("pods", "-n", ns)["items"]
                      if HOLD in (p["metadata"].get("finalizers") or [])], keep_others=False)
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
    wait_for(lambda: lab.kubectl("get", "namespace", ns, check=False).returncode, 90,
             f"namespace {ns} deleted (its Workloads' finalizers taken off)")
