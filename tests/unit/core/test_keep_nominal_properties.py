"""breaker6: attacks on the lender's kept room (``Scheduler._keep_nominal_for_queue``: usage
peak over ``KEEP_PEAK_WINDOW_S`` plus a bounded queued-keep streak) and on
``Scheduler.fork`` copying that memory.

Properties (hypothesis, random cohorts with borrowing and lending limits, random arrivals,
finishes and evictions): after every cycle no ClusterQueue is over nominal + borrowingLimit,
the cohort's borrowed usage fits what its members may lend (lendingLimit), and once arrivals
stop, the cohort reaches a fixed point within a bounded number of cycles where no pending
Workload fits the idle quota it may use. A hand-built case: a lender whose usage peaks at
its nominal every few seconds lends its kept room once a borrower waited KEEP_MAX_HOLD_S."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.scheduling_cycle import KEEP_MAX_HOLD_S, KEEP_PEAK_WINDOW_S, Scheduler
from app.core.types import ClusterQueueName
from tests.builders import Sim, cluster_queue, fr, workload

CPU = fr("default-flavor", "cpu")


def _queue(i: int, nominal: int, borrowing: int | None, lending: int | None,
           reclaim: str) -> object:
    if lending is not None:
        lending = min(lending, nominal)  # the CRD policy refuses lendingLimit > nominalQuota
    return (cluster_queue(f"q{i}").cohort("co")
            .flavor("default-flavor", cpu=nominal, borrowing_limit=borrowing,
                    lending_limit=lending)
            .preemption(within="LowerPriority", reclaim=reclaim))


_queues = st.lists(
    st.tuples(st.integers(0, 6), st.one_of(st.none(), st.integers(0, 4)),
              st.one_of(st.none(), st.integers(0, 6)),
              st.sampled_from(["Any", "LowerPriority", "Never"])),
    min_size=2, max_size=3)

# An operation between two cycles: ("add", cq, cpu, priority) | ("finish", index) |
# ("evicted", index) | ("tick",): a cycle with no event before it.
_ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 2), st.integers(1, 5), st.integers(0, 2)),
    st.tuples(st.just("finish"), st.integers(0, 50)),
    st.tuples(st.just("evicted"), st.integers(0, 50)),
    st.tuples(st.just("tick"))), min_size=1, max_size=60)


def _limits(specs: list[tuple[int, int | None, int | None, str]]):
    """(nominal, borrowingLimit, lendingLimit) per ClusterQueue in millicores; the
    lendingLimit is capped at the nominal as Kueue's validation requires."""
    out = []
    for nominal, borrowing, lending, _ in specs:
        lend = None if lending is None else min(lending, nominal)
        out.append((nominal * 1000, None if borrowing is None else borrowing * 1000,
                    None if lend is None else lend * 1000))
    return out


def _check_limits(s: Sim, limits) -> None:
    """No ClusterQueue over nominal + borrowingLimit; the usage beyond each member's
    guaranteed part (nominal - lendingLimit) fits what the members lend (Kueue v1beta2
    ResourceQuota: borrowingLimit, lendingLimit)."""
    beyond = pool = 0
    for i, (nominal, borrowing, lending) in enumerate(limits):
        u = s.c.usage(ClusterQueueName(f"q{i}")).get(CPU, 0)
        if borrowing is not None:
            assert u <= nominal + borrowing, (f"q{i}", u, nominal, borrowing)
        guaranteed = 0 if lending is None else nominal - lending
        beyond += max(0, u - guaranteed)
        pool += nominal - guaranteed
    assert beyond <= pool, (beyond, pool)


