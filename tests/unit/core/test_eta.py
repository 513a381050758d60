"""ETA of pending Workloads (app/core/eta.py): hand-computed cases on a 4-GPU ClusterQueue."""

from __future__ import annotations

import itertools

import pytest

from app.core.eta import (
    BOUNDED,
    COMPUTING,
    ESTIMATED,
    OUTPACED,
    OVERDUE,
    UNKNOWN,
    ArrivalModel,
    Eta,
    EtaBoard,
    ForwardRun,
    RangedRun,
    RuntimeModel,
    estimate,
    eta_text,
)
from app.core.types import ClusterQueueName
from tests.builders import Sim, cluster_queue, workload

T = 10_000.0  # when the running Workloads were admitted
CQ = ClusterQueueName("gpu")


def _four_gpus(*running, strict: bool = True) -> Sim:
    """ClusterQueue ``gpu`` with 4 GPUs; ``running`` admitted at T (cycles at one instant)."""
    b = cluster_queue("gpu").flavor("a100", gpu=4)
    sim = Sim(b.strict_fifo() if strict else b)
    for w in running:
        sim.c.add_workload(w.cq("gpu").build(creation=T - 10))
    for _ in range(10):
        if not sim.c.schedule(T):
            break
    for w in running:
        assert sim.admitted(w.build().name)
    return sim


def _pending(sim: Sim, *wls, at: float = T + 50) -> None:
    for i, w in enumerate(wls):
        sim.c.add_workload(w.cq("gpu").build(creation=at + i))
    sim.c.schedule(T + 100)  # the real loop has already tried them: all wait


def _etas(sim: Sim, runtimes: RuntimeModel | None = None, now: float = T + 100):
    run = estimate(sim.c, CQ, now, runtimes or RuntimeModel())
    return {k.split("/", 1)[1]: e for k, e in run.etas.items()}


def test_time_limits_give_the_exact_start_in_queue_order_and_are_bounded():
    # 4 GPUs: a (1 GPU, limit 600 s), b (1 GPU, 1200 s), c (2 GPUs, 3600 s) run since T.
    # StrictFIFO x (2 GPUs, 900 s) then y (1 GPU): a ends at T+600 (1 free, x waits),
    # b at T+1200 (2 free: x starts), x ends at T+2100 (2 free: y starts).
    sim = _four_gpus(workload("a").pods(1, gpu=1).limit(600),
                     workload("b").pods(1, gpu=1).limit(1200),
                     workload("c").pods(1, gpu=2).limit(3600))
    _pending(sim, workload("x").pods(1, gpu=2).limit(900), workload("y").pods(1, gpu=1).limit(60))
    etas = _etas(sim)
    assert etas["x"] == Eta(T + 1200, BOUNDED, "maximumExecutionTimeSeconds")
    assert etas["y"] == Eta(T + 2100, BOUNDED, "maximumExecutionTimeSeconds")
    # The state itself did not move.
    assert sim.pending("x") and sim.pending("y") and sim.admitted("a")


def test_best_effort_lets_a_small_job_start_at_the_first_free_gpu():
    sim = _four_gpus(workload("a").pods(1, gpu=1).limit(600),
                     workload("b").pods(1, gpu=1).limit(1200),
                     workload("c").pods(1, gpu=2).limit(3600), strict=False)
    _pending(sim, workload("x").pods(1, gpu=2).limit(900), workload("y").pods(1, gpu=1).limit(60))
    etas = _etas(sim)
    assert etas["y"].start == T + 600  # a's GPU; x needs two
    assert etas["x"].start == T + 1200  # b's GPU + y's (ended at T+660)


def test_a_learned_runtime_makes_the_eta_estimated():
    # b has no limit; finished runs of its shape in its LocalQueue took 1000, 1500, 2000 s:
    # the recency-weighted median is 1500, b has run 100 s: it ends at T+1500.
    sim = _four_gpus(workload("a").pods(1, gpu=1).limit(600),
                     workload("b").pods(1, gpu=1),
                     workload("c").pods(1, gpu=2).limit(3600))
    model = RuntimeModel()
    for s in (1000, 1500, 2000):
        model.observe(workload("old").cq("gpu").pods(1, gpu=1).build(), s)
    _pending(sim, workload("x").pods(1, gpu=2).limit(900), workload("y").pods(1, gpu=1).limit(60))
    etas = _etas(sim, model)
    assert etas["x"] == Eta(T + 1500, ESTIMATED, "maximumExecutionTimeSeconds+learned")
    assert etas["y"] == Eta(T + 2400, ESTIMATED, "maximumExecutionTimeSeconds+learned")


