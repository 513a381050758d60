"""The preemption behind most of the side-by-side run's evictions (issue 16), at its scale:
Kueue's performance generator (6 ClusterQueues of 20 CPU, borrowingLimit 100, reclaim Any,
LowerPriority) at the moment a queue's first large Workload (20 CPU, priority 200) arrives
into a full cohort. Kueue v0.17.1 classical preemption: the preemptor's queue is below its
nominal quota, so the only attempt is without borrowing; its own lower-priority Workloads must
all go (its usage plus 20 may not exceed 20) and the cohort's borrowers free the rest, one
1-CPU Workload at a time; fill-back keeps no victim that is not needed. The conformance case
``test_a_high_priority_arrival_into_a_full_cohort_evicts_queue_mates_and_a_borrower`` checks
the same rule against Kueue itself."""

from __future__ import annotations

from app.core.decisions import Preempt
from tests.builders import Sim, cluster_queue, workload

QUEUES = [f"q{i}" for i in range(6)]


def _cohort() -> Sim:
    return Sim(*[cluster_queue(n).flavor("default-flavor", cpu=20, borrowing_limit=100)
                 .cohort("co").preemption(within="LowerPriority", reclaim="Any")
                 for n in QUEUES])


def test_a_large_arrival_evicts_its_queue_mates_and_just_enough_small_borrowers() -> None:
    sim = _cohort()
    for i in range(3):
        sim.submit(workload(f"q0-s{i}").cq("q0").pods(1, cpu=1).priority(50))
    sim.submit(workload("q0-m0").cq("q0").pods(1, cpu=5).priority(100))
    for n in QUEUES[1:]:
        for j in range(4):
            sim.submit(workload(f"{n}-m{j}").cq(n).pods(1, cpu=5).priority(100))
    sim.settle()
    for j in range(4):  # 1-CPU borrowers: 20 queued, 12 fit (q0's idle 12 of its 20)
        for n in QUEUES[1:]:
            sim.submit(workload(f"{n}-b{j}").cq(n).pods(1, cpu=1).priority(50))
    sim.settle()
    assert sum(sim.usage(n) for n in QUEUES) == 120_000  # the cohort is full
    assert sim.usage("q0") == 8_000
    sim.submit(workload("L").cq("q0").pods(1, cpu=20).priority(200))
    d = next(d for d in sim.cycle() if isinstance(d, Preempt))
    victims = {v.workload: v.reason.value for v in d.victims}
    own = {k for k in victims if k.startswith("ns/q0-")}
    assert own == {"ns/q0-s0", "ns/q0-s1", "ns/q0-s2", "ns/q0-m0"}
    assert {victims[k] for k in own} == {"InClusterQueue"}
    borrowers = set(victims) - own
    # 8 CPU of q0's own + 12 of borrowers free the 20: no fewer borrowers would do, no more
    # are taken, and no queue's medium Workloads (within their nominal quota) are touched.
    assert len(borrowers) == 12 and all("-b" in k for k in borrowers)
    assert {victims[k] for k in borrowers} == {"InCohortReclamation"}
    sim.settle_evictions()
    assert sim.admitted("L") and sim.usage("q0") == 20_000
