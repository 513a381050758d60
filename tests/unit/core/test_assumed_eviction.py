"""An assumed Workload preempted at once, then released (KQ-29's in-flight-write rule).

The core keeps an assumed Workload's reservation on an update without admission (its
admission write may still be in flight). The controller therefore confirms its own admission
write in the core as soon as it lands (``DecisionWriter._confirm``, the update carrying the
admission); after that, the release update (no admission, Evicted=True) gives the quota back.
These cases pin both sides of that contract; the lab test
``test_KQ_29_admission_preempted_at_once_releases_its_quota_despite_skipped_events`` checks
the controller side.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.decisions import Admit
from app.core.workload import Workload
from tests.builders import Sim, cluster_queue, workload


def _admitted_then_preempted() -> tuple[Sim, Workload, Admit]:
    """W1 assumed (cpu 4 of 4); W2 (priority 10) preempts it: W1 evicting, W2 pending."""
    s = Sim(cluster_queue("cq").flavor("default", cpu=4).preemption(within="LowerPriority"))
    (w1,) = s.submit(workload("w1").cq("cq").pods(1, cpu=4).priority(0))
    (admit,) = s.cycle()
    s.submit(workload("w2").cq("cq").pods(1, cpu=4).priority(10))
    s.settle()
    assert s.evictions() == [("ns/w1", "InClusterQueue")]
    assert s.state("w1") == "evicting" and s.pending("w2")
    return s, w1, admit


@pytest.mark.parametrize(
    "confirmed, finish_eviction, released",
    [
        (True, False, True),    # the controller confirmed its admission write: release works
        (False, False, False),  # never confirmed: still "in flight", the quota stays held
        (False, True, True),    # finish_eviction releases whatever the assumption
    ],
    ids=["confirmed-then-release-update", "unconfirmed-release-update-kept",
         "unconfirmed-finish-eviction"],
)
def test_kq29_assumed_preempted_workload_release(confirmed, finish_eviction, released):
    s, w1, admit = _admitted_then_preempted()
    key = s.key("w1")
    if confirmed:
        # The written object: admission, no Evicted yet; the core's eviction mark is kept.
        s.c.update_workload(replace(w1, admission=admit.admission, quota_reserved_at=s.now,
                                    evicted_at=s.now))
        info = s.c.workload(key)
        assert (info.state, info.assumed) == ("evicting", False)
    # The release as the API shows it: admission cleared, Evicted=True.
    s.c.update_workload(replace(w1, evicted_at=s.tick()))
    if finish_eviction:
        s.finish_eviction("w1")
    info = s.c.workload(key)
    if not released:
        assert (info.state, info.assumed) == ("evicting", True)
        assert s.usage("cq", "default") == 4000
        s.settle()
        assert s.pending("w2")
        return
    assert (info.state, info.assumed) == ("pending", False)
    ds = s.settle()
    assert s.admits(ds) == ["ns/w2"]
    assert s.admitted("w2") and s.pending("w1")
    assert s.usage("cq", "default") == 4000
