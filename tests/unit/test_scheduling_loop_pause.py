"""The scheduling loop's pause (``scheduling.cycle_pause_ratio``, ``cycle_pause_max_seconds``):
before the next cycle it waits the last cycle's wall time times the ratio, capped, at least the
given floor (the 5 ms debounce after a wake-up, 0 between KeepGoing cycles); ratio 0 is
Kueue's pacing (no pause beyond the floor)."""

from __future__ import annotations

from app.controllers import scheduling_loop
from tests.unit.test_eta_messages import _loop


def _timed_cycle(monkeypatch, loop, seconds: float) -> None:
    """One real cycle whose wall time reads ``seconds`` (the loop's perf_counter, faked)."""
    ticks = iter([0.0, seconds, seconds])
    monkeypatch.setattr(scheduling_loop.time, "perf_counter", lambda: next(ticks))
    loop.run_cycle()
    monkeypatch.undo()


def test_a_slow_cycle_is_followed_by_a_pause_as_long_capped_and_floored(monkeypatch):
    loop, _, _ = _loop()
    _timed_cycle(monkeypatch, loop, 0.2)
    assert loop.last_cycle_seconds == 0.2
    assert loop.pause(0.0) == 0.2  # ratio 1 (default)
    _timed_cycle(monkeypatch, loop, 3.0)
    assert loop.pause(0.0) == 0.5  # cycle_pause_max_seconds
    _timed_cycle(monkeypatch, loop, 0.001)
    assert loop.pause(0.005) == 0.005 and loop.pause(0.0) == 0.001


def test_ratio_zero_is_kueues_pacing(monkeypatch):
    loop, _, _ = _loop(cycle_pause_ratio=0.0)
    _timed_cycle(monkeypatch, loop, 0.4)
    assert loop.pause(0.0) == 0.0 and loop.pause(0.005) == 0.005


def test_the_ratio_scales_the_pause(monkeypatch):
    loop, _, _ = _loop(cycle_pause_ratio=2.0, cycle_pause_max_seconds=10.0)
    _timed_cycle(monkeypatch, loop, 0.3)
    assert loop.pause(0.0) == 0.6


def test_the_loop_waits_for_an_event_no_longer_than_the_cores_next_timer():
    """``idle_wait`` with a requeue batch: the core's next timer (the batch, a backoff, a
    minimum runtime) shortens the wait for an event; past timers do not make it negative; a
    replica that is not the leader runs no cycle, so it waits the whole interval. Without a
    batch (the default) the wait is the interval whatever the timers."""
    loop, ctx, sim = _loop()
    now = ctx.clock()
    sim.c._wake(now + 0.25)
    assert loop.idle_wait(1.0) == 1.0
    loop, ctx, sim = _loop(requeue_batch_seconds=1.0)
    now = ctx.clock()
    assert sim.c.next_wakeup() is None and loop.idle_wait(1.0) == 1.0
    sim.c._wake(now + 0.25)
    assert loop.idle_wait(1.0) == 0.25
    assert loop.idle_wait(0.1) == 0.1
    sim.c._wake(now - 3.0)
    assert loop.idle_wait(1.0) == 0.0
    ctx.may_write = False
    assert loop.idle_wait(1.0) == 1.0
