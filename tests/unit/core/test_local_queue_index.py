"""The core's pending index per LocalQueue stays exact whatever happens to Workloads and
queues, so deleting a LocalQueue never meets a Workload that is gone or elsewhere.

A KeyError in ``Scheduler._reroute_lq`` (a LocalQueue deleted while its index still listed a
Workload that had moved or gone) was seen on the lab; 8151b1c fixed the queue-name change
that caused it. This property test drives random sequences of what the controllers do
(Workloads created, moved between LocalQueues, admitted and assumed, confirmed or
forgotten, evicted, cleared by their owner, deleted; LocalQueues created, re-pointed,
stopped, deleted; ClusterQueues deleted and re-created; HoldAndDrain; scheduling cycles,
with and without Admission Fair Sharing) and checks after every step that each index
entry is a known, non-admitted Workload of that LocalQueue, that each waiting Workload is
indexed under its own LocalQueue, and that the ClusterQueue heaps (and their per-LocalQueue
heaps under Admission Fair Sharing) hold exactly their pending Workloads. With the
pre-8151b1c ``update_workload`` it fails within a few examples.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.scheduling_cycle import Scheduler
from app.core.spec import AdmissionFairSharing, LocalQueue, StopPolicy
from app.core.types import ClusterQueueName
from tests.builders import Sim, cluster_queue, workload

LQS = ("lq-a", "lq-b", "lq-x", "lq-y")  # lq-x and lq-y exist only once a step creates them
CQS = ("a", "b")
N = 6  # Workload names w0..w5

STEPS = st.one_of(
    st.tuples(st.just("submit"), st.integers(0, N - 1), st.sampled_from(LQS),
              st.integers(1, 5), st.integers(-1, 1)),
    st.tuples(st.just("move"), st.integers(0, N - 1), st.sampled_from(LQS)),
    st.tuples(st.just("cycle")),
    st.tuples(st.just("forget_assumed")),
    st.tuples(st.just("confirm_assumed")),
    st.tuples(st.just("evict"), st.integers(0, N - 1)),
    st.tuples(st.just("finish_eviction"), st.integers(0, N - 1)),
    st.tuples(st.just("clear_admission"), st.integers(0, N - 1)),
    st.tuples(st.just("delete_workload"), st.integers(0, N - 1)),
    st.tuples(st.just("delete_lq"), st.sampled_from(LQS)),
    st.tuples(st.just("add_lq"), st.sampled_from(LQS), st.sampled_from(CQS),
              st.sampled_from(list(StopPolicy))),
    st.tuples(st.just("delete_cq"), st.sampled_from(CQS)),
    st.tuples(st.just("add_cq"), st.sampled_from(CQS)),
    st.tuples(st.just("drain")),
)


def _cq(name: str):  # noqa: ANN202 - a ClusterQueueSpec
    return (cluster_queue(name).cohort("co").flavor("default-flavor", cpu=4)
            .preemption(within="LowerPriority", reclaim="Any").admission_fair_sharing().build())


def check_index(c: Scheduler) -> None:
    """The invariants of the module doc (reads the core's private indexes on purpose)."""
    for lq, keys in c._pending_by_lq.items():
        for k in keys:
            assert k in c._wls, (lq, k)
            rec = c._wls[k]
            assert rec.state != "admitted", (lq, k)
            assert rec.lq_key == lq, (lq, k, rec.lq_key)
    for k, rec in c._wls.items():
        if rec.state != "admitted":
            assert k in c._pending_by_lq.get(rec.lq_key, {}), (k, rec.state, rec.lq_key)
    for name, cq in c._cqs.items():
        q = cq.queue
        for k in [*q.active(), *q.parked()]:
            rec = c._wls[k]
            assert (rec.cq, rec.state) == (name, "pending"), (name, k, rec.cq, rec.state)
            if q.usage_of is not None:
                assert q._lq_of[k] == rec.lq_key, (k, q._lq_of[k], rec.lq_key)


def _apply(s: Sim, step: tuple) -> None:
    c, kind = s.c, step[0]
    named = len(step) > 1 and isinstance(step[1], int)
    rec = c._wls.get(s.key(f"w{step[1]}")) if named else None
    if kind == "submit" and rec is None:
        _, i, lq, cpu, prio = step
        s.submit(workload(f"w{i}").queue(lq).pods(1, cpu=cpu).priority(prio))
    elif kind == "move" and rec is not None:
        # The API object: without an admission while ours is still being written.
        base = replace(rec.wl, admission=None, quota_reserved_at=None) if rec.assumed \
            else rec.wl
        c.update_workload(replace(base, queue_name=step[2]))
    elif kind == "cycle":
        s.cycle()
    elif kind == "forget_assumed":
        for k in list(c._wls):
            c.forget(k)
    elif kind == "confirm_assumed":
        for r in [r for r in c._wls.values() if r.assumed]:
            c.update_workload(r.wl)
    elif kind == "evict" and rec is not None:
        c.evict(rec.wl.key, s.now)
    elif kind == "finish_eviction" and rec is not None:
        c.finish_eviction(rec.wl.key, s.now)
    elif kind == "clear_admission" and rec is not None:
        c.update_workload(replace(rec.wl, admission=None, quota_reserved_at=None))
    elif kind == "delete_workload" and rec is not None:
        c.delete_workload(rec.wl.key)
    elif kind == "delete_lq":
        c.delete_local_queue(f"ns/{step[1]}")
    elif kind == "add_lq":
        c.add_local_queue(LocalQueue("ns", step[1], ClusterQueueName(step[2]),
                                     stop_policy=step[3]))
    elif kind == "delete_cq":
        c.delete_cluster_queue(ClusterQueueName(step[1]))
    elif kind == "add_cq":
        c.add_cluster_queue(_cq(step[1]))
    elif kind == "drain":
        c.drain(s.now)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(STEPS, max_size=40), st.booleans())
def test_the_local_queue_index_stays_exact_and_deleting_queues_never_fails(
        steps: list[tuple], fair: bool) -> None:
    s = Sim(_cq("a"), _cq("b"),
            admission_fair_sharing=AdmissionFairSharing(600, 60) if fair else None)
    for step in steps:
        _apply(s, step)
        check_index(s.c)
        for lq in LQS:  # the views read the same index
            s.c.local_queue_status(f"ns/{lq}")
            s.c.local_queue_fair_sharing(f"ns/{lq}")
        for name in CQS:
            s.c.pending_workloads(ClusterQueueName(name))
    for lq in LQS:
        s.c.delete_local_queue(f"ns/{lq}")
        check_index(s.c)
    s.cycle()