def _idle_fit(s: Sim, limits, i: int, cpu: int) -> bool:
    """Would ``cpu`` millicores fit in q{i} without preempting anything?"""
    usage = [s.c.usage(ClusterQueueName(f"q{j}")).get(CPU, 0) for j in range(len(limits))]
    nominal, borrowing, _ = limits[i]
    if borrowing is not None and usage[i] + cpu > nominal + borrowing:
        return False
    after = list(usage)
    after[i] += cpu
    beyond = pool = 0
    for j, (nom, _, lending) in enumerate(limits):
        guaranteed = 0 if lending is None else nom - lending
        beyond += max(0, after[j] - guaranteed)
        pool += nom - guaranteed
    return beyond <= pool


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=_queues, ops=_ops)
def test_every_cycle_respects_the_limits_and_a_quiet_cohort_leaves_no_fitting_workload_pending(
    specs, ops
):
    s = Sim(*[_queue(i, *spec) for i, spec in enumerate(specs)])
    limits = _limits(specs)
    n = len(specs)
    names: list[str] = []
    for op in ops:
        if op[0] == "add":
            _, cq, cpu, prio = op
            name = f"w{len(names)}"
            names.append(name)
            s.submit(workload(name).cq(f"q{cq % n}").pods(1, cpu=cpu).priority(prio))
        elif op[0] == "finish" and names:
            name = names[op[1] % len(names)]
            if s.c.workload(s.key(name)) is not None and s.state(name) == "admitted":
                s.finish(name)
        elif op[0] == "evicted" and names:
            name = names[op[1] % len(names)]
            if s.c.workload(s.key(name)) is not None and s.state(name) == "evicting":
                s.finish_eviction(name)
        s.cycle()
        _check_limits(s, limits)
    # Arrivals stop: evictions finish, and within a bounded number of cycles (the window
    # lapses after KEEP_PEAK_WINDOW_S at one cycle a second) nothing that fits is left.
    for _ in range(int(KEEP_PEAK_WINDOW_S) * 3 + 10):
        s.cycle()
        _check_limits(s, limits)
        for name in names:
            info = s.c.workload(s.key(name))
            if info is not None and info.state == "evicting":
                s.finish_eviction(name)
    s.settle()
    _check_limits(s, limits)
    for name in names:
        info = s.c.workload(s.key(name))
        if info is None or info.state != "pending":
            continue
        wl = s.c.domain_workload(s.key(name))
        assert wl is not None
        i = int(wl.queue_name.removeprefix("lq-q"))
        cpu = wl.pod_sets[0].requests[CPU.resource]
        assert not _idle_fit(s, limits, i, cpu), (name, f"q{i}", cpu, info.reason)


def test_a_lender_peaking_at_its_nominal_every_few_seconds_does_not_starve_a_borrower():
    s = Sim(*[_queue(i, 4, None, None, "Any") for i in range(2)])
    for i in range(4):
        s.c.add_workload(workload(f"r{i}").cq("q1").pods(1, cpu=1).build(creation=s.now))
    s.settle()
    s.c.add_workload(workload("b").cq("q1").pods(1, cpu=1).build(creation=s.now))
    # q0: a short 1-CPU Workload every cycle, a short 4-CPU one every 4th (each ends before
    # the next cycle), always one more queued: its usage is 1 CPU, 4 for one cycle in 4.
    period = int(KEEP_PEAK_WINDOW_S) - 1
    seq = 0

    def add_q0() -> None:
        nonlocal seq
        cpu = 4 if seq % period == 0 else 1
        s.c.add_workload(workload(f"a{seq}").cq("q0").pods(1, cpu=cpu).build(creation=s.now))
        seq += 1

    add_q0()
    add_q0()
    start = s.now
    for _ in range(60):
        s.cycle()
        if s.admitted("b"):
            break
        for k in list(s.c.admitted(ClusterQueueName("q0"))):
            s.c.finish(k)
        add_q0()
    assert s.admitted("b"), (s.usage("q0"), s.usage("q1"))
    # Refused by kept room from its first cycle, it gets the room once KEEP_MAX_HOLD_S has
    # passed (the cycle at or after it), as Kueue would have admitted it at once.
    assert s.now - start <= KEEP_MAX_HOLD_S + 2.0, s.now - start  # Sim.cycle: 1 s a cycle


def _lender_with_a_queue_and_a_borrower(keep: bool) -> Sim:
    """q1 at its nominal (4 x 1 CPU), q0 (4 CPU) with a0 (1 CPU) and a1 (3 CPU) queued, b
    (q1, 1 CPU) borrowing; one cycle run with ``keep_nominal_for_queue`` ``keep``."""
    s = Sim(*[_queue(i, 4, None, None, "Any") for i in range(2)])
    s.c.keep_nominal_for_queue = keep
    for i in range(4):
        s.c.add_workload(workload(f"r{i}").cq("q1").pods(1, cpu=1).build(creation=s.now))
    s.settle()
    s.c.add_workload(workload("a0").cq("q0").pods(1, cpu=1).build(creation=s.now))
    s.c.add_workload(workload("a1").cq("q0").pods(1, cpu=3).build(creation=s.now))
    s.c.add_workload(workload("b").cq("q1").pods(1, cpu=1).build(creation=s.now))
    s.cycle()
    return s


