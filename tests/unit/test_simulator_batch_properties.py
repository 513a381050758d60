"""Breaker check of the simulator with the requeue batch (``Simulator(requeue_batch_s=p)``)
on random traces timed to the microsecond: the run ends, every Workload that runs at p = 0
runs at p > 0 too (no preemption: whatever fits eventually starts once the others end), the
core owes no wake-up at the end, and the run ends at its last finish or arrival, not at a
trailing batch."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.sim import Simulator, parse_trace

_QUEUE = st.tuples(st.integers(0, 6), st.sampled_from((None, 0, 2)), st.booleans())
_ARRIVAL = st.tuples(st.integers(0, 3), st.integers(0, 4_000_000), st.integers(1, 5),
                     st.integers(1, 3_000_000), st.integers(-1, 1))


def _trace(queues: list[tuple], arrivals: list[tuple]) -> str:
    lines = ["name: random", "flavors: [{name: default}]", "clusterQueues:"]
    for i, (nominal, borrowing, in_cohort) in enumerate(queues):
        limit = "" if borrowing is None or not in_cohort else f", borrowingLimit: {borrowing}"
        cohort = ", cohort: co" if in_cohort else ""
        lines.append(
            f"  - {{name: q{i}{cohort}, namespaceSelector: {{}}, resourceGroups: [{{"
            f"coveredResources: [cpu], flavors: [{{name: default, resources: [{{name: cpu, "
            f"nominalQuota: {nominal}{limit}}}]}}]}}]}}")
    lines.append("arrivals:")
    for j, (q, at, cpu, runtime, prio) in enumerate(arrivals):
        lines.append(
            f"  - {{at: {at}us, name: w{j}, localQueue: q{q % len(queues)}, request: "
            f"{{cpu: {cpu}}}, runtime: {runtime}us, priority: {prio}, class: c}}")
    return "\n".join(lines) + "\n"


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_QUEUE, min_size=1, max_size=3), st.lists(_ARRIVAL, min_size=1, max_size=14),
       st.sampled_from((0.3, 1.0, 2.5)))
def test_a_batch_delays_starts_but_loses_none_and_does_not_end_the_run(queues, arrivals, p):
    trace = parse_trace(_trace(queues, arrivals), "random.yaml")
    runs = [Simulator(trace, requeue_batch_s=q).run() for q in (0.0, p)]
    done = [{k for k, r in s.runs.items() if r.finished_us is not None} for s in runs]
    assert done[1] == done[0]
    for s in runs:
        assert s.cluster.next_wakeup() is None
        ends = [r.finished_us for r in s.runs.values() if r.finished_us is not None]
        assert s.end_us == max([*ends, *(r.created_us for r in s.runs.values())])
