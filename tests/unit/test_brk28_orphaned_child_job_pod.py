"""brk28 (H): the pod of a JobSet's child Job deleted with ``--cascade=orphan`` while the
JobSet lives: the garbage collector (one of ``webhook.owner_reference_releasers``) removes
its controller reference, the JobSet operator makes the Job again (a new uid) and its Job
controller a new pod beside it (selector: the new ``controller-uid``). The old pod carries
the JobSet's name and uid labels and the podset label, no controller, and the JobSet is not
gone: ``pod_of`` counts it for nothing (``owner_gone`` false), so it runs on uncounted, and a
preemption of the JobSet (its Jobs suspended) does not stop it either. Lab reproducer:
tests/e2e/test_brk28_child_job_orphan.py."""

from __future__ import annotations

import pytest

from app.integrations.framework import pod_of
from app.integrations.jobset.jobset import KIND as JOBSET
from app.kube.client import JOBS, PODS, WORKLOADS
from app.kube.context import CHILD_JOBS, POD, WL
from tests.unit.fake_ctx import FakeCtx


def _orphaned_pod() -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "train-workers-0-0-abcde", "namespace": "ns", "uid": "pod-uid",
        "labels": {"jobset.sigs.k8s.io/jobset-name": "train",
                   "jobset.sigs.k8s.io/jobset-uid": "js-uid",
                   "batch.kubernetes.io/job-name": "train-workers-0",
                   "batch.kubernetes.io/controller-uid": "old-job-uid",
                   "kueue.x-k8s.io/podset": "workers"}},
        "spec": {"nodeName": "a100-0"}, "status": {"phase": "Running"}}


@pytest.mark.xfail(strict=True, reason="brk28 H: a running pod of an admitted JobSet whose "
                   "child Job was deleted with --cascade=orphan (JobSet still there) counts "
                   "for nothing and nothing stops it")
def test_an_orphaned_child_jobs_running_pod_still_counts_for_its_jobset() -> None:
    ctx = FakeCtx({POD: PODS, WL: WORKLOADS, "job": JOBS, CHILD_JOBS: JOBS}, {})
    assert pod_of(JOBSET, _orphaned_pod(), "train", "js-uid", ctx=ctx)
