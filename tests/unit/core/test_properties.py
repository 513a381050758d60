"""Property tests (hypothesis) over random flavors, cohorts, quotas and workload streams.

Invariants are checked with arithmetic written here from the Kueue rules (reference 3.6),
independently of ``app.core.quota``:

- per ClusterQueue: usage ≤ nominal (no cohort) or ≤ nominal + borrowingLimit;
- per cohort: Σ max(usage_i, guaranteed_i) ≤ Σ nominal_i, where guaranteed_i =
  nominal_i − lendingLimit_i (0 without a lendingLimit) — i.e. the cohort's capacity;
- lendingLimit: the other members never use more than their own nominal plus the
  ClusterQueue's lendingLimit;
- all-or-nothing: an admitted Workload holds every pod set, full count, full usage;
- StrictFIFO never admits past its head; decisions are deterministic; usage drains to 0;
- preemption is minimal: no victim can be spared.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from app.core.decisions import Admit, PendingReason, Preempt
from app.core.preemption import Candidate, Preemptor, find_targets
from app.core.quota import QuotaTree, quotas_of
from app.core.spec import ClusterQueueSpec
from app.core.types import ClusterQueueName, FlavorResource, WorkloadKey
from tests.builders import Sim, cluster_queue, fr, workload

FLAVORS = ("f0", "f1")
PROPS = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))


@st.composite
def cluster_queues(draw, n_max: int = 4) -> list[ClusterQueueSpec]:
    n = draw(st.integers(1, n_max))
    flavors = FLAVORS[: draw(st.integers(1, 2))]
    out = []
    for i in range(n):
        cohort = draw(st.sampled_from([None, "co", "co", "co", "other"]))
        b = cluster_queue(f"cq{i}").cohort(cohort)
        for f in flavors:
            nominal = draw(st.integers(0, 6))
            bl = ll = None
            if cohort is not None:
                bl = draw(st.none() | st.integers(0, 4))
                ll = draw(st.none() | st.integers(0, nominal))
            b = b.flavor(f, cpu=nominal, borrowing_limit=bl, lending_limit=ll)
        if draw(st.booleans()):
            b = b.strict_fifo()
        reclaim = draw(st.sampled_from(["Never", "LowerPriority", "Any"]))
        borrow = (
            "Never" if reclaim == "Never" else draw(st.sampled_from(["Never", "LowerPriority"]))
        )
        b = b.preemption(
            within=draw(st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"])),
            reclaim=reclaim,
            borrow_within_cohort=borrow,
        )
        if len(flavors) > 1 and draw(st.booleans()):
            b = b.fungibility(
                "TryNextFlavor",
                "TryNextFlavor",
                draw(st.sampled_from(["BorrowingOverPreemption", "PreemptionOverBorrowing"])),
            )
        out.append(b.build())
    return out


OP = st.one_of(
    st.tuples(
        st.just("submit"),
        st.integers(0, 3),
        st.integers(1, 3),
        st.integers(1, 4),
        st.integers(-2, 2),
        st.booleans(),
    ),
    st.tuples(st.just("cycle")),
    st.tuples(st.just("cycle")),
    st.tuples(st.just("finish"), st.integers(0, 50)),
    st.tuples(st.just("finish_eviction"), st.integers(0, 50)),
)


@dataclass
class Run:
    sim: Sim
    decisions: list


def _local(spec: ClusterQueueSpec, f: FlavorResource) -> int:
    q = spec.quota(f)
    if q is None or q.lending_limit is None:
        return 0
    return max(0, q.nominal - q.lending_limit)


def _nominal(spec: ClusterQueueSpec, f: FlavorResource) -> int:
    q = spec.quota(f)
    return 0 if q is None else q.nominal


def check_capacity(sim: Sim, specs: list[ClusterQueueSpec]) -> None:
    usage = {s.name: sim.c.usage(s.name) for s in specs}
    for s in specs:
        for f, q in s.quotas.items():
            u = usage[s.name].get(f, 0)
            if s.cohort is None:
                assert u <= q.nominal, (s.name, f, u)
            elif q.borrowing_limit is not None:
                assert u <= q.nominal + q.borrowing_limit, (s.name, f, u)
    for cohort in {s.cohort for s in specs if s.cohort is not None}:
        members = [s for s in specs if s.cohort == cohort]
        for f in {f for s in members for f in s.quotas}:
            used = sum(max(usage[m.name].get(f, 0), _local(m, f)) for m in members)
            assert used <= sum(_nominal(m, f) for m in members), (cohort, f)
            for c in members:
                q = c.quota(f)
                if q is None or q.lending_limit is None:
                    continue
                others = [m for m in members if m is not c]
                assert (
                    sum(usage[m.name].get(f, 0) for m in others)
                    <= sum(_nominal(m, f) for m in others) + q.lending_limit
                ), (cohort, f, c.name)


def check_gang(sim: Sim, specs: list[ClusterQueueSpec]) -> None:
    held: dict[ClusterQueueName, dict[FlavorResource, int]] = {s.name: {} for s in specs}
    for key in sim.c.workload_keys():
        info = sim.c.workload(key)
        if info.state == "pending":
            continue
        wl = sim.c._wls[key].wl
        psas = {a.name: a for a in info.admission.pod_set_assignments}
        assert set(psas) == {ps.name for ps in wl.pod_sets}
        for ps in wl.pod_sets:
            a = psas[ps.name]
            assert a.count == ps.count
            want = {r: v * ps.count for r, v in ps.requests.items() if v * ps.count}
            assert dict(a.resource_usage) == want and set(a.flavors) == set(want)
            for r, v in want.items():
                k = FlavorResource(a.flavors[r], r)
                held[info.cluster_queue][k] = held[info.cluster_queue].get(k, 0) + v
    for s in specs:
        assert sim.c.usage(s.name) == held[s.name]


def strict_heads(sim: Sim, specs: list[ClusterQueueSpec]) -> dict[str, str | None]:
    heads = {}
    for s in specs:
        if s.queueing_strategy == "StrictFIFO":
            active = [p.workload for p in sim.c.pending_workloads(s.name) if not p.inadmissible]
            heads[s.name] = active[0] if active else None
    return heads


def submit_op(sim: Sim, i: int, op: tuple, n_queues: int) -> WorkloadKey:
    """Submit the ``i``-th op ``("submit", cq, pods, cpu, priority, second pod set)``."""
    _, cq, pods, cpu, prio, two = op
    b = workload(f"w{i}").cq(f"cq{cq % n_queues}").pods(pods, cpu=cpu).priority(prio)
    if two:
        b = b.pods(1, cpu=1, name="second")
    (wl,) = sim.submit(b)
    return wl.key


def run(specs: list[ClusterQueueSpec], ops: list, check: bool = True) -> Run:
    sim = Sim(*specs)
    decisions = []
    names: list[WorkloadKey] = []
    for i, op in enumerate(ops):
        kind = op[0]
        if kind == "submit":
            names.append(submit_op(sim, i, op, len(specs)))
        elif kind == "cycle":
            heads = strict_heads(sim, specs) if check else {}
            infos = {k: sim.c.workload(k) for k in names} if check else {}
            states = {k: i.state for k, i in infos.items() if i is not None}
            ds = sim.cycle()
            decisions.append(ds)
            if check:
                victims = [v.workload for d in ds if isinstance(d, Preempt) for v in d.victims]
                assert len(set(victims)) == len(victims), "a victim chosen twice in one cycle"
                for v in victims:
                    assert states[v] == "admitted", "only running, not-yet-evicted victims"
                    assert sim.c.workload(v).state == "evicting"
                for d in ds:
                    if isinstance(d, Admit) and d.cluster_queue in heads:
                        assert d.workload == heads[d.cluster_queue], "StrictFIFO admitted past head"
                check_capacity(sim, specs)
                check_gang(sim, specs)
        elif names:
            key = names[op[1] % len(names)]
            info = sim.c.workload(key)
            if kind == "finish" and info is not None and info.state == "admitted":
                sim.c.finish(key)
            elif kind == "finish_eviction" and info is not None and info.state == "evicting":
                sim.c.finish_eviction(key, sim.now)
    return Run(sim, decisions)


@PROPS
@given(cluster_queues(), st.lists(OP, max_size=30))
def test_property_capacity_lending_gang_strict_fifo_and_victims_hold_every_cycle(specs, ops):
    run(specs, ops)


def test_a_sticky_preemptor_is_the_strict_fifo_head_in_the_reported_order_too():
    """Found by the property above: a preemptor waits for its victim while a higher-priority
    Workload arrives; the scheduler admits the preemptor first (it stays the head), and the
    queue order the status API reports must say so (position 0), or the check fails."""
    specs = [cluster_queue("cq0").strict_fifo().flavor("f0", cpu=3)
             .preemption(within="LowerPriority").build()]
    ops = [("submit", 0, 1, 3, -1, False), ("cycle",), ("submit", 0, 1, 1, 0, False),
           ("submit", 0, 1, 1, 0, False), ("cycle",), ("submit", 0, 1, 1, 1, False),
           ("finish_eviction", 0), ("cycle",)]
    sim = run(specs, ops).sim
    assert sim.c.workload(WorkloadKey("ns/w2")).state == "admitted"


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(cluster_queues(), st.lists(OP, max_size=25))
def test_property_same_input_same_decisions(specs, ops):
    assert run(specs, ops, check=False).decisions == run(specs, ops, check=False).decisions


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(cluster_queues(), st.lists(OP, max_size=25))
def test_property_usage_drains_to_zero_and_nothing_fit_stays_stuck(specs, ops):
    ops = [o if o[0] != "submit" else (*o[:5], False) for o in ops]
    sim = run(specs, ops, check=False).sim
    for _ in range(100):
        sim.settle()
        holding = [k for k in sim.c.workload_keys() if sim.c.workload(k).state != "pending"]
        if not holding:
            break
        for k in holding:
            sim.c.finish(k)
    for s in specs:
        assert sim.c.usage(s.name) == {}
        pending = sim.c.pending_workloads(s.name)
        if s.queueing_strategy == "StrictFIFO":
            pending = pending[:1]
        # In an empty cluster, only what can never fit may still wait.
        assert all(p.reason == PendingReason.EXCEEDS_MAX_QUOTA for p in pending), pending


# ---- preemption minimality, on the pure victim search --------------------------------------
def _fits(specs: dict, usage: dict, cq: str, request: dict, allow_borrowing: bool) -> bool:
    spec = specs[cq]
    for f, r in request.items():
        q = spec.quota(f)
        nominal = 0 if q is None else q.nominal
        u = usage[cq].get(f, 0) + r
        if (spec.cohort is None or not allow_borrowing) and u > nominal:
            return False
        if spec.cohort is None:
            continue
        if q is not None and q.borrowing_limit is not None and u > nominal + q.borrowing_limit:
            return False
        members = [m for m in specs.values() if m.cohort == spec.cohort]
        total = sum(
            max(usage[m.name].get(f, 0) + (r if m.name == cq else 0), _local(m, f)) for m in members
        )
        if total > sum(_nominal(m, f) for m in members):
            return False
    return True


@st.composite
def preemption_states(draw):
    specs = {s.name: s for s in draw(cluster_queues(n_max=3))}
    names = list(specs)
    usage: dict = {n: {} for n in names}
    tree = QuotaTree()
    for s in specs.values():
        tree.set_cluster_queue(s.name, s.cohort, quotas_of(s))
    cands = []
    for i in range(draw(st.integers(0, 8))):
        cq = draw(st.sampled_from(names))
        req = {fr(draw(st.sampled_from(FLAVORS[:2])), "cpu"): 1000 * draw(st.integers(1, 4))}
        if not _fits(specs, usage, cq, req, True):
            continue
        for f, v in req.items():
            usage[cq][f] = usage[cq].get(f, 0) + v
        tree.add_usage(ClusterQueueName(cq), req)
        cands.append(
            Candidate(
                WorkloadKey(f"ns/c{i}"),
                ClusterQueueName(cq),
                draw(st.integers(-2, 2)),
                f"u{i}",
                float(i),
                float(i),
                req,
                draw(st.booleans()),
            )
        )
    cq = draw(st.sampled_from(names))
    f = fr(draw(st.sampled_from(FLAVORS[:2])), "cpu")
    request = {f: 1000 * draw(st.integers(2, 8))}
    p = Preemptor(WorkloadKey("ns/p"), ClusterQueueName(cq), draw(st.integers(-2, 3)), "p", 50.0)
    return specs, usage, tree, cands, p, request


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(preemption_states())
def test_property_preemption_never_evicts_more_than_needed(state):
    specs, usage, tree, cands, p, request = state
    assume(not _fits(specs, usage, p.cluster_queue, request, True))  # callers' precondition
    before = {n: tree.usages(n) for n in specs}
    found = find_targets(p, specs[p.cluster_queue], tree, cands, tuple(request), request)
    assert {n: tree.usages(n) for n in specs} == before, "simulation restores the tree"
    if found is None:
        return
    victims = [t.candidate for t in found.targets]
    assert len({v.key for v in victims}) == len(victims)

    def without(removed) -> dict:
        u = {n: dict(x) for n, x in usage.items()}
        for v in removed:
            for f, x in v.usage.items():
                u[v.cluster_queue][f] -= x
        return u

    assert _fits(specs, without(victims), p.cluster_queue, request, found.allow_borrowing)
    for v in victims:
        rest = [x for x in victims if x is not v]
        assert not _fits(specs, without(rest), p.cluster_queue, request, found.allow_borrowing), (
            f"{v.key} was not needed"
        )
    spec = specs[p.cluster_queue]
    for t in found.targets:
        c = t.candidate
        if c.cluster_queue == p.cluster_queue:
            assert spec.preemption.within_cluster_queue != "Never"
            assert c.priority <= p.priority
        else:
            assert spec.preemption.reclaim_within_cohort != "Never"
            assert specs[c.cluster_queue].cohort == spec.cohort
            if spec.preemption.reclaim_within_cohort == "LowerPriority":
                assert c.priority < p.priority
