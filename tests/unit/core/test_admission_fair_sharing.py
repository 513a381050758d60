"""Admission Fair Sharing (Kueue Configuration ``admissionFairSharing``, ClusterQueue
``spec.admissionScope.admissionMode: UsageBasedAdmissionFairSharing``, LocalQueue
``spec.fairSharing.weight``): LocalQueues sharing a ClusterQueue are served by their decayed
recent usage, so one team's flood of small jobs cannot starve another team."""

from __future__ import annotations

import math

import pytest

from app.core.decisions import Admit, PendingReason
from app.core.spec import AdmissionFairSharing
from app.core.types import ClusterQueueName, ResourceName, WorkloadKey
from tests.builders import Sim, cluster_queue, flavor, workload

CPU = ResourceName("cpu")
AFS = AdmissionFairSharing(half_life_s=600, sampling_s=60)


def shared_cq(afs: AdmissionFairSharing | None = AFS, cpu: int = 4, **kw) -> Sim:
    cq = cluster_queue("shared").flavor("default-flavor", cpu=cpu)
    if kw.pop("preempt", False):
        cq = cq.preemption(within="LowerPriority")
    sim = Sim(flavor("default-flavor"), namespaces={"a": {}, "b": {}},
              admission_fair_sharing=afs)
    sim.add_cq(cq.admission_fair_sharing(), namespaces=())
    sim.add_lq("a/team", "shared", kw.pop("weight_a", 1.0))
    sim.add_lq("b/team", "shared", kw.pop("weight_b", 1.0))
    return sim


def flood(sim: Sim, team: str, n: int, cpu: int = 1, prefix: str = "j") -> None:
    sim.submit(*(workload(f"{team}/{prefix}{i}").queue("team").pods(1, cpu=cpu)
                 for i in range(n)))


def admitted_order(sim: Sim) -> list[str]:
    return [d.workload for ds in sim.history for d in ds if isinstance(d, Admit)]


def run_rounds(sim: Sim, rounds: int) -> list[str]:
    """Settle; then ``rounds`` times finish the oldest running Workload and settle."""
    sim.settle()
    for _ in range(rounds):
        running = [k for k in admitted_order(sim) if sim.c.workload(WorkloadKey(k)) is not None
                   and sim.c.workload(WorkloadKey(k)).state == "admitted"]
        if not running:
            break
        sim.c.finish(WorkloadKey(running[0]))
        sim.tick(30)
        sim.settle()
    return admitted_order(sim)


def test_a_flood_of_small_jobs_from_team_a_does_not_starve_team_b():
    sim = shared_cq()
    flood(sim, "a", 20)            # team A floods: 20 one-CPU jobs take the 4 CPUs
    sim.settle()
    flood(sim, "b", 4)             # team B arrives behind 16 of A's jobs
    order = run_rounds(sim, 4)
    # Every CPU A frees goes to B (no recent usage) until B catches up.
    assert order[:4] == ["a/j0", "a/j1", "a/j2", "a/j3"]
    assert order[4:8] == ["b/j0", "b/j1", "b/j2", "b/j3"]


def test_without_admission_fair_sharing_the_same_flood_is_served_first_come_first_served():
    sim = shared_cq(afs=None)
    flood(sim, "a", 20)
    sim.settle()
    flood(sim, "b", 4)
    order = run_rounds(sim, 4)
    assert order[4:8] == ["a/j4", "a/j5", "a/j6", "a/j7"]


def test_entry_penalty_interleaves_teams_that_flood_at_the_same_time():
    sim = shared_cq(cpu=8)
    flood(sim, "a", 10)
    flood(sim, "b", 10)
    sim.settle()
    order = admitted_order(sim)
    assert len(order) == 8
    # Each admission charges its LocalQueue at once, so the other team goes next.
    assert sum(k.startswith("a/") for k in order) == 4
    assert [k[0] for k in order] == ["a", "b"] * 4


def test_consumed_usage_follows_held_usage_with_the_half_life():
    afs = AdmissionFairSharing(half_life_s=100, sampling_s=10)
    sim = shared_cq(afs)
    sim.submit(workload("a/big").queue("team").pods(1, cpu=2))
    sim.settle()
    st = sim.c.local_queue_fair_sharing("a/team")
    assert st is not None
    penalty = 2000 * (1 - 0.5 ** (10 / 100))  # entry penalty: 2 CPUs x alpha(sampling)
    assert st.consumed[CPU] == pytest.approx(penalty)
    # Held for one half-life: halfway from the penalty to the 2 CPUs held.
    sim.now = st.last_update + 100 - 1
    sim.cycle()
    st = sim.c.local_queue_fair_sharing("a/team")
    assert st.consumed[CPU] == pytest.approx(penalty * 0.5 + 2000 * 0.5, rel=1e-6)
    held = st.consumed[CPU]
    # Released: decays by half each half-life.
    sim.c.finish(sim.key("a/big"))
    sim.now = st.last_update + 100 - 1
    sim.cycle()
    st = sim.c.local_queue_fair_sharing("a/team")
    assert st.consumed[CPU] == pytest.approx(held * 0.5, rel=1e-6)
    assert st.usage == pytest.approx(held * 0.5 / 1000, rel=1e-6)  # cores, weight 1
    assert st.last_update == sim.now


