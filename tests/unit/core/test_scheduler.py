"""Scheduling cycle and the Scheduler API: assume / forget / confirm, restart rebuild, status."""

from __future__ import annotations

import random
from dataclasses import replace

from app.core.decisions import Admit, Pending, PendingReason
from app.core.scheduling_cycle import Scheduler
from app.core.types import ClusterQueueName
from tests.builders import Sim, cluster_queue, fr, workload


def test_one_admission_per_cluster_queue_per_cycle_in_queue_order():
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=10))
    s.submit(*[workload(f"w{i}").cq("cq").pods(1, cpu=1).priority(i % 3) for i in range(6)])
    order = []
    for _ in range(6):
        admits = Sim.admits(s.cycle())
        assert len(admits) == 1
        order += admits
    assert order == ["ns/w2", "ns/w5", "ns/w1", "ns/w4", "ns/w0", "ns/w3"]


def test_a_cycle_evaluates_heads_only_not_every_pending_workload():
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=1))
    s.submit(*[workload(f"w{i}").cq("cq").pods(1, cpu=2) for i in range(1000)])
    ds = s.cycle()
    assert len(ds) == 1 and isinstance(ds[0], Pending)
    parked = [p for p in s.c.pending_workloads(ClusterQueueName("cq")) if p.inadmissible]
    assert [p.workload for p in parked] == ["ns/w0"]


def test_admit_is_assumed_and_confirmed_by_the_update_carrying_the_admission():
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=2))
    (w,) = s.submit(workload("w").cq("cq").pods(1, cpu=2))
    (admit,) = s.cycle()
    info = s.c.workload(w.key)
    assert info.state == "admitted" and info.assumed and s.usage("cq") == 2000
    s.c.update_workload(replace(w, admission=admit.admission, quota_reserved_at=s.now))
    info = s.c.workload(w.key)
    assert info.state == "admitted" and not info.assumed and s.usage("cq") == 2000
    assert not s.c.forget(w.key), "a confirmed admission cannot be forgotten"


def test_forget_rolls_back_and_the_workload_is_admitted_again_next_cycle():
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=2))
    s.submit(workload("w").cq("cq").pods(1, cpu=2))
    (admit,) = s.cycle()
    assert s.c.forget(admit.workload)
    assert s.usage("cq") == 0 and s.pending("w")
    assert Sim.admits(s.cycle()) == ["ns/w"]


def test_restart_rebuilds_usage_from_admissions_before_the_first_decision():
    s = Sim(
        cluster_queue("cq").cohort("co").flavor("default-flavor", cpu=4),
        cluster_queue("other").cohort("co").flavor("default-flavor", cpu=4),
    )
    s.submit(workload("a").cq("cq").pods(1, cpu=6), workload("b").cq("other").pods(1, cpu=1))
    s.settle()
    # A fresh core fed the same objects (admitted ones carry status.admission), in any order.
    objs = [s.c._wls[k].wl for k in s.c.workload_keys()]
    fresh = Scheduler()
    fresh.add_workload(objs[1])
    for f in s.c.flavors.values():
        fresh.add_flavor(f)
    fresh.add_workload(objs[0])
    for name in s.c.cluster_queue_names():
        fresh.add_cluster_queue(s.c.cluster_queue_spec(name))
    assert fresh.usage(ClusterQueueName("cq")) == {fr("default-flavor", "cpu"): 6000}
    assert fresh.cluster_queue_status(ClusterQueueName("cq")).resources[0].borrowed == 2000
    assert fresh.schedule(0.0) == []


def test_pending_decisions_are_emitted_only_when_the_reason_changes():
    s = Sim(cluster_queue("cq").strict_fifo().flavor("default-flavor", cpu=2))
    s.submit(workload("run").cq("cq").pods(1, cpu=1))
    s.settle()
    s.submit(workload("w").cq("cq").pods(1, cpu=2))
    (p,) = s.cycle()
    assert isinstance(p, Pending) and p.reason == PendingReason.WAITING_FOR_QUOTA
    assert p.reason.condition_reason == "Pending"
    assert [s.cycle() for _ in range(3)] == [[], [], []]


def test_same_input_in_any_insertion_order_gives_the_same_decisions():
    def run(seed: int) -> list:
        specs = [
            cluster_queue(f"cq{i}")
            .cohort("co" if i % 2 else None)
            .flavor("default-flavor", cpu=3)
            .preemption(within="LowerPriority")
            for i in range(4)
        ]
        wls = [
            workload(f"w{i}")
            .cq(f"cq{i % 4}")
            .pods(1, cpu=1 + i % 3)
            .priority(i % 5)
            .created(float(i))
            .build()
            for i in range(24)
        ]
        rng = random.Random(seed)
        rng.shuffle(specs)
        rng.shuffle(wls)
        s = Sim(*specs)
        s.submit(*wls)
        return [s.cycle() for _ in range(8)]

    assert run(1) == run(2) == run(3)