def test_runtime_memory_is_bounded_however_many_shapes_are_submitted():
    # A tenant submitting a new shape per Workload (1001m, 1002m, ... CPU) keeps at most
    # max_keys shapes; the least recently observed go first, a recently observed one stays.
    model = RuntimeModel(max_keys=8)
    kept = workload("kept").cq("gpu").pods(1, gpu=1).build()
    model.observe(kept, 100)
    for i in range(50):
        model.observe(workload(f"w{i}").cq("gpu").pods(1, cpu=f"{1001 + i}m").build(), 10)
        if i % 4 == 0:
            model.observe(kept, 100)
    assert len(model._by_shape) == 8 and len(model._by_lq) == 1
    assert model.samples(kept) == [100.0] * 14
    first = workload("w0").cq("gpu").pods(1, cpu="1001m").build()
    assert model.samples(first) == next(iter(model._by_lq.values()))  # shape forgotten


def test_a_run_with_no_known_end_makes_what_needs_its_gpus_unknown():
    # b (3 GPUs) has no limit and nothing was learned: x (2 GPUs) can only start with b's.
    sim = _four_gpus(workload("a").pods(1, gpu=1).limit(600), workload("b").pods(1, gpu=3))
    _pending(sim, workload("x").pods(1, gpu=2).limit(900))
    assert _etas(sim)["x"] == Eta(None, UNKNOWN, "no end known")


def test_the_budget_stops_the_run_and_the_rest_is_unknown():
    sim = _four_gpus(workload("a").pods(1, gpu=4).limit(600))
    _pending(sim, *[workload(f"p{i}").pods(1, gpu=4).limit(60) for i in range(20)])
    ticks = itertools.count()
    run = estimate(sim.c, CQ, T + 100, RuntimeModel(), budget_ms=5.0,
                   clock=lambda: next(ticks) * 0.001)  # each reading: 1 ms later
    assert run.truncated
    assert run.etas["ns/p0"].start == T + 600
    assert run.etas["ns/p19"] == Eta(None, UNKNOWN, "budget exceeded")


def test_slices_resume_where_they_stopped_on_the_state_forked_at_the_start():
    # 20 4-GPU jobs of 60 s behind a (ends T+600): p_i starts at T+600+60i. With a 5 ms
    # budget (each clock reading 1 ms later) one slice answers a few; resumed slices answer
    # the rest, equal to the unbudgeted run, although the live state changed meanwhile.
    sim = _four_gpus(workload("a").pods(1, gpu=4).limit(600))
    _pending(sim, *[workload(f"p{i}").pods(1, gpu=4).limit(60) for i in range(20)])
    full = estimate(sim.c, CQ, T + 100, RuntimeModel())
    ticks = itertools.count()
    fr = ForwardRun(sim.c, CQ, T + 100, RuntimeModel())
    assert not fr.advance(5.0, lambda: next(ticks) * 0.001)
    first = fr.result()
    given = {k for k, e in first.etas.items() if e.start is not None}
    assert given and len(given) < 20
    assert all(first.etas[k] == full.etas[k] for k in given)
    assert first.etas["ns/p19"] == Eta(None, UNKNOWN, COMPUTING)
    sim.c.add_workload(workload("late").cq("gpu").priority(99).pods(1, gpu=4).limit(9)
                       .build(creation=T + 101))  # after the fork: not in this run
    while not fr.advance(5.0, lambda: next(ticks) * 0.001):
        assert fr.run.slices < 50
    assert fr.run.slices > 2
    assert fr.result().etas == full.etas
    assert fr.result().etas["ns/p19"].start == T + 600 + 60 * 19


