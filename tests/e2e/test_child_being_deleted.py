"""review25 F5 on the lab: a JobSet's child Job is being deleted under its tenant's own
finalizer while the JobSet is not, and the JobSet is preempted. JobSet v0.11.1 suspends the
child, but the Job controller kills no pod of a Job being deleted, and before the fix the
child rule left a suspended child (or, its parent's Workload still Admitted while the
eviction was under way, a running one) alone: the child's pod ran on, the JobSet's evicted
Workload kept the quota (its pods are counted from the Pod store) and the preemptor waited for
good."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.e2e.test_break24_findings import (
    HOLD,
    PRIORITY,
    gpu_pods,
    high_replaces_low,
    preemptible_queue,
)
from tests.e2e.test_jobset import _long_jobset
from tests.integration.test_operators import operators_running
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def jobset_operator(lab: LabHandle, pykueue_in_lab: object) -> Iterator[set[str]]:
    with operators_running(lab, ["jobset"]) as (running, _):
        yield running


def test_a_preempted_jobsets_child_being_deleted_under_a_tenants_finalizer_stops(
        lab: LabHandle, jobset_operator: set[str]) -> None:
    """A 2-GPU ClusterQueue that preempts lower priorities: JobSet ``low`` (2 child Jobs of
    one 1-GPU pod) runs; its tenant puts a finalizer of its own on child Job
    ``low-workers-0`` and deletes it (background: its pod stays while the Job does).
    JobSet ``high`` (priority 1000, same shape) preempts ``low``: ``low``'s GPU pods must go
    and ``high``'s 2 run within 90 s, the Running GPU pods never asking more than the
    queue's 2 GPUs."""
    if "jobset" not in jobset_operator:
        pytest.skip("jobset not built: run `make operators`")
    ns, cq, high = preemptible_queue(lab, "delchild")
    child = "low-workers-0"
    try:
        lab.apply(_long_jobset("low", ns, 2))
        wait_for(lambda: len(gpu_pods(lab, ns, "JobSet", "low")) == 2, 120,
                 "low's 2 GPU pods Running")
        lab.kubectl("patch", "job", child, "-n", ns, "--type=merge", "-p",
                    json.dumps({"metadata": {"finalizers": [HOLD]}}))
        lab.kubectl("delete", "job", child, "-n", ns, "--wait=false")
        assert lab.get("job", child, "-n", ns)["metadata"].get("deletionTimestamp")
        assert len(gpu_pods(lab, ns, "JobSet", "low")) == 2  # its pod runs on meanwhile
        body = json.loads(_long_jobset("high", ns, 2))
        body["metadata"]["labels"][PRIORITY] = high
        lab.apply(json.dumps(body))
        high_replaces_low(lab, ns, "JobSet", lambda: "child's suspend "
                          f"{lab.get('job', child, '-n', ns)['spec'].get('suspend')}; ")
        events = lab.get("events", "-n", ns, "--field-selector",
                         f"involvedObject.name={child}")["items"]
        assert any(e.get("reason") == "DeletedPods" for e in events), \
            [(e.get("reason"), e.get("message")) for e in events]
    finally:
        lab.kubectl("patch", "job", child, "-n", ns, "--type=json", "-p",
                    '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False)
        lab.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        lab.kubectl("delete", "workloadpriorityclass", high, "--wait=false", check=False)
