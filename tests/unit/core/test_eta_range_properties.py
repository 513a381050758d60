"""breaker7, property tests (hypothesis) of ETA ranges (``RangedRun``, Gott's 50% interval):
over random running and pending Workloads and random higher-priority arrival streams,
every range is ordered (``computed_at <= earliest <= start <= latest``), only starts that
rest on projected arrivals get one, the point start is the one the plain run gives, and
the three runs together stay within the slice cap of the board."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.eta import ArrivalModel, EtaBoard, RuntimeModel, estimate
from tests.builders import workload
from tests.unit.core.test_eta import CQ, T, _four_gpus, _pending, _stream

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))

JOB = st.tuples(st.integers(1, 4), st.integers(-1, 12), st.sampled_from([60, 300, 1200]))


@st.composite
def scenes(draw):
    running = draw(st.lists(st.tuples(st.integers(1, 2), st.sampled_from([100, 600, 3000])),
                            min_size=1, max_size=2))
    pending = draw(st.lists(JOB, min_size=1, max_size=6))
    streams = draw(st.lists(st.tuples(st.integers(1, 20), st.integers(2, 8),
                                      st.sampled_from([50, 300, 900]),
                                      st.integers(1, 4), st.sampled_from([60, 300, 1200]),
                                      st.booleans()),
                            min_size=1, max_size=3))
    return running, pending, streams


def _build(scene):
    running, pending, streams = scene
    sim = _four_gpus(*[workload(f"r{i}").pods(1, gpu=g).limit(lim)
                       for i, (g, lim) in enumerate(running)], strict=False)
    _pending(sim, *[workload(f"p{i}").pods(1, gpu=g).priority(p).limit(lim)
                    for i, (g, p, lim) in enumerate(pending)])
    arrivals = ArrivalModel(window_seconds=20_000, max_future=60)
    for j, (prio, n, gap, gpu, lim, live) in enumerate(streams):
        end = T + 90 if live else T - 5000
        _stream(arrivals, f"s{j}", prio, [end - gap * (n - 1 - k) for k in range(n)],
                gpu=gpu, limit=lim)
    return sim, arrivals


@PROPS
@given(scenes())
def test_property_ranges_are_ordered_and_only_behind_projections(scene):
    sim, arrivals = _build(scene)
    now = T + 100
    ranged = estimate(sim.c, CQ, now, RuntimeModel(), arrivals=arrivals)
    plain = estimate(sim.c, CQ, now, RuntimeModel(), arrivals=arrivals, ranges=False)
    assert set(ranged.etas) == set(plain.etas)
    for key, e in ranged.etas.items():
        p = plain.etas[key]
        assert (e.start, e.confidence, e.basis) == (p.start, p.confidence, p.basis), key
        if e.earliest is None:
            assert e.latest is None, key
            continue
        assert e.start is not None and e.basis.endswith("+arrivals"), (key, e)
        assert now <= e.earliest <= e.start, (key, e)
        assert e.latest is None or e.start <= e.latest, (key, e)


@PROPS
@given(scenes(), st.integers(1, 6))
def test_property_the_three_runs_share_the_slice_cap(scene, max_slices):
    sim, arrivals = _build(scene)
    ticks = itertools.count()
    board = EtaBoard(budget_ms=0.5, max_slices=max_slices, clock=lambda: next(ticks) * 0.001,
                     arrivals=arrivals)
    for _ in range(max_slices):
        if board.advance(sim.c, CQ, T + 100):
            break
    else:
        raise AssertionError(f"not done after max_slices={max_slices} slices")
    assert board.slices <= max_slices
    run = board.for_cluster_queue(sim.c, CQ, T + 100, advance=False)
    for e in run.etas.values():
        assert e.earliest is None or (e.start is not None and e.earliest <= e.start)
