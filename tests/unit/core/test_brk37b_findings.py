"""brk37b: attacks on cb822b3's keep-nominal bound (``Scheduler._held_back`` and the timed
lending that replaced it since: ``_lent_to_held_back``). Each finding FAILS on f59615d
for the reason it names (strict xfail); the control beside it is a plain test. Closed the
same session, both plain tests now: K1 and K2 (the timed lending is gone: a lender keeps no
room while a ClusterQueue that waited KEEP_MAX_HOLD_S for kept room has a borrowing head
that fits it, the wait forgotten KEEP_FORGET_S after kept room last refused it or was given
up for it).

K1: ``_renew_lending`` renews a cohort's lending on every admission of a ClusterQueue that
was once held back, whether that admission borrows or not, and the wait it renews for is
kept for the whole lending (``_lend_for_held_back`` skips the waits of a lending root). A
ClusterQueue that was held back once and then admits its own Workloads within its nominal
(never refused by kept room again) keeps its cohort lending for good: the lender's kept
room, pykueue's departure that spares a borrower an eviction a cycle after its admission,
is off for as long as that ClusterQueue admits anything.

K2: a wait is forgotten once kept room has not refused it for KEEP_MAX_HOLD_S, and the
cohort lends only for a wait older than KEEP_MAX_HOLD_S refused within the last
KEEP_PEAK_WINDOW_S. A lender that runs at its nominal for more than KEEP_MAX_HOLD_S and
between two such runs admits one small Workload (keeping room for the big one queued
behind it) refuses a borrower once a period, each refusal starting a new wait: the borrower
is never admitted, where Kueue admits it in every gap."""

from __future__ import annotations

import itertools

from app.core.scheduling_cycle import KEEP_MAX_HOLD_S, KEEP_PEAK_WINDOW_S
from app.core.types import ClusterQueueName
from tests.builders import Sim, cluster_queue, workload

Q0, Q1 = ClusterQueueName("q0"), ClusterQueueName("q1")
LONG_RUNS = ("r0", "r1", "r2", "r3")


def _add(s: Sim, name: str, cq: str, cpu: int) -> None:
    s.c.add_workload(workload(name).cq(cq).pods(1, cpu=cpu).build(creation=s.now))


def _borrower_beside_a_lender(lender_reclaim: str, *, q1_lends: bool = True,
                              with_q2: bool = False) -> Sim:
    """Cohort ``co``: lender q0 (4 CPU, reclaimWithinCohort ``lender_reclaim``), q1 (4 CPU,
    lendingLimit 0 unless ``q1_lends``) at its nominal with 4 long runs and borrower ``b``
    (1 CPU) queued; with ``with_q2``, q2 (0 CPU)."""
    queues = [cluster_queue("q0").cohort("co").flavor("default-flavor", cpu=4)
              .preemption(within="LowerPriority", reclaim=lender_reclaim),
              cluster_queue("q1").cohort("co").flavor(
                  "default-flavor", cpu=4, lending_limit=None if q1_lends else 0)
              .preemption(within="LowerPriority", reclaim="Any")]
    if with_q2:
        queues.append(cluster_queue("q2").cohort("co").flavor("default-flavor", cpu=0)
                      .preemption(within="LowerPriority", reclaim="Any"))
    s = Sim(*queues)
    for name in LONG_RUNS:
        _add(s, name, "q1", 1)
    s.settle()
    _add(s, "b", "q1", 1)
    return s