def test_with_the_setting_off_the_lender_lends_as_kueue_does():
    """scheduling.keep_nominal_for_queue false (Kueue v0.17.1's lend-then-reclaim): b is
    admitted into q0's room in the cycle a0 is, and a1 reclaims it a cycle later; a fork
    keeps the setting."""
    s = _lender_with_a_queue_and_a_borrower(keep=False)
    assert s.admitted("a0") and s.admitted("b")
    assert s.evictions(s.cycle()) == [("ns/b", "InCohortReclamation")]
    fork = s.c.fork(s.c.cluster_queue_names())
    assert isinstance(fork, Scheduler) and fork.keep_nominal_for_queue is False


def test_kept_room_still_spares_a_borrower_that_waited_less_than_the_bound():
    """The bound lends kept room only to a head that waited KEEP_MAX_HOLD_S: before that,
    breaker6's borrower is refused with the 'held capacity' message (the kept room is
    still what spares the lender a reclaim)."""
    s = _lender_with_a_queue_and_a_borrower(keep=True)
    assert s.admitted("a0") and not s.admitted("b")
    assert "held capacity" in s.c.workload(s.key("b")).message


def test_a_projection_from_a_fork_leaves_the_live_kept_room_memory_alone():
    """Scheduler.fork copies the usage peaks and the queued-keep streak (evict16c): cycles of
    the fork at later times must not age out or extend the live state's memory, so the live
    state decides the same with or without an ETA projection in between."""
    def build() -> Sim:
        s = Sim(*[_queue(i, 4, None, None, "Any") for i in range(2)])
        s.c.add_workload(workload("big").cq("q0").pods(1, cpu=4).build(creation=s.now))
        s.c.add_workload(workload("r").cq("q1").pods(1, cpu=4).build(creation=s.now))
        s.settle()
        for i in range(4):
            s.c.add_workload(workload(f"b{i}").cq("q1").pods(1, cpu=1).build(creation=s.now))
        s.finish("big")
        for i in range(3):
            s.c.add_workload(workload(f"s{i}").cq("q0").pods(1, cpu=1).build(creation=s.now))
        return s

    plain, forked = build(), build()
    fork = forked.c.fork(forked.c.cluster_queue_names())
    assert isinstance(fork, Scheduler)
    for t in range(60):  # a long projection: the fork's window moves far ahead
        fork.schedule(forked.now + 100 + t)
        for k in list(fork.admitted(ClusterQueueName("q0"))):
            fork.finish(k)
    for _ in range(12):
        a, b = plain.cycle(), forked.cycle()
        assert Sim.admits(a) == Sim.admits(b)
        assert plain.evictions(a) == forked.evictions(b)


def test_a_fork_orders_by_fair_sharing_as_the_live_state() -> None:
    """Fair sharing on: q0 borrows 3 CPU of lender q2's 4, q1 none; one CPU is left and both
    heads borrow. By share q1 goes first; by the classical order q0's older head would. The
    fork (the ETA's projection) must admit what the live state admits."""
    from app.core.spec import FairSharing

    s = Sim(cluster_queue("q0").cohort("co").flavor("default-flavor", cpu=0),
            cluster_queue("q1").cohort("co").flavor("default-flavor", cpu=0),
            cluster_queue("q2").cohort("co").flavor("default-flavor", cpu=4),
            fair_sharing=FairSharing())
    s.c.add_workload(workload("run").cq("q0").pods(1, cpu=3).build(creation=s.now))
    s.settle()
    s.c.add_workload(workload("a").cq("q0").pods(1, cpu=1).build(creation=s.now + 1))
    s.c.add_workload(workload("b").cq("q1").pods(1, cpu=1).build(creation=s.now + 2))
    fork = s.c.fork(s.c.cluster_queue_names())
    assert isinstance(fork, Scheduler)
    assert fork.fair_sharing == s.c.fair_sharing
    assert Sim.admits(fork.schedule(s.now + 3)) == Sim.admits(s.c.schedule(s.now + 3)) \
        == ["ns/b"]
