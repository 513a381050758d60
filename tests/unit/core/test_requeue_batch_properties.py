"""Breaker check of the requeue batch (``Scheduler(requeue_batch_s=p)``, Kueue v0.17.1
``requeueBatchPeriod``), driven through random events:

- safety, with p > 0: a cycle that starts within quota (nominal, borrowing and lending limits,
  ``tests.unit.core.test_properties.check_capacity``) ends within it; admitted Workloads hold
  exactly their pod sets; no Workload is admitted twice; every Workload is in exactly one
  place (admitted, or in one ClusterQueue's heap or parked set, or waiting for its queue);
- ``next_wakeup()`` after ``schedule(now)`` is never at or before ``now`` (a live loop would
  spin) and is not None while a batch waits; no mark is left unstamped after a cycle;
- liveness: once everything that runs has finished (a driver running a cycle at every
  ``next_wakeup``), returning every parked Workload at once admits nothing more;
- the same state as p = 0: with each event 10 s after the last and both settled after it,
  BestEffortFIFO without preemption ends every event in the same state (a finish returns the
  parked Workloads at once or after p, with no head tried in between). With preemption or
  StrictFIFO the two legitimately differ: a Workload tried at once (an evicted one, a
  StrictFIFO head, a new arrival) takes freed room the parked ones would have competed for
  at p = 0, as in Kueue;
- the ETA projection (``app.core.eta``) with p > 0 ends and dates every Workload p = 0 dates.

Events: submissions, finishes, deletions, completed evictions, ClusterQueue quota, cohort,
strategy, namespace selector, minimum runtime and reclaim backoff updates, deletion and
re-creation of ClusterQueues, a flavor deleted and re-created (its ClusterQueues inactive
meanwhile), namespace label changes, idle time. ClusterQueues:
``test_properties.cluster_queues`` (flat cohorts, two flavors, lending and borrowing limits,
every preemption policy, StrictFIFO), optionally fair sharing and an Admission Fair Sharing
queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.core.decisions import Admit, Preempt
from app.core.eta import RuntimeModel, estimate
from app.core.scheduling_cycle import Scheduler
from app.core.spec import (
    AdmissionFairSharing,
    ClusterQueueSpec,
    FairSharing,
    LabelSelector,
    LocalQueue,
    PreemptionPolicy,
    QueueingStrategy,
    ResourceFlavor,
)
from app.core.types import ClusterQueueName, FlavorName, FlavorResource, WorkloadKey
from tests.builders import Sim, cluster_queue, workload
from tests.unit.core.test_properties import check_capacity, cluster_queues

BATCH = st.sampled_from((0.3, 1.0, 2.5))

_OP = st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 3), st.integers(1, 3), st.integers(1, 4),
              st.integers(-2, 2), st.booleans()),
    st.tuples(st.just("submit"), st.integers(0, 3), st.integers(1, 3), st.integers(1, 4),
              st.integers(-2, 2), st.booleans()),
    st.tuples(st.sampled_from(("finish", "finish", "evicted", "delete")), st.integers(0, 60)),
    st.tuples(st.just("tick"), st.sampled_from((0.0, 0.1, 0.25, 0.5, 1.0, 2.0))),
    st.tuples(st.just("quota"), st.integers(0, 3), st.integers(-2, 3)),
    st.tuples(st.just("move"), st.integers(0, 3), st.sampled_from((None, "co", "other"))),
    st.tuples(st.just("strategy"), st.integers(0, 3)),
    st.tuples(st.just("drop"), st.integers(0, 3)),
    st.tuples(st.just("ns"), st.booleans()),
    st.tuples(st.just("selector"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("timers"), st.integers(0, 3), st.sampled_from((None, 0.5, 2.0)),
              st.sampled_from((None, 0.7, 3.0))),
    st.tuples(st.just("flavor"), st.booleans()),
)
# Counters for a manual run: cycles, batches that returned parked Workloads, per-event state
# comparisons with something parked, ETA starts compared, equivalence runs stopped at a
# ClusterQueue active again.
STATS = {"cycles": 0, "batches": 0, "parked_compared": 0, "etas_compared": 0,
         "reactivations": 0}
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def _requota(spec: ClusterQueueSpec, delta: int) -> ClusterQueueSpec:
    b = cluster_queue(spec.name).cohort(spec.cohort)
    for f, q in spec.quotas.items():
        nominal = max(0, q.nominal + delta * 1000) // 1000
        ll = None if q.lending_limit is None else min(q.lending_limit // 1000, nominal)
        bl = None if q.borrowing_limit is None else q.borrowing_limit // 1000
        b = b.flavor(f.flavor, cpu=nominal, borrowing_limit=bl, lending_limit=ll)
    new = b.build()
    return replace(spec, resource_groups=new.resource_groups)


class World:
    """One core (``requeue_batch_s`` = p) with a clock, the current ClusterQueue specs and
    the events applied so far; ``cycle`` checks the safety properties."""

    def __init__(self, specs: list[ClusterQueueSpec], p: float, fair: bool, afs: bool) -> None:
        self.sim = Sim(*specs, fair_sharing=FairSharing() if fair else None,
                       admission_fair_sharing=AdmissionFairSharing(half_life_s=10.0,
                                                                   sampling_s=2.0)
                       if afs else None, requeue_batch_s=p)
        self.c: Scheduler = self.sim.c
        self.p = p
        self.now = 1000.0
        self.specs = {s.name: s for s in specs}
        self.gone: dict[ClusterQueueName, ClusterQueueSpec] = {}
        self.names: list[WorkloadKey] = []
        self.cycles = 0

    # ---- events ---------------------------------------------------------------------------
    def apply(self, i: int, op: tuple) -> None:
        c, kind = self.c, op[0]
        order = sorted({*self.specs, *self.gone})
        if kind == "submit":
            _, cq, pods, cpu, prio, two = op
            b = workload(f"w{i}").cq(order[cq % len(order)]).pods(pods, cpu=cpu).priority(prio) \
                .limit(20.0 + 10.0 * (i % 4))
            if two:
                b = b.pods(1, cpu=1, name="second")
            wl = b.build(creation=self.now)
            c.add_workload(wl)
            self.names.append(wl.key)
        elif kind in ("finish", "evicted", "delete"):
            if not self.names:
                return
            key = self.names[op[1] % len(self.names)]
            info = c.workload(key)
            if info is None:
                return
            if kind == "finish" and info.state == "admitted":
                c.finish(key)
            elif kind == "evicted" and info.state == "evicting":
                c.finish_eviction(key, self.now)
            elif kind == "delete":
                c.delete_workload(key)
        elif kind == "tick":
            self.now += op[1]
        elif kind in ("quota", "move", "strategy", "selector", "timers"):
            name = order[op[1] % len(order)]
            spec = self.specs.get(name)
            if spec is None:
                return
            if kind == "quota":
                spec = _requota(spec, op[2])
            elif kind == "move":
                spec = replace(spec, cohort=op[2])
            elif kind == "selector":  # namespace ns matches only while labelled team=a
                spec = replace(spec, namespace_selector=LabelSelector(
                    {"team": "a"} if op[2] else {}))
            elif kind == "timers":
                spec = replace(spec, min_runtime_s=op[2], reclaim_backoff_s=op[3])
            else:
                strict = spec.queueing_strategy == QueueingStrategy.STRICT_FIFO
                spec = replace(spec, queueing_strategy=QueueingStrategy.BEST_EFFORT_FIFO
                               if strict else QueueingStrategy.STRICT_FIFO)
            self.specs[name] = spec
            c.update_cluster_queue(spec)
        elif kind == "drop":
            name = order[op[1] % len(order)]
            if name in self.specs:
                assert c.delete_cluster_queue(name)
                self.gone[name] = self.specs.pop(name)
            else:
                spec = self.gone.pop(name)
                c.add_cluster_queue(spec)
                self.specs[name] = spec
        elif kind == "ns":
            c.set_namespace("ns", {"team": "a" if op[1] else "b"})
        elif kind == "flavor":  # the ClusterQueues naming f1 inactive until it is back
            if op[1]:
                c.add_flavor(ResourceFlavor(FlavorName("f1")))
            else:
                c.delete_flavor(FlavorName("f1"))

    # ---- cycles and checks ----------------------------------------------------------------
    def capacity_ok(self) -> bool:
        try:
            check_capacity(self.sim, list(self.specs.values()))
        except AssertionError:
            return False
        return True

    def cycle(self) -> list:
        c = self.c
        before = {k: c.workload(k).state for k in c.workload_keys()}
        ok = self.capacity_ok()
        due = c._requeue_next
        ds = c.schedule(self.now)
        self.cycles += 1
        STATS["cycles"] += 1
        if due is not None and due <= self.now:
            STATS["batches"] += 1
        admitted = [d.workload for d in ds if isinstance(d, Admit)]
        assert len(set(admitted)) == len(admitted), "admitted twice in one cycle"
        for k in admitted:
            assert before[k] == "pending", (k, before[k])
        for d in ds:
            if isinstance(d, Preempt):
                for v in d.victims:
                    assert before[v.workload] == "admitted", v
        if ok:
            assert self.capacity_ok(), "a cycle that started within quota ended beyond it"
        self.check_held()
        self.check_places()
        self.check_wakeup()
        return ds

    def check_held(self) -> None:
        """Each live ClusterQueue's usage is what its admitted Workloads hold, each holding
        its whole request (every pod set, full count)."""
        c = self.c
        held: dict[ClusterQueueName, dict[FlavorResource, int]] = {n: {} for n in self.specs}
        for k in c.workload_keys():
            info = c.workload(k)
            if info.state == "pending":
                continue
            wl = c.domain_workload(k)
            assert wl is not None
            psas = {a.name: a for a in info.admission.pod_set_assignments}
            assert set(psas) == {ps.name for ps in wl.pod_sets}, k
            if info.cluster_queue not in held:
                continue  # its ClusterQueue was deleted: it holds nothing there meanwhile
            mine = held[info.cluster_queue]
            for ps in wl.pod_sets:
                a = psas[ps.name]
                assert a.count == ps.count, k
                for r, v in ps.requests.items():
                    f = FlavorResource(a.flavors[r], r)
                    mine[f] = mine.get(f, 0) + v * ps.count
        for n, want in held.items():
            assert c.usage(n) == {f: v for f, v in want.items() if v}, n

    def check_places(self) -> None:
        c = self.c
        seen: dict[WorkloadKey, str] = {}
        for name, cq in c._cqs.items():
            for k in [*cq.queue.active(), *cq.queue.parked()]:
                assert k not in seen, (k, seen[k], name)
                seen[k] = name
        for k in c.workload_keys():
            info = c.workload(k)
            rec = c._wls[k]
            if info.state == "pending" and rec.cq is not None and rec.cq in c._cqs:
                assert seen.get(k) == rec.cq, (k, rec.cq, seen.get(k))
            else:
                assert k not in seen, (k, info.state, seen[k])
        for k in seen:
            assert c.workload(k).state == "pending", k

    def check_wakeup(self) -> None:
        c = self.c
        at = c.next_wakeup()
        assert not c._requeue, "a mark left after the cycle: no wake-up names it"
        if c._requeue_due:
            assert at is not None and at <= min(c._requeue_due.values())
        if at is not None:
            assert at > self.now, (at, self.now)

    def settle(self, horizon: float = 200.0) -> None:
        """Cycles until a fixed point with nothing due before ``now + horizon`` but the
        recurring Admission Fair Sharing samples; the clock moves to each wake-up."""
        end = self.now + horizon
        for _ in range(2000):
            if self.cycle():
                continue
            at = self.c.next_wakeup()
            if at is None or at > end or (not self.c._requeue_due and
                                          self.c._wake_at is None and self.c._afs_cqs):
                return
            self.now = at
        raise AssertionError("no fixed point")

    def drain(self) -> None:
        """Finish everything that runs (evictions complete) until nothing does."""
        c = self.c
        for _ in range(200):
            self.settle()
            running = [k for k in c.workload_keys() if c.workload(k).state != "pending"]
            if not running:
                break
            for k in running:
                if c.workload(k).state == "evicting":
                    c.finish_eviction(k, self.now)
                else:
                    c.finish(k)
            self.now += 1.0
        else:
            raise AssertionError("still running")


def _afs_queue(w: World) -> None:
    spec = cluster_queue("cqa").cohort("co").flavor("f0", cpu=3).admission_fair_sharing() \
        .preemption(within="LowerPriority").build()
    w.specs[spec.name] = spec
    w.c.add_cluster_queue(spec)
    w.c.add_local_queue(LocalQueue("ns", "lq-cqa", spec.name))


@PROPS
@given(cluster_queues(), st.lists(_OP, min_size=20, max_size=60), BATCH, st.booleans(),
       st.booleans())
def test_batched_requeues_keep_quota_places_and_wakeups(specs, ops, p, fair, afs):
    w = World(specs, p, fair, afs)
    if afs:
        _afs_queue(w)
    for i, op in enumerate(ops):
        w.apply(i, op)
        if op[0] == "tick" or i % 2 == 0:
            w.cycle()
    w.settle()


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(cluster_queues(), st.lists(_OP, min_size=15, max_size=40), BATCH, st.booleans())
def test_draining_leaves_no_parked_workload_that_could_run(specs, ops, p, fair):
    """Once everything that runs has finished (settled at every wake-up), what still waits
    can never run: returning every parked Workload at once (as p = 0 after a change of
    everything) admits nothing more. A lost mark or a batch never due fails here."""
    w = World(specs, p, fair, False)
    for i, op in enumerate(ops):
        w.apply(i, op)
        if i % 2 == 0:
            w.cycle()
    w.drain()
    c = w.c
    c.requeue_batch_s = 0.0
    c._bump_all()
    c._requeue.update(dict.fromkeys(c._cqs))
    for _ in range(100):
        ds = w.cycle()
        assert not [d for d in ds if isinstance(d, Admit)], ds
        if not ds:
            break


def _no_preemption(spec: ClusterQueueSpec) -> ClusterQueueSpec:
    return replace(spec, preemption=PreemptionPolicy(),
                   queueing_strategy=QueueingStrategy.BEST_EFFORT_FIFO)


_SUBMIT = st.tuples(st.just("submit"), st.integers(0, 3), st.integers(1, 3), st.integers(1, 4),
                    st.integers(-2, 2), st.booleans())
_QUIET_OP = st.one_of(
    _SUBMIT,
    st.tuples(st.sampled_from(("finish", "finish", "delete")), st.integers(0, 60)),
    st.tuples(st.just("quota"), st.integers(0, 3), st.integers(-2, 3)),
    st.tuples(st.just("move"), st.integers(0, 3), st.sampled_from((None, "co", "other"))),
    st.tuples(st.just("ns"), st.booleans()),
)


def _states(w: World) -> dict:
    c = w.c
    return {k: (i.state, i.cluster_queue, i.inadmissible)
            for k in c.workload_keys() if (i := c.workload(k)) is not None}


def _spaced(worlds: list[World], ops: list) -> Iterator[tuple[int, tuple]]:
    """Each event 10 s after the last in every world, each world settled after it (at
    every wake-up up to 5 s on); yields after each event."""
    for i, op in enumerate(ops):
        for w in worlds:
            w.now = 1000.0 + 10.0 * i
            w.apply(i, op)
            w.settle(horizon=5.0)
        yield i, op


def _inactive_with_workloads(w: World) -> set[ClusterQueueName]:
    return {n for n, cq in w.c._cqs.items()
            if not cq.active and (cq.queue.active_count or cq.queue.parked_count)}


def _reactivated_beside_parked(w: World, waiting: set[ClusterQueueName], parked: set) -> bool:
    """Whether a ClusterQueue of ``waiting`` (inactive with Workloads before the event) is
    active now in the cohort of another ClusterQueue that had ``parked`` Workloads (its
    ``(cluster_queue, ...)`` states before the event)."""
    cqs = w.c._cqs
    back = {n for n in waiting if n in cqs and cqs[n].active}
    cohorts = {cqs[n].spec.cohort for n in back} - {None}
    return any(q not in back and q in cqs and cqs[q].spec.cohort in cohorts for q in parked)


# Found in a CI run: cq1 (borrowingLimit 0) leaves its cohort, so it is inactive (Kueue:
# a borrowingLimit needs a cohort) while w11 and w12 arrive; back in the cohort they are
# tried at once, and at p > 0 take the room cq0's parked w0 would have had at p = 0.
_REACTIVATED = (
    [cluster_queue("cq0").flavor("f0", cpu=0).build(),
     cluster_queue("cq1").cohort("co").flavor("f0", cpu=0, borrowing_limit=0).build()],
    [("submit", 0, 1, 1, 0, False), ("quota", 1, 3), ("move", 1, None),
     ("submit", 1, 1, 1, 0, False), ("submit", 1, 1, 2, 0, False), ("move", 0, "co"),
     ("move", 1, "co")],
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(cluster_queues(), st.lists(_QUIET_OP, min_size=15, max_size=40), BATCH, st.booleans())
@example(*_REACTIVATED, 0.3, False)
def test_events_settled_past_their_batch_end_as_without_a_batch(specs, ops, p, fair):
    """BestEffortFIFO, no preemption, no timers: after each event both worlds settle (p > 0
    at every wake-up); the next event comes 10 s later in both. Each event then ends in the
    same state: a finish returns the parked Workloads at once (p = 0) or after p, but with
    no head tried in between, the same Workloads compete in the same state. Up to the first
    event that makes a ClusterQueue with Workloads in it active again (here: back into a
    cohort after leaving it with a borrowingLimit) in a cohort with parked Workloads of
    another ClusterQueue, and with no ClusterQueue deleted and re-created: the Workloads
    waiting for such a queue are in its heap and tried at once, as in Kueue (an inactive
    queue's heap is skipped until it is active again), while the cohort's parked ones wait
    for their batch; the worlds may differ from then on."""
    specs = [_no_preemption(s) for s in specs]
    worlds = [World(specs, q, fair, False) for q in (0.0, p)]
    waiting: set[ClusterQueueName] = set()
    parked: set[ClusterQueueName] = set()
    for i, op in _spaced(worlds, ops):
        if _reactivated_beside_parked(worlds[0], waiting, parked):
            STATS["reactivations"] += 1
            break
        a, b = (_states(w) for w in worlds)
        waiting = _inactive_with_workloads(worlds[0])
        parked = {v[1] for v in a.values() if v[0] == "pending" and v[2]}
        STATS["parked_compared"] += any(v[2] for v in a.values())
        assert a == b, (i, op, {k: (a.get(k), b.get(k)) for k in {*a, *b} if a.get(k) != b.get(k)})


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(cluster_queues(n_max=3), st.lists(st.one_of(_QUIET_OP, _SUBMIT, _SUBMIT), min_size=10,
                                          max_size=25), BATCH)
def test_the_eta_with_a_batch_dates_what_it_dates_without(specs, ops, p):
    """The projection forks the core (``Scheduler.fork``) and runs cycles at its
    ``next_wakeup``: with p > 0 (a batch waiting when it is asked) it ends, untruncated,
    and dates every Workload p = 0 dates, none before now. (Not each no earlier: a parked
    Workload that p = 0 tries, alone, at once can take the room p > 0 gives an older one
    whose batch returns them together.)"""
    specs = [_requota(_no_preemption(s), 2) for s in specs]  # more that fits in time
    worlds = [World(specs, q, False, False) for q in (0.0, p)]
    for _ in _spaced(worlds, ops):
        pass
    for w in worlds:
        w.now += 10.0
        running = [k for k in w.c.workload_keys() if w.c.workload(k).state == "admitted"]
        if running:
            w.c.finish(running[0])
            w.cycle()
    runtimes = RuntimeModel()
    for name in sorted(worlds[0].specs):
        runs = [estimate(w.c, name, w.now, runtimes) for w in worlds]
        assert not runs[1].truncated
        for k, e0 in runs[0].etas.items():
            e1 = runs[1].etas[k]
            if e0.start is not None:
                assert e1.start is not None and e1.start >= worlds[1].now, (k, e0, e1)
                STATS["etas_compared"] += 1