def test_board_resumes_a_run_one_slice_per_call_and_answers_meanwhile():
    sim = _four_gpus(workload("a").pods(1, gpu=4).limit(600))
    _pending(sim, *[workload(f"p{i}").pods(1, gpu=4).limit(60) for i in range(20)])
    ticks = itertools.count()
    board = EtaBoard(budget_ms=5.0, clock=lambda: next(ticks) * 0.001)
    partial = board.for_cluster_queue(sim.c, CQ, T + 100)  # one slice
    assert partial.etas["ns/p0"].start == T + 600
    assert partial.etas["ns/p19"].basis == COMPUTING
    assert board.runs == 1 and board.slices == 1
    while not board.advance(sim.c, CQ, T + 100):
        pass
    whole = board.for_cluster_queue(sim.c, CQ, T + 100)
    assert board.runs == 1 and board.slices > 2
    assert whole.etas["ns/p19"] == Eta(T + 600 + 60 * 19, BOUNDED, "maximumExecutionTimeSeconds")
    # A new run (state changed, min_interval passed): the rest comes from the last whole run.
    sim.c.add_workload(workload("q").cq("gpu").pods(1, gpu=4).limit(60).build(creation=T + 101))
    again = board.for_cluster_queue(sim.c, CQ, T + 110)
    assert board.runs == 2
    assert again.etas["ns/p19"] == whole.etas["ns/p19"]
    assert again.etas["ns/q"].basis == COMPUTING


def test_board_runs_again_when_an_expected_end_passed_and_nothing_changed():
    # a (no limit) is expected to run 300 s (learned): x's ETA is T+300. At T+400 a has not
    # ended and nothing changed: the cached T+300 would read "now"; the board runs again and
    # a, older than every run of its kind, has no known end: x's start is unknown, and why.
    sim = _four_gpus(workload("a").pods(1, gpu=4))
    _pending(sim, workload("x").pods(1, gpu=4).limit(60))
    model = RuntimeModel()
    model.observe(workload("a").cq("gpu").pods(1, gpu=4).build(), 300)
    board = EtaBoard(model, min_interval=5.0, max_age=3600.0)
    first = board.for_cluster_queue(sim.c, CQ, T + 100)
    assert first.etas["ns/x"] == Eta(T + 300, ESTIMATED, "learned")
    assert first.valid_until == T + 300
    assert board.for_cluster_queue(sim.c, CQ, T + 200) is first  # before the expected end
    later = board.for_cluster_queue(sim.c, CQ, T + 400)
    assert board.runs == 2
    assert later.etas["ns/x"] == Eta(None, UNKNOWN, "no end known")


def test_a_reader_beside_the_refresher_never_sees_a_passed_start_as_now():
    # The status API reads the board without computing (advance=False) while the background
    # refresher reruns cohorts only every few seconds. a and y (2 GPUs each, learned 300 s):
    # y starts at once (T+100, free quota), x (4 GPUs) when both have ended (T+400). At T+401
    # nothing has ended and x cannot start: its ETA reads unknown, not "now". y's start at
    # the run's own instant (the next cycle admits it) stays.
    sim = _four_gpus(workload("a").pods(1, gpu=2), strict=False)
    _pending(sim, workload("x").pods(1, gpu=4).limit(60))
    sim.c.add_workload(workload("y").cq("gpu").pods(1, gpu=2).build(creation=T + 90))
    model = RuntimeModel()
    model.observe(workload("a").cq("gpu").pods(1, gpu=2).build(), 300)
    board = EtaBoard(model, min_interval=5.0, max_age=3600.0)
    first = board.for_cluster_queue(sim.c, CQ, T + 100)
    assert first.etas["ns/x"].start == T + 400 and first.etas["ns/y"].start == T + 100
    assert board.for_cluster_queue(sim.c, CQ, T + 200, advance=False) is first
    stale = board.for_cluster_queue(sim.c, CQ, T + 401, advance=False)
    assert board.runs == 1
    assert stale.etas["ns/x"] == Eta(None, UNKNOWN, OVERDUE)
    assert stale.etas["ns/y"] == first.etas["ns/y"]
    assert eta_text(stale.etas["ns/x"], T + 401) == "start time unknown"
    assert first.etas["ns/x"].start == T + 400  # the cached run itself is unchanged


def test_board_drops_the_run_of_a_cohort_that_gained_a_cluster_queue():
    b = cluster_queue("gpu").flavor("a100", gpu=4).cohort("c")
    sim = Sim(b.strict_fifo())
    sim.c.add_workload(workload("a").cq("gpu").pods(1, gpu=4).limit(600).build(creation=T))
    sim.c.schedule(T)
    _pending(sim, *[workload(f"p{i}").pods(1, gpu=4).limit(60) for i in range(20)])
    ticks = itertools.count()
    board = EtaBoard(budget_ms=2.0, clock=lambda: next(ticks) * 0.001)
    assert not board.advance(sim.c, CQ, T + 100)  # a run for the scope (gpu,) is going
    sim.c.add_cluster_queue(cluster_queue("cpu").flavor("a100", gpu=0).cohort("c").build())
    board.advance(sim.c, CQ, T + 100)  # the scope is now (cpu, gpu)
    assert set(board._running) | set(board._cache) == {("cpu", "gpu")}  # (gpu,) dropped