def _after_a_held_back_borrower(own_stream: bool) -> Sim:
    """breaker6's lender q0 (4 CPU: a 1-CPU head every cycle, a 4-CPU one every 4th, each
    ending before the next cycle, one more always queued) and q1 (4 CPU, lendingLimit 0) at
    its nominal with 4 long runs and borrower ``b`` (1 CPU): b is refused by q0's kept room
    until the bound makes the cohort lend (about KEEP_MAX_HOLD_S). Then q0's stream stops,
    q1's long runs end and, with ``own_stream``, q1 admits a 1-CPU Workload of its own every
    2 s (within its nominal: it never borrows, nor is it refused again) for 48 s. Then q0
    admits ``x0`` (1 CPU) with ``x1`` (3 CPU) queued, and borrower q2 (0 CPU) gets ``c`` (1
    CPU); 4 cycles."""
    s = _borrower_beside_a_lender("Any", q1_lends=False, with_q2=True)
    # q0's sizes: 4 CPU, then 1 CPU for the rest of each KEEP_PEAK_WINDOW_S - 1 cycles.
    sizes = itertools.cycle([4] + [1] * (int(KEEP_PEAK_WINDOW_S) - 2))
    names = (f"a{i}" for i in itertools.count())

    def add_q0() -> None:
        _add(s, next(names), "q0", next(sizes))

    for _ in range(2):
        add_q0()
    held_back = int(KEEP_MAX_HOLD_S) + 2
    for t in range(held_back + 48):
        if t == held_back:
            s.finish(*LONG_RUNS)
        if t >= held_back and own_stream and t % 2 == 0:
            _add(s, f"o{t}", "q1", 1)
        s.cycle()
        for k in list(s.c.admitted(Q1)) + list(s.c.admitted(Q0)):
            if k.split("/")[-1] not in LONG_RUNS:
                s.c.finish(k)
        if t < held_back:
            add_q0()
    assert s.c.workload(s.key("b")) is None  # strict setup: b was admitted (and finished)
    _add(s, "x0", "q0", 1)
    _add(s, "x1", "q0", 3)
    _add(s, "c", "q2", 1)
    for _ in range(4):
        s.cycle()
    return s


def test_control_once_the_borrower_is_served_the_lender_keeps_room_again() -> None:
    """Without q1's own stream the lending ends KEEP_MAX_HOLD_S after b's admission: q0
    keeps x1's room, c waits, nothing is evicted."""
    s = _after_a_held_back_borrower(own_stream=False)
    assert s.evictions() == []
    assert s.admitted("x0") and s.admitted("x1") and s.pending("c")


def test_k1_a_queue_admitting_within_its_nominal_does_not_keep_its_cohort_lending() -> None:
    s = _after_a_held_back_borrower(own_stream=True)
    assert s.evictions() == [], s.evictions()


def _gaps_between_long_peaks(lender_reclaim: str) -> tuple[Sim, bool]:
    """q0 (4 CPU) every 12 s: a 1-CPU Workload (priority 1, ends before the next cycle) and
    a 4-CPU one queued behind it that runs 11 s (q0 at its nominal); q1 (4 CPU) at its
    nominal with 4 long runs and borrower ``b`` (1 CPU), which fits only in q0's gap
    cycle. 72 cycles (6 periods); whether b was admitted."""
    s = _borrower_beside_a_lender(lender_reclaim)
    period = int(KEEP_MAX_HOLD_S) + 2
    for t in range(period * 6):
        phase = t % period
        if phase == 0:
            s.c.add_workload(workload(f"small{t}").cq("q0").pods(1, cpu=1).priority(1)
                             .build(creation=s.now))
            _add(s, f"big{t}", "q0", 4)
        s.cycle()
        if s.admitted("b"):
            return s, True
        if phase == 0:
            s.finish(f"small{t}")
        elif phase == period - 1:
            s.finish(f"big{t - phase}")
    return s, False


def test_control_without_kept_room_the_borrower_runs_in_the_first_gap() -> None:
    s, admitted = _gaps_between_long_peaks("Never")
    assert admitted and s.now - 1000.0 <= 8.0  # Sim: 1 s a cycle, settle and adds first


def test_k2_a_borrower_refused_once_per_long_peak_is_admitted_within_the_bound() -> None:
    s, admitted = _gaps_between_long_peaks("Any")
    assert admitted, s.c.workload(s.key("b"))
