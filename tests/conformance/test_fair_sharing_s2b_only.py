"""Fair sharing with ``preemptionStrategies: [LessThanInitialShare]`` (S2-b alone), against
real Kueue v0.17.1 and pykueue (the ``fair_sharing`` fixture, conftest; the scenario is
tests/unit/core/test_fair_sharing.py's, with priorities to fix the candidates' order)."""

from __future__ import annotations

from tests.conformance.support import Target

FAIR_SHARING_STRATEGIES = ["LessThanInitialShare"]


def test_less_than_initial_share_alone_takes_victims_while_the_preemptor_stays_below(
        fair_sharing: Target):
    # donor lends 4; a borrows them (a0-a3, 1 cpu each; share 1000). b-big (b, 2 cpu) makes
    # b borrow 2 (500): 500 < 1000 takes a3, a is chosen again, 500 < 750 takes a2. As the
    # only strategy S2-b runs as Kueue's first one (runFirstFsStrategy), not one victim per
    # queue.
    s = fair_sharing.scope("fs-s2b-only")
    f = s.flavor("f")
    for name, nominal in (("a", 0), ("b", 0), ("donor", 4)):
        s.cluster_queue(name, [(f, {"cpu": {"nominalQuota": str(nominal)}})], cohort="org",
                        reclaim="Any")
    for i in range(4):
        s.workload(f"a{i}", "a", {"cpu": "1"}, priority=3 - i)
        s.admitted(f"a{i}")
    s.workload("b-big", "b", {"cpu": "2"})
    s.preempted("a3", "InCohortFairSharing")
    s.preempted("a2", "InCohortFairSharing")
    s.admitted("b-big")
    s.stays_admitted("a0", "a1")