def test_board_ends_a_run_after_max_slices():
    sim = _four_gpus(workload("a").pods(1, gpu=4).limit(600))
    _pending(sim, *[workload(f"p{i}").pods(1, gpu=4).limit(60) for i in range(20)])
    ticks = itertools.count()
    board = EtaBoard(budget_ms=2.0, max_slices=2, clock=lambda: next(ticks) * 0.001)
    assert not board.advance(sim.c, CQ, T + 100)
    assert board.advance(sim.c, CQ, T + 100)  # the second and last slice
    run = board.for_cluster_queue(sim.c, CQ, T + 100)
    assert run.truncated and run.slices == 2
    assert run.etas["ns/p19"] == Eta(None, UNKNOWN, "budget exceeded")


def test_runtime_model_conditions_on_the_time_already_run():
    m = RuntimeModel()
    wl = workload("w").cq("q").pods(1, gpu=1).build()
    assert m.remaining(wl) == (None, "")
    for s in (100, 200, 5000):
        m.observe(wl, s)
    assert m.remaining(wl, 0) == (200, "learned")
    assert m.remaining(wl, 300) == (4700, "learned")  # only the 5000 s run lasted that long
    assert m.remaining(wl, 6000) == (None, "")
    limited = workload("v").pods(1, gpu=1).limit(100).build()
    assert m.remaining(limited, 30) == (70, "maximumExecutionTimeSeconds")


def test_board_recomputes_only_on_change_and_not_more_often_than_min_interval():
    sim = _four_gpus(workload("a").pods(1, gpu=4).limit(600))
    _pending(sim, workload("x").pods(1, gpu=1).limit(60))
    board = EtaBoard(min_interval=5.0, max_age=60.0)
    first = board.for_cluster_queue(sim.c, CQ, T + 100)
    assert board.for_cluster_queue(sim.c, CQ, T + 103) is first  # nothing changed
    sim.c.add_workload(workload("y").cq("gpu").pods(1, gpu=1).build(creation=T + 101))
    assert board.for_cluster_queue(sim.c, CQ, T + 104) is first  # changed, but within 5 s
    assert board.eta(sim.c, CQ, sim.key("y"), T + 104) == Eta(None, UNKNOWN, "not computed yet")
    assert board.eta(sim.c, CQ, sim.key("y"), T + 106) == Eta(T + 600, BOUNDED,
                                                            "maximumExecutionTimeSeconds")
    assert board.runs == 2
    board.for_cluster_queue(sim.c, CQ, T + 150)  # unchanged and younger than max_age
    assert board.runs == 2
    board.for_cluster_queue(sim.c, CQ, T + 170)
    assert board.runs == 3
    board.forget_missing([ClusterQueueName("other")])  # gpu was deleted: its cohort goes
    board.for_cluster_queue(sim.c, CQ, T + 171)
    assert board.runs == 4


def test_board_due_at_says_when_a_changed_cohort_may_be_computed_again():
    sim = _four_gpus(workload("a").pods(1, gpu=4).limit(600))
    _pending(sim, workload("x").pods(1, gpu=1).limit(60))
    board = EtaBoard(min_interval=5.0)
    assert board.due_at(sim.c, CQ, T + 100) == T + 100  # never computed
    assert board.advance(sim.c, CQ, T + 100)
    assert board.due_at(sim.c, CQ, T + 101) is None  # answers for the state as it is
    sim.c.add_workload(workload("y").cq("gpu").pods(1, gpu=1).limit(60).build(creation=T + 101))
    assert board.due_at(sim.c, CQ, T + 102) == T + 105  # changed, but ran 2 s ago
    assert board.eta(sim.c, CQ, sim.key("y"), T + 102).basis == "not computed yet"
    assert board.due_at(sim.c, CQ, T + 105) == T + 105
    assert board.advance(sim.c, CQ, T + 105)
    assert board.eta(sim.c, CQ, sim.key("y"), T + 105) == Eta(
        T + 600, BOUNDED, "maximumExecutionTimeSeconds")
    assert board.due_at(sim.c, CQ, T + 106) is None
    assert board.due_at(sim.c, ClusterQueueName("nope"), T) is None


