"""Scheduler step 1 kept incremental (issue 16): ``Scheduler._apply_requeues`` keeps the parked
Workloads of a BestEffortFIFO ClusterQueue grouped by nomination class across requeues
(``_ParkedClasses``, synced with ``PendingQueue.parked_changes``) instead of regrouping every
parked Workload at each requeue. It must decide exactly as the full regrouping did.

Property (hypothesis): two cores, one with the new step 1 and one with a verbatim copy of the
previous one (``_FullRegroup`` below: regroup every parked key by class at each requeue,
followers lists of keys latest first), are driven through the same random arrivals,
finishes, deletions, re-creations under the same key, evictions (by preemption and by hand),
failed admission writes (``forget``), priority changes, LocalQueue moves, ClusterQueue
strategy / withinClusterQueue / namespaceSelector / stop / admission-scope changes and
namespace relabelling; after every cycle both return the same decisions (by repr) and hold
the same Workloads parked and queued in every ClusterQueue."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.queues import PendingQueue
from app.core.scheduling_cycle import Scheduler
from app.core.spec import AdmissionFairSharing, LocalQueue, QueueingStrategy, ResourceFlavor
from app.core.types import ClusterQueueName, FlavorName, WorkloadKey
from tests.builders import cluster_queue, workload


class _FullRegroup(Scheduler):
    """The core with step 1 as it was before issue 16 (kept verbatim as the reference)."""

    def _apply_requeues(self) -> None:
        marked, self._requeue = self._requeue, {}
        for name in marked:
            cq = self._cqs.get(name)
            if cq is None or not cq.active:
                continue
            spec, q = cq.spec, cq.queue
            sel = spec.namespace_selector
            keys = list(q.parked())
            if sel is None or not sel.selects_all:
                keys = [k for k in keys if self.namespace_matches(spec, self._wls[k].wl.namespace)]
            if spec.queueing_strategy == QueueingStrategy.STRICT_FIFO or len(keys) < 2:
                for k in keys:
                    q.unpark(k)
                continue
            classes: dict[object, list[WorkloadKey]] = {}
            if name in self._afs_cqs:
                for k in keys:
                    rec = self._wls[k]
                    classes.setdefault((rec.lq_key, self._nomination_key(rec, spec)),
                                       []).append(k)
            else:
                for k in keys:
                    classes.setdefault(self._nomination_key(self._wls[k], spec), []).append(k)
            followers: dict[WorkloadKey, list[WorkloadKey]] = {}
            order = q.parked_order
            for members in classes.values():
                if len(members) > 1:
                    members.sort(key=order, reverse=True)  # latest first: pop() gives the next
                rep = members.pop()
                q.unpark(rep)
                if members:
                    followers[rep] = members
            if followers:
                self._followers[name] = followers  # type: ignore[assignment]
            else:
                self._followers.pop(name, None)

    def _release_followers(self) -> None:
        for name in list(self._followers):
            cq = self._cqs.get(name)
            if cq is None:
                del self._followers[name]
                continue
            q, followers = cq.queue, self._followers[name]
            for rep in [r for r in followers if r not in q]:
                members = followers.pop(rep)
                while members:
                    nxt = members.pop()
                    if q.unpark(nxt):  # type: ignore[arg-type]
                        if members:
                            followers[nxt] = members  # type: ignore[index]
                        break
            if not followers:
                del self._followers[name]


N_CQ = 3
SHAPES = ((1, 1), (1, 2), (2, 1), (1, 3))  # (pods, cpu per pod): few shapes, big classes


def _spec(i: int, strict: bool, within: str, selector: bool, stop: bool, afs: bool):
    b = (cluster_queue(f"q{i}").cohort("co")
         .flavor("default-flavor", cpu=2, borrowing_limit=1)
         .preemption(within=within, reclaim="Any"))
    if strict:
        b = b.strict_fifo()
    if selector:
        b = b.selector(team="x")
    if stop:
        b = b.stop("Hold")
    if afs:
        b = b.admission_fair_sharing()
    return b.build()


_cq_change = st.tuples(st.just("cq"), st.integers(0, N_CQ - 1), st.booleans(),
                       st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"]),
                       st.integers(0, 9), st.booleans(), st.booleans())
_ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 2 * N_CQ - 1), st.integers(0, len(SHAPES) - 1),
              st.integers(0, 2), st.integers(1, 6)),
    st.tuples(st.just("add"), st.integers(0, 2 * N_CQ - 1), st.integers(0, len(SHAPES) - 1),
              st.integers(0, 2), st.integers(1, 6)),
    st.tuples(st.sampled_from(["finish", "delete", "readd", "evict", "evicted", "forget"]),
              st.integers(0, 60)),
    st.tuples(st.just("prio"), st.integers(0, 60), st.integers(0, 2)),
    st.tuples(st.just("move"), st.integers(0, 60), st.integers(0, 2 * N_CQ - 1)),
    st.tuples(st.just("ns"), st.booleans()),
    _cq_change,
    st.tuples(st.just("tick")),
), min_size=10, max_size=120)


class _Pair:
    """The same events applied to the new core and the reference core."""

    def __init__(self, afs: bool) -> None:
        cfg = AdmissionFairSharing(half_life_s=60, sampling_s=5) if afs else None
        self.cores = (Scheduler(None, cfg), _FullRegroup(None, cfg))
        self.now = 1000.0
        for c in self.cores:
            c.add_flavor(ResourceFlavor(FlavorName("default-flavor")))
            c.set_namespace("ns", {"team": "x"})
        for i in range(N_CQ):
            self.each("add_cluster_queue", _spec(i, False, "LowerPriority", False, False, afs))
            for lq in (f"lq-q{i}", f"lq-q{i}b"):  # two LocalQueues: classes per LocalQueue
                self.each("add_local_queue", LocalQueue("ns", lq, ClusterQueueName(f"q{i}")))

    def each(self, method: str, *args: object) -> list[object]:
        results = [getattr(c, method)(*args) for c in self.cores]
        assert results[0] == results[1], (method, args, results)
        return results

    def cycle(self) -> None:
        self.now += 1
        new, old = (repr(c.schedule(self.now)) for c in self.cores)
        assert new == old
        for name in (ClusterQueueName(f"q{i}") for i in range(N_CQ)):
            qs: list[PendingQueue] = [c._cqs[name].queue for c in self.cores]
            assert sorted(qs[0].parked()) == sorted(qs[1].parked()), name
            assert sorted(qs[0].active()) == sorted(qs[1].active()), name


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(afs=st.booleans(), ops=_ops)
def test_requeue_classes_properties(afs, ops):
    pair = _Pair(afs)
    new = pair.cores[0]
    names: list[str] = []

    def key_of(i: int) -> WorkloadKey | None:
        return WorkloadKey(f"ns/{names[i % len(names)]}") if names else None

    for op in ops:
        kind = op[0]
        if kind == "add":  # n identical Workloads (one nomination class unless the policy
            _, lq, shape, prio, n = op  # orders by time)
            pods, cpu = SHAPES[shape]
            queue = f"lq-q{lq % N_CQ}" + ("b" if lq >= N_CQ else "")
            for _ in range(n):
                name = f"w{len(names)}"
                names.append(name)
                pair.each("add_workload", workload(name).queue(queue).pods(pods, cpu=cpu)
                          .priority(prio).build(pair.now))
        elif kind in ("finish", "delete", "readd", "evict", "evicted", "forget", "prio", "move"):
            key = key_of(op[1])
            wl = None if key is None else new.domain_workload(key)
            if wl is None:
                continue
            info = new.workload(key)
            if kind == "finish" and info.state == "admitted":
                pair.each("finish", key)
            elif kind == "delete":
                pair.each("delete_workload", key)
            elif kind == "readd":  # deleted and created again under the same key
                pair.each("delete_workload", key)
                pair.each("add_workload", replace(wl, admission=None, quota_reserved_at=None,
                                                  evicted_at=None, creation=pair.now))
            elif kind == "evict":
                pair.each("evict", key, pair.now)
            elif kind == "evicted" and info.state == "evicting":
                pair.each("finish_eviction", key, pair.now)
            elif kind == "forget":
                pair.each("forget", key)
            elif kind == "prio":
                pair.each("update_workload", replace(wl, priority=op[2]))
            elif kind == "move" and wl.admission is None:
                lq = op[2]
                queue = f"lq-q{lq % N_CQ}" + ("b" if lq >= N_CQ else "")
                pair.each("update_workload", replace(wl, queue_name=queue))
        elif kind == "ns":
            pair.each("set_namespace", "ns", {"team": "x" if op[1] else "y"})
        elif kind == "cq":
            _, i, strict, within, selector, stop, mode = op
            # Mostly BestEffortFIFO, all namespaces, active: the kept grouping's case.
            pair.each("update_cluster_queue", _spec(i, strict, within, selector == 0,
                                                    stop and selector == 1, mode))
        pair.cycle()
    for _ in range(5):
        pair.cycle()


def test_a_long_backlog_is_grouped_once_then_only_its_changes():
    """The kept grouping is synced, not rebuilt: after the first requeue only the keys that
    changed are filed again (white box: ``_ParkedClasses.of`` keeps its entries)."""
    pair = _Pair(afs=False)
    new = pair.cores[0]
    pair.each("add_workload", workload("run").queue("lq-q0").pods(1, cpu=3).build(pair.now))
    for _ in range(3):
        pair.cycle()
    for i in range(200):
        pair.each("add_workload",
                  workload(f"w{i:03d}").queue("lq-q0").pods(1, cpu=1 + i % 2).build(pair.now))
    for _ in range(220):
        pair.cycle()  # each head parked in turn
    pair.each("add_workload", workload("x").queue("lq-q1").pods(1, cpu=1).build(pair.now))
    pair.cycle()
    pair.each("finish", WorkloadKey("ns/x"))  # a requeue of the cohort: the grouping is built
    pair.cycle()
    pc = new._parked_classes[ClusterQueueName("q0")]
    before = dict(pc.of)
    assert len(before) == 198  # 200 parked, one representative per class returned
    pair.each("add_workload", workload("y").queue("lq-q1").pods(1, cpu=1).build(pair.now))
    pair.cycle()
    pair.each("finish", WorkloadKey("ns/y"))
    pair.cycle()
    after = new._parked_classes[ClusterQueueName("q0")].of
    assert new._parked_classes[ClusterQueueName("q0")] is pc
    # Same filing for every key still grouped: nothing was re-sorted or re-classified.
    assert all(before[k] is v for k, v in after.items() if k in before)
    for _ in range(5):
        pair.cycle()


def test_followers_kept_through_a_requeue_of_one_parked_workload_still_hand_over():
    """The previous step 1 kept a ClusterQueue's followers lists when a requeue found fewer
    than two parked Workloads, and a member parked again later was still handed over when
    its representative left (costing its queue a cycle). The kept grouping does the same
    (mutation-checked: dropping the followers there admits ``d`` a cycle early)."""
    pair = _Pair(afs=False)
    pair.each("update_cluster_queue", _spec(0, False, "Never", False, False, False))
    new = pair.cores[0]
    q = new._cqs[ClusterQueueName("q0")].queue

    def add(name: str, cq: str, cpu: int) -> None:
        pair.each("add_workload", workload(name).queue(f"lq-{cq}").pods(1, cpu=cpu)
                  .build(pair.now))
        pair.now += 1

    add("r1", "q0", 2)  # q0: 1 cpu left (nominal 2 + borrowingLimit 1)
    pair.cycle()
    for name in ("a", "b", "c"):
        add(name, "q0", 2)
    for _ in range(4):
        pair.cycle()  # a, b, c parked in turn
    add("x", "q1", 1)
    pair.cycle()
    pair.each("finish", WorkloadKey("ns/x"))
    pair.cycle()  # requeue: one class {a, b, c}, a its representative, parked again
    assert list(new._followers[ClusterQueueName("q0")]) == ["ns/a"] and q.is_parked("ns/a")
    add("y", "q1", 1)
    pair.cycle()
    wl_b = new.domain_workload(WorkloadKey("ns/b"))
    pair.each("update_workload", replace(wl_b, priority=5))  # b back in the heap
    pair.each("delete_workload", WorkloadKey("ns/c"))
    pair.each("finish", WorkloadKey("ns/y"))
    pair.cycle()  # a requeue with a alone parked (followers kept); b evaluated, parked
    assert q.is_parked("ns/b") and not q.is_parked("ns/a")
    pair.each("delete_workload", WorkloadKey("ns/a"))  # the representative leaves...
    add("d", "q0", 1)
    pair.cycle()  # ...and hands over to b, which takes q0's cycle: d waits
    assert new.workload(WorkloadKey("ns/d")).state == "pending"
    pair.cycle()
    assert new.workload(WorkloadKey("ns/d")).state == "admitted"
