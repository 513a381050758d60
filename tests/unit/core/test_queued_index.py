"""The index of ClusterQueues with queued Workloads (``QueuedIndex``, kept by the pending
queues bound to it) equals, after any sequence of steps, the set computed from scratch: the
ClusterQueues whose queue has active (not parked) Workloads, in name order. The scheduling
cycle visits that index instead of every ClusterQueue, so an index that missed a change would
skip a ClusterQueue with queued Workloads (or visit a stale name) and change decisions.

Two levels: pending queues driven directly (push, park, unpark, remove, re-keyed Workloads
under Admission Fair Sharing, binding and unbinding), and the core driven as the controllers
drive it (the steps of ``test_local_queue_index``, plus flavors deleted and re-added, which
make ClusterQueues inactive so that the cycle parks all their Workloads, and forks).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.queues import PendingQueue, QueuedIndex
from app.core.scheduling_cycle import Scheduler
from app.core.spec import AdmissionFairSharing, ResourceFlavor
from app.core.types import ClusterQueueName, FlavorName
from app.core.workload import Workload
from tests.builders import Sim, workload
from tests.unit.core.test_local_queue_index import CQS, STEPS, _apply, _cq

PROPS = settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))

NAMES = ("q-b", "q-a", "q-c")  # bound out of name order
QUEUE_OPS = st.one_of(
    st.tuples(st.just("push"), st.integers(0, 2), st.integers(0, 5), st.integers(-1, 1),
              st.sampled_from(["lq-x", "lq-y"])),
    st.tuples(st.just("park"), st.integers(0, 2), st.integers(0, 5)),
    st.tuples(st.just("unpark"), st.integers(0, 2), st.integers(0, 5)),
    st.tuples(st.just("remove"), st.integers(0, 2), st.integers(0, 5)),
    st.tuples(st.just("pop_head"), st.integers(0, 2)),
    st.tuples(st.just("fair"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("unbind"), st.integers(0, 2)),
    st.tuples(st.just("bind"), st.integers(0, 2)),
)


def _expected(queues: dict[str, PendingQueue], bound: set[str]) -> list[str]:
    return sorted(n for n in bound if queues[n].active_count)


@PROPS
@given(st.lists(QUEUE_OPS, max_size=60))
def test_the_index_holds_exactly_the_bound_queues_with_active_workloads(ops: list) -> None:
    index = QueuedIndex()
    queues = {n: PendingQueue() for n in NAMES}
    bound = set(NAMES)
    for n in NAMES:
        queues[n].bind(index, n)
    wls: dict[tuple[int, int], Workload] = {}
    for op in ops:
        kind, name = op[0], NAMES[op[1]]
        q = queues[name]
        if kind == "push":
            _, qi, wi, prio, lq = op
            wl = workload(f"w{wi}").queue(lq).priority(prio).pods(1, cpu=1).build(creation=wi)
            wls[(qi, wi)] = wl
            q.push(wl)  # a new version, LocalQueue or priority of a known key re-keys it
        elif kind in ("park", "unpark", "remove"):
            wl = wls.get((op[1], op[2]))
            if wl is None:
                continue
            if kind == "park":
                if wl.key in q:
                    q.park(wl)
            elif kind == "unpark":
                q.unpark(wl.key)
            else:
                q.remove(wl.key)
        elif kind == "pop_head":
            head = q.head()
            if head is not None:
                q.remove(head)
        elif kind == "fair":
            lq_of = {w.key: f"{w.namespace}/{w.queue_name}" for (qi, _), w in wls.items()
                     if qi == op[1] and w.key in q}
            q.set_fair_sharing((lambda lq: float(len(lq))) if op[2] else None, lq_of)
        elif kind == "unbind":
            q.bind(None, name)
            bound.discard(name)
        else:
            q.bind(index, name)
            bound.add(name)
        assert index.names() == _expected(queues, bound), op
        assert len(index) == len(index.names())
        assert all((n in index) == (n in index.names()) for n in NAMES)


def _check(c: Scheduler) -> None:
    want = [n for n in c._sorted_cq_names() if c._cqs[n].queue.active_count]
    assert c._queued.names() == want


EXTRA = st.one_of(
    STEPS,
    st.tuples(st.just("cycle")),
    st.tuples(st.just("flavor_gone")),
    st.tuples(st.just("flavor_back")),
    st.tuples(st.just("fork"), st.sampled_from(CQS)),
)


@PROPS
@given(st.lists(EXTRA, max_size=40), st.booleans())
def test_the_cores_index_equals_the_cluster_queues_with_queued_workloads(
        steps: list[tuple], fair: bool) -> None:
    s = Sim(_cq("a"), _cq("b"),
            admission_fair_sharing=AdmissionFairSharing(600, 60) if fair else None)
    for i in range(4):  # some queued from the start: 5 cpu never fits a's 4
        s.submit(workload(f"w{i}").queue("lq-a").pods(1, cpu=1 + 2 * i))
    _check(s.c)
    for step in steps:
        if step[0] == "flavor_gone":
            s.c.delete_flavor(FlavorName("default-flavor"))
        elif step[0] == "flavor_back":
            s.c.add_flavor(ResourceFlavor(FlavorName("default-flavor")))
        elif step[0] == "fork":
            fork = s.c.fork(s.c.scope_members(ClusterQueueName(step[1])))
            assert isinstance(fork, Scheduler)
            _check(fork)
            fork.schedule(s.now)
            _check(fork)
        else:
            _apply(s, step)
        _check(s.c)