@pytest.mark.parametrize(("wait", "text"), [
    (0, "expected start now"), (29, "expected start in under a minute"),
    (59, "expected start in under a minute"), (100, "expected start in ~2m"),
    (12 * 60 + 20, "expected start in ~10m"), (14 * 60, "expected start in ~15m"),
    (59 * 60, "expected start in ~1h"), (95 * 60, "expected start in ~1h30m"),
    (5 * 3600, "expected start in ~5h"), (80 * 3600, "expected start in ~3d"),
])
def test_eta_text_is_coarse(wait, text):
    assert eta_text(Eta(1000.0 + wait, BOUNDED, ""), 1000.0) == text
    assert eta_text(Eta(None, UNKNOWN, ""), 1000.0) == "start time unknown"


def test_a_workload_larger_than_the_quota_is_never_admitted_and_says_so():
    sim = _four_gpus(workload("a").pods(1, gpu=1).limit(600))
    _pending(sim, workload("huge").pods(1, gpu=8).limit(60))
    assert _etas(sim)["huge"] == Eta(None, UNKNOWN, "never admitted")


def test_projected_higher_priority_arrivals_delay_the_eta():
    # a (4 GPUs) runs until T+1200 at the latest; x (4 GPUs, priority 0) waits. A class of
    # priority-10 4-GPU jobs (limit 300 s) arrived at T-2000, T-1000, T: at T+100 it has
    # gone on for 2,100 s, so it is projected to T+2200: due at T+1000 and T+2000. At T+1200
    # the first goes first, and x starts when it ends, T+1500.
    sim = _four_gpus(workload("a").pods(1, gpu=4).limit(1200))
    _pending(sim, workload("x").pods(1, gpu=4).limit(60))
    arrivals = ArrivalModel(window_seconds=5000)
    for i, at in enumerate((T - 2000, T - 1000, T)):
        arrivals.observe(workload(f"hi-{i}").cq("gpu").priority(10).pods(1, gpu=4).limit(300)
                         .build(creation=at))
    assert [w.creation for w in arrivals.future(T + 100, {"ns/lq-gpu"})] == [
        T + 1000, T + 2000]
    assert arrivals.future(T + 100, {"ns/other"}) == []
    assert _etas(sim)["x"].start == T + 1200
    run = estimate(sim.c, CQ, T + 100, RuntimeModel(), arrivals=arrivals)
    # A projection is a guess, so the ETA it shapes is estimated, not bounded. Gott's 50%
    # interval: the stream goes on for 700 s more (to T+800: no arrival, x starts at a's
    # end, T+1200) to 6,300 s more (the T+1000 job goes first, x at T+1500, before the
    # T+2000 one arrives).
    assert run.etas["ns/x"] == Eta(T + 1500, ESTIMATED, "maximumExecutionTimeSeconds+arrivals",
                                   earliest=T + 1200, latest=T + 1500)
    assert set(run.etas) == {"ns/x"}  # projected arrivals get no ETA of their own


def _stream(arrivals: ArrivalModel, name: str, prio: int, times, gpu: int = 4,
            limit: int = 300) -> None:
    for i, at in enumerate(times):
        arrivals.observe(workload(f"{name}-{i}").cq("gpu").priority(prio).pods(1, gpu=gpu)
                         .limit(limit).build(creation=at))