def test_half_life_zero_keeps_no_history():
    sim = shared_cq(AdmissionFairSharing(half_life_s=0, sampling_s=10))
    flood(sim, "a", 6)
    flood(sim, "b", 2)
    sim.settle()
    assert admitted_order(sim) == ["a/j0", "a/j1", "a/j2", "a/j3"]
    assert sim.c.local_queue_fair_sharing("a/team").usage == 0


def test_local_queue_weights_scale_the_usage_it_is_ordered_by():
    # Team A has weight 3: it gets about 3 of every 4 admissions while both flood.
    sim = shared_cq(cpu=8, weight_a=3.0)
    flood(sim, "a", 10)
    flood(sim, "b", 10)
    sim.settle()
    order = admitted_order(sim)
    assert sum(k.startswith("a/") for k in order) == 6
    assert sum(k.startswith("b/") for k in order) == 2


def test_weight_zero_only_gets_what_others_do_not_want():
    sim = shared_cq(cpu=6, weight_a=0.0)
    flood(sim, "a", 4)
    flood(sim, "b", 3)
    sim.settle()
    order = admitted_order(sim)
    assert order[:3] == ["b/j0", "b/j1", "b/j2"]
    assert math.isinf(sim.c.local_queue_fair_sharing("a/team").usage)


def test_resource_weights_choose_which_resource_counts():
    afs = AdmissionFairSharing(half_life_s=600, sampling_s=60,
                               resource_weights={CPU: 0.0, ResourceName("memory"): 1.0})
    cq = cluster_queue("shared").flavor("default-flavor", cpu=8, memory="8Gi")
    sim = Sim(flavor("default-flavor"), namespaces={"a": {}, "b": {}},
              admission_fair_sharing=afs)
    sim.add_cq(cq.admission_fair_sharing(), namespaces=())
    sim.add_lq("a/team", "shared")
    sim.add_lq("b/team", "shared")
    # A used lots of CPU (weight 0), B a little memory: A goes first.
    sim.submit(workload("a/cpu").queue("team").pods(1, cpu=4, memory="1Mi"))
    sim.submit(workload("b/mem").queue("team").pods(1, cpu=1, memory="1Gi"))
    sim.settle()
    a = sim.c.local_queue_fair_sharing("a/team").usage
    b = sim.c.local_queue_fair_sharing("b/team").usage
    assert 0 < a < b


def test_admission_scope_without_the_configuration_keeps_plain_fifo():
    # Kueue: admissionScope takes effect only with Configuration admissionFairSharing.
    sim = shared_cq(afs=None)
    assert sim.c.local_queue_fair_sharing("a/team") is None


def test_unknown_admission_mode_makes_the_cluster_queue_inactive():
    sim = Sim(cluster_queue("cq").flavor("default-flavor", cpu=1)
              .admission_fair_sharing("Sometimes"), admission_fair_sharing=AFS)
    st = sim.c.cluster_queue_status(ClusterQueueName("cq"))
    assert not st.active
    assert "spec.admissionScope.admissionMode" in st.message


def test_forget_takes_back_the_entry_penalty():
    sim = shared_cq()
    sim.submit(workload("a/w").queue("team").pods(1, cpu=2))
    assert sim.admits(sim.cycle()) == ["a/w"]
    assert sim.c.local_queue_fair_sharing("a/team").usage > 0
    assert sim.c.forget(sim.key("a/w"))
    assert sim.c.local_queue_fair_sharing("a/team").usage == 0
    assert sim.pending("a/w")


def test_within_cluster_queue_preemption_takes_from_the_busier_local_queue_first():
    sim = shared_cq(cpu=4, preempt=True)
    sim.submit(workload("a/old").queue("team").pods(1, cpu=1))
    flood(sim, "a", 2, prefix="x")
    sim.submit(workload("b/w").queue("team").pods(1, cpu=1))
    sim.settle()
    assert sim.c.local_queue_fair_sharing("a/team").usage > \
        sim.c.local_queue_fair_sharing("b/team").usage
    sim.submit(workload("b/urgent").queue("team").priority(10).pods(1, cpu=1))
    sim.settle()
    victims = [v for v, _ in sim.evictions()]
    # Without AFS the most recently admitted (b/w) would go; AFS takes team A's first.
    assert victims and victims[0].startswith("a/")


def test_pending_positions_follow_the_fair_sharing_order():
    sim = shared_cq(cpu=1)
    flood(sim, "a", 3)
    flood(sim, "b", 2)
    sim.settle()  # a/j0 runs: team A now has usage, B none
    pending = sim.c.pending_workloads(ClusterQueueName("shared"))
    assert all(p.reason == PendingReason.WAITING_FOR_QUOTA for p in pending if p.inadmissible)
    # The status positions list B's Workloads (no usage) before A's, as they will be served.
    assert [p.workload for p in pending] == ["b/j0", "b/j1", "a/j1", "a/j2"]