def test_status_views_report_usage_positions_and_local_queue_counts():
    s = Sim(
        cluster_queue("cq").cohort("co").flavor("default-flavor", cpu=2),
        cluster_queue("lender").cohort("co").flavor("default-flavor", cpu=2),
    )
    s.submit(workload("run").cq("cq").pods(1, cpu=3), workload("wait").cq("cq").pods(1, cpu=2))
    s.settle()
    st = s.c.cluster_queue_status(ClusterQueueName("cq"))
    (r,) = st.resources
    assert (r.usage, r.borrowed, r.nominal, r.available) == (3000, 1000, 2000, 1000)
    assert (st.pending, st.admitted, st.active) == (1, 1, True)
    assert s.status("lender").lent == 1000
    (p,) = s.c.pending_workloads(ClusterQueueName("cq"))
    assert (p.workload, p.position, p.inadmissible, p.reason) == (
        "ns/wait",
        0,
        True,
        PendingReason.WAITING_FOR_QUOTA,
    )
    lq = s.c.local_queue_status("ns/lq-cq")
    assert (lq.pending, lq.admitted, lq.usage) == (1, 1, {fr("default-flavor", "cpu"): 3000})


def test_unknown_keys_never_raise():
    c = Scheduler()
    key = workload("x").build().key
    assert not c.forget(key) and not c.finish(key) and not c.evict(key, 0.0)
    assert not c.finish_eviction(key) and not c.cancel_eviction(key)
    assert not c.delete_workload(key) and not c.delete_cluster_queue(ClusterQueueName("x"))
    assert c.workload(key) is None and c.cluster_queue_status(ClusterQueueName("x")) is None
    assert c.schedule(0.0) == []


def test_admit_carries_the_admission_to_write():
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=8, memory="8Gi"))
    s.submit(workload("w").cq("cq").pods(2, cpu="1500m", memory="1Gi"))
    (admit,) = s.cycle()
    assert isinstance(admit, Admit) and admit.cluster_queue == "cq" and not admit.borrowing
    (psa,) = admit.admission.pod_set_assignments
    assert (psa.name, psa.count) == ("main", 2)
    assert dict(psa.resource_usage) == {"cpu": 3000, "memory": 2 * 2**30}


def test_a_parked_higher_priority_head_comes_back_first_after_each_finish():
    """Kueue's rule (pkg/cache/queue: a finish requeues the cohort's inadmissible Workloads
    into the heap, ordered by priority then creation; one head per ClusterQueue per cycle):
    a parked 10-CPU blocker is the head of the first cycle after every finish (no smaller
    one is admitted in that cycle), and it is admitted, ahead of the lower-priority stream,
    in the first cycle after the quota is free (issue 33 item 4)."""
    s = Sim(cluster_queue("cq").flavor("default-flavor", cpu=10))
    s.submit(*[workload(f"s{i}").cq("cq").pods(1, cpu=1).priority(50) for i in range(30)])
    s.settle()  # s0..s9 run, s10 parked (it did not fit), s11.. queued behind it
    s.submit(workload("blocker").cq("cq").pods(1, cpu=10).priority(100))
    assert Sim.admits(s.settle()) == []
    assert s.usage("cq") == 10_000 and s.pending("blocker")
    running = [f"s{i}" for i in range(10)]
    for n in running[:3]:  # each finish: the blocker first (parked again), then one small
        s.finish(n)
        ds = s.cycle()
        assert Sim.admits(ds) == [] and "ns/blocker" in Sim.pendings(ds)
        assert Sim.admits(s.cycle()) == ["ns/s" + str(running.index(n) + 10)]
    s.finish(*running[3:], "s10", "s11", "s12")
    assert Sim.admits(s.cycle()) == ["ns/blocker"]


def test_queue_counts_are_the_status_counts_for_every_cluster_queue():
    """``queue_counts`` (what the dashboard's usage history samples every 30 s) gives the
    same pending and admitted counts as ``cluster_queue_status``, parked and evicting
    Workloads included, and None for an unknown ClusterQueue."""
    s = Sim(cluster_queue("a").cohort("co").flavor("default-flavor", cpu=4).preemption(
                within="LowerPriority", reclaim="Any"),
            cluster_queue("b").cohort("co").flavor("default-flavor", cpu=4))
    rng = random.Random(7)
    parked = evicting = 0
    for i in range(40):
        cq = rng.choice("ab")
        s.submit(workload(f"w{i}").cq(cq).pods(1, cpu=rng.choice([1, 2, 3])).priority(
            rng.randrange(3)))
        s.cycle()
        for name in ("a", "b"):
            st = s.c.cluster_queue_status(ClusterQueueName(name))
            assert s.c.queue_counts(ClusterQueueName(name)) == (st.pending, st.admitted)
            parked += sum(p.inadmissible for p in s.c.pending_workloads(ClusterQueueName(name)))
            evicting += st.evicting
    assert parked and evicting  # the states compared had both
    assert s.c.queue_counts(ClusterQueueName("nope")) is None