def test_only_live_streams_above_the_priority_are_projected_each_as_long_as_it_went_on():
    arrivals = ArrivalModel(window_seconds=5000, max_future=4)
    _stream(arrivals, "hi", 10, (T - 200, T - 100, T))          # every 100 s, live
    _stream(arrivals, "eq", 0, (T - 20, T - 10, T))             # priority 0: not ahead of 0
    _stream(arrivals, "gone", 20, (T - 4000, T - 3900, T - 3800))  # last gap 3800 > 3 x 100
    _stream(arrivals, "mid", 5, (T - 600, T - 300, T), gpu=2)   # every 300 s
    # At T+50, hi has gone on for 250 s (projected to T+300), mid for 650 s (to T+700).
    got = arrivals.future(T + 50, {"ns/lq-gpu"}, above_priority=0)
    # The cap (4) keeps the soonest of both live classes, not the first class's whole run.
    assert [(w.creation, w.priority) for w in got] == [
        (T + 100, 10), (T + 200, 10), (T + 300, 10), (T + 300, 5)]
    assert all(w.name.startswith("~eta-") and w.admission is None for w in got)
    uncapped = ArrivalModel(window_seconds=5000)
    _stream(uncapped, "hi", 10, (T - 200, T - 100, T))
    _stream(uncapped, "mid", 5, (T - 600, T - 300, T), gpu=2)
    assert [(w.creation, w.priority) for w in uncapped.future(T + 50, {"ns/lq-gpu"})] == [
        (T + 100, 10), (T + 200, 10), (T + 300, 10), (T + 300, 5), (T + 600, 5)]
    assert 0 in {w.priority for w in arrivals.future(T, {"ns/lq-gpu"})}  # no filter


def test_a_stream_that_paused_for_a_whole_window_starts_its_age_afresh():
    arrivals = ArrivalModel(window_seconds=1000)
    _stream(arrivals, "hi", 10, (T - 5000, T - 4900, T - 4800, T - 200, T - 100, T))
    # Gone on since T-200 (the gap before it was longer than the window): 250 s at T+50,
    # so projected to T+300 (not for the 5,050 s since its first arrival).
    assert [w.creation for w in arrivals.future(T + 50, {"ns/lq-gpu"})] == [
        T + 100, T + 200, T + 300]


def test_a_start_after_the_streams_horizon_is_dated_with_no_further_arrivals():
    # x (priority 0) waits for 4 GPUs held by a until T+1200; priority-10 4-GPU jobs of
    # 300 s arrive every 100 s since T-100: at T+100 the stream has gone on for 200 s, so
    # two more (T+200, T+300), each taking the GPUs before x (T+1200-1500, T+1500-1800).
    # Then no more arrive in the model and x starts: T+1800, estimated, not "unknown".
    sim = _four_gpus(workload("a").pods(1, gpu=4).limit(1200))
    _pending(sim, workload("x").pods(1, gpu=4).limit(60))
    arrivals = ArrivalModel(window_seconds=5000)
    _stream(arrivals, "hi", 10, (T - 100, T))
    _stream(arrivals, "hi", 10, (T + 100,))
    run = estimate(sim.c, CQ, T + 100, RuntimeModel(), arrivals=arrivals)
    # Range: 67 s more (no arrival: a's end) to 600 s more (six jobs: T+1200+6x300).
    assert run.etas["ns/x"] == Eta(T + 1800, ESTIMATED, "maximumExecutionTimeSeconds+arrivals",
                                   earliest=T + 1200, latest=T + 3000)
    # Without a projection it is the bound of a's limit.
    assert _etas(sim)["x"] == Eta(T + 1200, BOUNDED, "maximumExecutionTimeSeconds")


def test_a_capped_projection_ends_at_its_last_arrival():
    # The stream has gone on since T-1000 (projected to T+1200), capped at 3 projected jobs
    # (T+200, T+300, T+400): x would start at T+2100 only because the cap stopped the
    # stream: unknown, outpaced.
    sim = _four_gpus(workload("a").pods(1, gpu=4).limit(1200))
    _pending(sim, workload("x").pods(1, gpu=4).limit(60))
    arrivals = ArrivalModel(window_seconds=5000, max_future=3)
    _stream(arrivals, "hi", 10, [T - 1000 + 100 * i for i in range(12)])
    assert [w.creation for w in arrivals.future(T + 100, {"ns/lq-gpu"})] == [
        T + 200, T + 300, T + 400]
    run = estimate(sim.c, CQ, T + 100, RuntimeModel(), arrivals=arrivals)
    assert run.etas["ns/x"] == Eta(None, UNKNOWN, OUTPACED)


