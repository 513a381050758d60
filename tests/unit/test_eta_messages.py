"""The scheduling loop's pending messages carry "position N, expected start in ~T"
(app/controllers/pending_messages.py, refresh_eta_messages + _write_pending), written only when
the rounded text changes, with one Event per core message, not per ETA change."""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import SimpleNamespace
from typing import Any

from app.config import Settings
from app.controllers.pending_messages import eta_suffix
from app.controllers.scheduling_loop import SchedulerLoop
from app.core.decisions import Admit, Pending
from app.core.eta import BOUNDED, Eta
from tests.builders import Sim, cluster_queue, workload

T = 1_000_000.0


class FakeStore:
    def __init__(self) -> None:
        self.objs: dict[str, dict[str, Any]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        return self.objs.get(key)

    def put(self, obj: dict[str, Any]) -> None:
        m = obj["metadata"]
        self.objs[f"{m['namespace']}/{m['name']}"] = obj


class FakeClient:
    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []

    async def replace(self, resource: Any, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        self.writes.append(body)
        return body


def _loop(refresh_seconds: float = 0.0, *, strict: bool = True, **scheduling: Any,
          ) -> tuple[SchedulerLoop, SimpleNamespace, Sim]:
    """A loop with pending Workload ns/x behind a; ``refresh_seconds``: the setting
    ``pending_message_refresh_seconds`` (0: every change written at once); ``strict``:
    StrictFIFO, else BestEffortFIFO; ``scheduling``: more ``Settings.scheduling`` values."""
    queue = cluster_queue("gpu").flavor("a100", gpu=4)
    sim = Sim(queue.strict_fifo() if strict else queue)
    sim.c.add_workload(workload("a").cq("gpu").pods(1, gpu=4).limit(600).build(creation=T - 5))
    assert sim.c.schedule(T)
    store, events = FakeStore(), []
    ctx = SimpleNamespace(
        settings=Settings(controllers_enabled=False,
                          scheduling={"pending_message_refresh_seconds": refresh_seconds,
                                      "pending_message_eta_grace_seconds": 0.0,
                                      **scheduling}),
        client=FakeClient(),
        store=lambda kind: store, clock=lambda: clock[0], may_write=True, inflight=set(),
        recorder=SimpleNamespace(emit=lambda obj, etype, reason, msg: events.append(msg)),
        events=events, informers=SimpleNamespace(wait_synced=_synced))
    clock = [T + 60.0]
    ctx.set_clock = lambda t: clock.__setitem__(0, t)
    framework = SimpleNamespace(owner_object=lambda wl: None, notify=lambda wl, key: None,
                                pods_holding=lambda wl, uid: None)
    loop = SchedulerLoop(ctx, jobs=framework, cluster=sim.c)  # type: ignore[arg-type]
    wl = workload("x").cq("gpu").pods(1, gpu=2).limit(60).build(creation=T + 30)
    sim.c.add_workload(wl)
    store.put({"metadata": {"namespace": "ns", "name": "x"}, "spec": {}, "status": {}})
    return loop, ctx, sim


async def _synced() -> None:
    return None


def _message(ctx: SimpleNamespace) -> str:
    conds = ctx.client.writes[-1]["status"]["conditions"]
    return next(c["message"] for c in conds if c["type"] == "QuotaReserved")


async def _flush(loop: SchedulerLoop) -> None:
    while loop.messages._pending:  # noqa: SLF001 - drive the writer's body without its task
        key, d = loop.messages._pending.pop_next()  # noqa: SLF001
        await loop.messages._write_pending(key, d)  # noqa: SLF001


async def test_eta_tail_is_written_when_its_rounded_text_changes_and_events_stay_one() -> None:
    loop, ctx, sim = _loop()
    decisions = [d for d in sim.c.schedule(T + 60) if isinstance(d, Pending)]
    assert [d.workload for d in decisions] == ["ns/x"]
    loop.apply(decisions[0])
    await _flush(loop)
    core = decisions[0].message
    assert _message(ctx) == core and len(ctx.client.writes) == 1 and ctx.events == [core]

    # a ends at T+600 at the latest: x starts then, 540 s after now -> "~10m".
    assert loop.messages.refresh_eta_messages() == 1
    await _flush(loop)
    assert _message(ctx) == f"{core}; position 1, expected start in ~10m"
    assert len(ctx.client.writes) == 2 and ctx.events == [core]  # no second Event

    ctx.set_clock(T + 120)  # 480 s left: still "~10m"
    assert loop.messages.refresh_eta_messages() == 0
    ctx.set_clock(T + 370)  # 230 s left: "~4m"
    assert loop.messages.refresh_eta_messages() == 1
    await _flush(loop)
    assert _message(ctx) == f"{core}; position 1, expected start in ~4m"
    assert len(ctx.client.writes) == 3 and ctx.events == [core]


async def test_the_first_message_waits_briefly_for_its_eta_and_carries_it() -> None:
    # A quiet cohort (no ETA run yet): x's first message is held back for the grace, the
    # refresher's run then queues it with its tail: one write, one Event.
    loop, ctx, sim = _loop(pending_message_eta_grace_seconds=1.0)
    d = next(d for d in sim.c.schedule(T + 60) if isinstance(d, Pending))
    loop.apply(d)
    await _flush(loop)
    assert ctx.client.writes == [] and loop.messages._next_deferred() == 1.0  # noqa: SLF001
    assert loop.messages.refresh_eta_messages() == 1
    await _flush(loop)
    assert _message(ctx) == f"{d.message}; position 1, expected start in ~10m"
    assert len(ctx.client.writes) == 1 and ctx.events == [d.message]


async def test_the_first_message_goes_out_without_an_eta_when_the_grace_ends() -> None:
    loop, ctx, sim = _loop(pending_message_eta_grace_seconds=1.0)
    d = next(d for d in sim.c.schedule(T + 60) if isinstance(d, Pending))
    loop.apply(d)
    await _flush(loop)
    assert ctx.client.writes == []
    ctx.set_clock(T + 60.5)
    assert loop.messages.requeue_deferred() == 0  # not due yet
    ctx.set_clock(T + 61.0)
    assert loop.messages.requeue_deferred() == 1
    await _flush(loop)
    assert _message(ctx) == d.message and len(ctx.client.writes) == 1


async def test_the_first_message_is_not_held_when_the_cohorts_eta_must_wait() -> None:
    # The cohort's run was computed a second ago: the next may start only after
    # eta_min_interval_seconds, so a newcomer's first message goes out at once, without.
    loop, ctx, sim = _loop(strict=False, pending_message_eta_grace_seconds=1.0)
    d = next(d for d in sim.c.schedule(T + 60) if isinstance(d, Pending))
    loop.apply(d)
    await _flush(loop)
    assert loop.messages.refresh_eta_messages() == 1
    await _flush(loop)
    ctx.set_clock(T + 61)
    sim.c.add_workload(workload("y").cq("gpu").pods(1, gpu=1).limit(60).build(creation=T + 61))
    ctx.store(None).put({"metadata": {"namespace": "ns", "name": "y"}, "spec": {}, "status": {}})
    dy = next(x for x in sim.c.schedule(T + 61) if isinstance(x, Pending) and x.workload == "ns/y")
    loop.apply(dy)
    await _flush(loop)
    assert _message(ctx) == dy.message and len(ctx.client.writes) == 2


def test_eta_suffix_names_only_the_first_positions_and_leaves_out_unknown() -> None:
    eta = Eta(T + 600, BOUNDED, "maximumExecutionTimeSeconds")
    assert eta_suffix(2, eta, T) == "position 3, expected start in ~10m"
    assert eta_suffix(10, eta, T) == "expected start in ~10m"
    assert eta_suffix(0, None, T) == "position 1"
    assert eta_suffix(12, Eta(None, "unknown", "no end known"), T) == ""


async def test_the_background_refresh_stops_at_its_share_and_resumes_where_it_stopped() -> None:
    """``refresh_eta_period`` computes for at most its budget per period (a cohort with
    thousands pending kept a core busy): over budget it returns the ClusterQueue to resume
    with; with room it finishes every queue's run and rewrites their messages."""
    sim = Sim(cluster_queue("gpu").flavor("a100", gpu=4).strict_fifo(),
              cluster_queue("cpu").flavor("c", cpu=4))
    sim.c.add_workload(workload("a").cq("gpu").pods(1, gpu=4).limit(600).build(creation=T - 5))
    assert sim.c.schedule(T)
    for i in range(40):
        sim.c.add_workload(workload(f"w{i}").cq("gpu").pods(1, gpu=1).limit(60)
                           .build(creation=T + i))
    store = FakeStore()
    ctx = SimpleNamespace(
        settings=Settings(controllers_enabled=False,
                          scheduling={"eta_budget_ms": 0.001, "eta_min_interval_seconds": 0}),
        client=FakeClient(), store=lambda kind: store, clock=lambda: T + 60, may_write=True,
        inflight=set(), recorder=SimpleNamespace(emit=lambda *a: None))
    framework = SimpleNamespace(owner_object=lambda wl: None, notify=lambda wl, key: None,
                                pods_holding=lambda wl, uid: None)
    loop = SchedulerLoop(ctx, jobs=framework, cluster=sim.c)  # type: ignore[arg-type]
    names = sim.c.cluster_queue_names()
    first = names.index("gpu")
    # No budget: one slice of gpu's run, which is not whole: gpu again next time.
    assert await loop.messages.refresh_eta_period(first, 0.0) == first
    # A queue whose run is whole after one slice (nothing pending): the next queue is next.
    other = names.index("cpu")
    assert await loop.messages.refresh_eta_period(other, 0.0) == (other + 1) % len(names)
    # Room enough: every run whole, back to where it started.
    assert await loop.messages.refresh_eta_period(first, 60.0) == first
    assert loop.eta.advance(sim.c, "gpu", T + 60)  # whole: nothing left to compute


def _arrive(loop: SchedulerLoop, ctx: SimpleNamespace, sim: Sim, name: str, at: float) -> None:
    """Workload ``name`` (1 GPU, 60 s) is created at ``at`` and the loop's cycles leave it
    pending (``apply`` of the Pending decisions, as the scheduling loop does)."""
    sim.c.add_workload(workload(name).cq("gpu").pods(1, gpu=1).limit(60).build(creation=at))
    ctx.store(None).put({"metadata": {"namespace": "ns", "name": name}, "spec": {},
                         "status": {}})
    for _ in range(10):  # BestEffortFIFO: one head per cycle, the others parked in turn
        decisions = sim.c.schedule(at)
        if not decisions:
            break
        for d in decisions:
            assert isinstance(d, Pending)
            loop.apply(d)


async def test_a_new_pending_workload_gets_its_eta_at_the_next_run_its_arrival_triggers() -> None:
    """A Workload that becomes pending makes its ClusterQueue owed a refresh
    (``refresh_eta_arrivals``), computed as soon as the board's rate limit
    (``eta_min_interval_seconds``) allows, not at the next ``eta_message_seconds`` period."""
    loop, ctx, sim = _loop(strict=False, eta_min_interval_seconds=5)
    _arrive(loop, ctx, sim, "x2", T + 60)  # x (created T+30) and x2 become pending
    assert loop.messages._eta_arrived == {"gpu"}  # noqa: SLF001
    assert await loop.messages.refresh_eta_arrivals(1.0) is None  # never computed: at once
    # a (4 GPUs) ends by T+600: x, x2 (and later y) start then, ~9 min from now.
    assert loop.messages._eta_tail["ns/x2"] == "position 2, expected start in ~10m"  # noqa: SLF001
    ctx.set_clock(T + 62)
    _arrive(loop, ctx, sim, "y", T + 62)
    # The cohort ran at T+60: the next run may start at T+65.
    assert await loop.messages.refresh_eta_arrivals(1.0) == 3.0
    assert loop.eta.eta(sim.c, "gpu", "ns/y", T + 62).basis == "not computed yet"
    assert "ns/y" not in loop.messages._eta_tail  # noqa: SLF001
    # Nothing is computed without budget, even when due: still owed, due now.
    ctx.set_clock(T + 65)
    assert await loop.messages.refresh_eta_arrivals(0.0) == 0.0
    assert await loop.messages.refresh_eta_arrivals(1.0) is None
    assert loop.messages._eta_tail["ns/y"] == "position 3, expected start in ~10m"  # noqa: SLF001
    assert "ns/y" in loop.messages._pending  # noqa: SLF001 - its message is queued for a rewrite
    # A Workload already pending (a second Pending decision) owes nothing.
    for d in sim.c.schedule(T + 66):
        if isinstance(d, Pending):
            loop.apply(d)
    assert await loop.messages.refresh_eta_arrivals(1.0) is None and loop.eta.runs == 2


async def test_an_arrival_during_a_sliced_run_gets_the_next_run_not_the_stale_one() -> None:
    """The cohort's run was going (in slices) when y became pending: that run, forked
    before y, is finished and a new one started, so y is not left "not computed yet"."""
    loop, ctx, sim = _loop(strict=False, eta_min_interval_seconds=0, eta_budget_ms=0.001)
    for i in range(5):
        _arrive(loop, ctx, sim, f"w{i}", T + 60)
    assert not loop.eta.advance(sim.c, "gpu", T + 60)  # one slice of a run: not whole
    _arrive(loop, ctx, sim, "y", T + 60)
    assert await loop.messages.refresh_eta_arrivals(60.0) is None
    assert loop.eta.runs == 2
    assert loop.messages._eta_tail["ns/y"] == "position 7, expected start in ~10m"  # noqa: SLF001


async def _until(check: Any, timeout: float = 10.0) -> None:
    """Wait for ``check()`` to hold (polling the event loop), at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def test_the_refresher_is_woken_by_arrivals_between_its_periods() -> None:
    """The background refresher (``_eta_refresher``) with an hour-long period: a new
    pending Workload gets its ETA tail without waiting for the period, and one that
    arrives right after a run gets it once ``eta_min_interval_seconds`` has passed."""
    loop, ctx, sim = _loop(strict=False, eta_min_interval_seconds=0.3,
                           eta_message_seconds=3600)
    t0 = time.monotonic()
    ctx.clock = lambda: T + 60 + (time.monotonic() - t0)  # the real time, from T+60
    task = asyncio.create_task(loop.messages.run_refresher())  # noqa: SLF001
    try:
        _arrive(loop, ctx, sim, "y", T + 60)
        await _until(lambda: "ns/y" in loop.messages._eta_tail)  # noqa: SLF001
        assert loop.messages._eta_tail["ns/y"] == "position 2, expected start in ~10m"  # noqa: SLF001
        ran = loop.eta.runs
        _arrive(loop, ctx, sim, "z", ctx.clock())
        await _until(lambda: "ns/z" in loop.messages._eta_tail)  # noqa: SLF001
        # One more run, not before the interval since the last one.
        assert loop.eta.runs == ran + 1
        assert loop.eta.for_cluster_queue(sim.c, "gpu", ctx.clock()).computed_at \
            >= T + 60 + 0.3
        assert not loop.messages._eta_arrived  # noqa: SLF001
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_workload_pending_again_after_its_admission_carries_no_eta_from_before() -> None:
    """``make run`` step 3: train-6, admitted and then evicted, showed the ETA tail computed
    while it first waited ("expected start in under a minute") while the status API said
    "not computed yet". An admission ends the Workload's pending message state."""
    loop, ctx, sim = _loop()
    loop.apply(next(d for d in sim.c.schedule(T + 60) if isinstance(d, Pending)))
    await _flush(loop)
    assert loop.messages.refresh_eta_messages() == 1
    await _flush(loop)
    assert _message(ctx).endswith("; position 1, expected start in ~10m")
    # a finishes; x is admitted (its admission write is left out here).
    sim.c.finish(sim.key("a"))
    admits = [d for d in sim.c.schedule(T + 70) if isinstance(d, Admit)]
    assert [d.workload for d in admits] == ["ns/x"]
    spawned: list[Any] = []
    loop.writes.spawn = lambda coro: (spawned.append(coro), coro.close())  # type: ignore[method-assign]
    loop.apply(admits[0])
    # The write failed; an older Workload now needs the whole queue: x waits again.
    sim.c.add_workload(workload("older").cq("gpu").pods(1, gpu=4).limit(60)
                       .build(creation=T + 10))
    sim.c.forget(sim.key("x"))
    ctx.inflight.discard("ns/x")  # as the failed ``DecisionWriter.admit`` does
    again = [d for t in (71, 72) for d in sim.c.schedule(T + t)
             if isinstance(d, Pending) and d.workload == "ns/x"]  # older first, then x
    assert again
    loop.apply(again[0])
    await _flush(loop)
    assert "expected start" not in _message(ctx), _message(ctx)
