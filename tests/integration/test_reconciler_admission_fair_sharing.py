"""Admission Fair Sharing on the real API server with Job-less Workloads (the test plays
their creator and marks them Finished): a reconciler with ``admission_fair_sharing`` enabled
gives the CPU that team A's flood frees to team B, which shares A's ClusterQueue, and writes
each LocalQueue's ``status.fairSharing.admissionFairSharingStatus``."""

from __future__ import annotations

import pytest

from app.config import AdmissionFairSharingSettings
from tests.integration.reconciler_support import (
    ManagerThread,
    apply,
    finish_workload,
    make_queue,
    namespace,
    rlab_fixture,  # noqa: F401 - fixture
    settings_for,
    unique,
    wl,
    workload_manifest,
)
from tests.integration.test_reconciler_cases import admitted, cleanup
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab


def _consumed(lab: LabHandle, ns: str, lq: str) -> dict:
    st = lab.get("localqueue", lq, "-n", ns).get("status") or {}
    afs = (st.get("fairSharing") or {}).get("admissionFairSharingStatus") or {}
    return afs.get("consumedResources") or {}


def _admitted_if(lab: LabHandle, ns: str, names: list[str], n: int) -> list[str] | None:
    """The admitted ones among ``names`` when there are exactly ``n`` of them, else None."""
    got = [name for name in names if admitted(wl(lab, ns, name))]
    return got if len(got) == n else None


def test_a_flood_from_one_local_queue_does_not_starve_another(rlab: LabHandle) -> None:
    ns = namespace(rlab, "afs")
    cq = unique("shared")
    make_queue(rlab, cq, (ns,), cpu="2", lq="qa",
               extra={"admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}})
    apply(rlab, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                 "metadata": {"name": "qb", "namespace": ns}, "spec": {"clusterQueue": cq}})
    settings = settings_for(rlab).model_copy(update={
        "admission_fair_sharing": AdmissionFairSharingSettings(
            enable=True, usage_half_life_time="10m", usage_sampling_interval="1m")})
    mt = ManagerThread(settings).start()
    try:
        team_a = [f"a{i}" for i in range(6)]
        apply(rlab, *[workload_manifest(a, ns, "qa", cpu="1") for a in team_a])
        # The six are created within about one creationTimestamp second, so which two go
        # first is their arrival or uid order; the test follows whichever two were admitted.
        first = wait_for(lambda: _admitted_if(rlab, ns, team_a, 2), 30,
                         "two of team A's six take the 2 CPUs")
        wait_for(lambda: _consumed(rlab, ns, "qa").get("cpu") not in (None, "0"), 20,
                 "qa status: consumedResources charged by A's admissions")
        apply(rlab, workload_manifest("b0", ns, "qb", cpu="1"),
              workload_manifest("b1", ns, "qb", cpu="1"))
        # b0 and b1 are created in one request: the same creationTimestamp second, so which
        # of them goes first is their uid's order; what matters is that B goes before A.
        for done, n_b in zip(first, (1, 2), strict=True):
            finish_workload(rlab, ns, done)
            wait_for(lambda n=n_b: sum(admitted(wl(rlab, ns, b)) for b in ("b0", "b1")) == n,
                     30, f"the CPU {done} frees goes to team B ({n_b} of b0, b1 admitted)")
        # A's flood (the other four) waited behind B although it was created first.
        assert not any(admitted(wl(rlab, ns, a)) for a in team_a if a not in first)
        wait_for(lambda: _consumed(rlab, ns, "qb").get("cpu") not in (None, "0"), 20,
                 "qb status: consumedResources charged by B's admissions")
        lq = rlab.get("localqueue", "qa", "-n", ns)
        assert lq["status"]["fairSharing"]["admissionFairSharingStatus"]["lastUpdate"]
    finally:
        mt.stop()
        cleanup(rlab, ns, cq)