def test_lower_priority_projections_do_not_touch_a_higher_priority_eta():
    # y (priority 20) is ahead of every projected priority-10 job: its ETA stays bounded,
    # while x (priority 0) behind them gets "+arrivals".
    sim = _four_gpus(workload("a").pods(1, gpu=4).limit(1200))
    _pending(sim, workload("y").pods(1, gpu=4).priority(20).limit(100),
             workload("x").pods(1, gpu=4).limit(60))
    arrivals = ArrivalModel(window_seconds=5000)
    _stream(arrivals, "hi", 10, (T - 2000, T - 1000, T))  # next at T+1000, 300 s each
    run = estimate(sim.c, CQ, T + 100, RuntimeModel(), arrivals=arrivals)
    etas = {k.split("/", 1)[1]: e for k, e in run.etas.items()}
    assert etas["y"] == Eta(T + 1200, BOUNDED, "maximumExecutionTimeSeconds")
    assert etas["x"] == Eta(T + 1600, ESTIMATED, "maximumExecutionTimeSeconds+arrivals",
                            earliest=T + 1300, latest=T + 1600)


def _saturating_stream(age: float = 3000.0) -> tuple[Sim, ArrivalModel]:
    """4 GPUs kept busy by a priority-10 stream of 4-GPU, 300 s jobs, one every 300 s for
    ``age`` seconds up to T (the last admitted at T); x (priority 0) pending behind it."""
    times = [T - age + 300 * i for i in range(int(age // 300) + 1)]
    sim = _four_gpus(workload("hi-last").priority(10).pods(1, gpu=4).limit(300))
    _pending(sim, workload("x").pods(1, gpu=4).limit(60), at=T + 1)
    arrivals = ArrivalModel(window_seconds=2 * age)
    _stream(arrivals, "hi", 10, times)
    return sim, arrivals


def test_gotts_interval_brackets_the_start_behind_a_stream_that_keeps_the_quota_busy():
    # The stream has gone on for 3,000 s at T: Gott's median, 3,000 s more (last projected
    # job at T+3000, so x starts at T+3300); the 50% interval, 1,000 s more (last at T+900:
    # x at T+1200) to 9,000 s more (last at T+9000: x at T+9300).
    sim, arrivals = _saturating_stream()
    run = estimate(sim.c, CQ, T + 2, RuntimeModel(), arrivals=arrivals)
    assert run.etas["ns/x"] == Eta(T + 3300, ESTIMATED, "maximumExecutionTimeSeconds+arrivals",
                                   earliest=T + 1200, latest=T + 9300)
    # Without ranges: the same point, no interval (one run instead of three).
    plain = estimate(sim.c, CQ, T + 2, RuntimeModel(), arrivals=arrivals, ranges=False)
    assert plain.etas["ns/x"] == Eta(T + 3300, ESTIMATED, "maximumExecutionTimeSeconds+arrivals")


def test_a_start_that_rests_on_no_projection_gets_no_interval():
    # Nothing projected (no stream): one run, no range; a bounded start beside a projected
    # one keeps none either.
    sim = _four_gpus(workload("a").pods(1, gpu=4).limit(1200))
    _pending(sim, workload("y").pods(1, gpu=4).priority(20).limit(100),
             workload("x").pods(1, gpu=4).limit(60))
    assert _etas(sim)["y"] == Eta(T + 1200, BOUNDED, "maximumExecutionTimeSeconds")
    arrivals = ArrivalModel(window_seconds=5000)
    _stream(arrivals, "hi", 10, (T - 2000, T - 1000, T))
    run = estimate(sim.c, CQ, T + 100, RuntimeModel(), arrivals=arrivals)
    assert run.etas["ns/y"].earliest is None and run.etas["ns/y"].latest is None


def test_the_late_end_cut_by_the_projection_cap_leaves_no_later_bound():
    # Capped at 12 projected jobs: the median run (10 jobs, to T+3000) fits; the late one
    # (30 jobs) is cut, so x's start there would date the cut: no later bound.
    sim, _ = _saturating_stream()
    arrivals = ArrivalModel(window_seconds=6000, max_future=12)
    _stream(arrivals, "hi", 10, [T - 3000 + 300 * i for i in range(11)])
    e = estimate(sim.c, CQ, T + 2, RuntimeModel(), arrivals=arrivals).etas["ns/x"]
    assert (e.start, e.earliest, e.latest) == (T + 3300, T + 1200, None)


def test_board_gives_the_interval_within_the_same_slice_cap():
    # The three runs share max_slices: with slices too small for the ends, the point
    # estimate is there and the interval is not; with enough, both.
    sim, arrivals = _saturating_stream()
    ticks = itertools.count()
    board = EtaBoard(budget_ms=1.5, max_slices=400, clock=lambda: next(ticks) * 0.001,
                     arrivals=arrivals)
    while not board.advance(sim.c, CQ, T + 2):
        pass
    whole = board.for_cluster_queue(sim.c, CQ, T + 2, advance=False)
    assert whole.etas["ns/x"].earliest == T + 1200 and whole.etas["ns/x"].latest == T + 9300
    assert not whole.truncated
    ticks = itertools.count()
    fr = RangedRun(sim.c, CQ, T + 2, RuntimeModel(), arrivals=arrivals)
    while not fr.median.done:
        fr.advance(1.5, lambda: next(ticks) * 0.001)
    fr.finish()  # the cap reached while the ends were going
    e = fr.result().etas["ns/x"]
    assert (e.start, e.earliest, e.latest) == (T + 3300, None, None)


def test_pooled_shapes_project_a_rare_shape_at_its_share_of_its_queues_stream():
    # One LocalQueue, priority 10: 1-GPU jobs at T-600, T-400, T-200 and 4-GPU jobs at
    # T-500, T-100. Per class the 4-GPU one has too few arrivals (2 < 3) to be projected;
    # pooled, the stream is 5 arrivals every 125 s since T-600 (projected to T+600), each
    # shape at its share: 1-GPU every 208.3 s after T-200, 4-GPU every 312.5 s after T-100.
    def observe(model: ArrivalModel) -> ArrivalModel:
        _stream(model, "one", 10, (T - 600, T - 400, T - 200), gpu=1)
        _stream(model, "four", 10, (T - 500, T - 100), gpu=4)
        return model

    apart = observe(ArrivalModel(window_seconds=5000))
    assert [(round(w.creation - T, 1), w.pod_sets[0].requests["nvidia.com/gpu"])
            for w in apart.future(T, {"ns/lq-gpu"})] == [(200.0, 1), (400.0, 1), (600.0, 1)]
    pooled = observe(ArrivalModel(window_seconds=5000, pool_shapes=True))
    assert [(round(w.creation - T, 1), w.pod_sets[0].requests["nvidia.com/gpu"])
            for w in pooled.future(T, {"ns/lq-gpu"})] == [(8.3, 1), (212.5, 4), (216.7, 1),
                                                           (425.0, 1), (525.0, 4)]


def test_board_keeps_the_previous_range_while_the_new_ends_are_computed():
    sim, arrivals = _saturating_stream()
    ticks = itertools.count()
    board = EtaBoard(budget_ms=1.5, min_interval=0.0, clock=lambda: next(ticks) * 0.001,
                     arrivals=arrivals)
    while not board.advance(sim.c, CQ, T + 2):
        pass
    first = board.for_cluster_queue(sim.c, CQ, T + 2, advance=False).etas["ns/x"]
    assert first.earliest == T + 1200
    sim.c.add_workload(workload("y").cq("gpu").pods(1, gpu=1).limit(60).build(creation=T + 3))
    board.advance(sim.c, CQ, T + 4)  # a new run: its median phase, then the ends
    fr = next(iter(board._running.values()))
    while not fr.median.done:
        board.advance(sim.c, CQ, T + 4)
    assert not fr.done  # the ends are still to run
    assert board.for_cluster_queue(sim.c, CQ, T + 4, advance=False).etas["ns/x"] == first
    while not board.advance(sim.c, CQ, T + 4):
        pass
    again = board.for_cluster_queue(sim.c, CQ, T + 4, advance=False).etas
    assert again["ns/x"].earliest is not None and "ns/y" in again


def test_a_ranged_run_makes_progress_in_every_slice_however_small_its_budget():
    # As ForwardRun: at least one step per slice, so a run with nothing to do is whole after
    # one (the refresher moves on to the next queue) and a long one never stalls.
    ticks = itertools.count()

    def clock() -> float:
        return next(ticks) * 1.0  # each reading a second later: every budget is spent

    idle = _four_gpus(workload("a").pods(1, gpu=4).limit(600))
    assert RangedRun(idle.c, CQ, T + 100, RuntimeModel()).advance(0.001, clock)
    sim, arrivals = _saturating_stream()
    fr = RangedRun(sim.c, CQ, T + 2, RuntimeModel(), arrivals=arrivals)
    slices = 0
    while not fr.advance(0.001, clock):
        slices += 1
        assert slices < 10_000
    assert fr.result().etas["ns/x"].earliest == T + 1200
