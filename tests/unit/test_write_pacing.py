"""Fewer API writes per admission (issue 16): a pending message is rewritten at once only when
it changes materially, a change of numbers or of the ETA tail at most every
``pending_message_refresh_seconds`` per Workload (the newest text when the interval ends), a
Warning Event only for a new reason or wording (app/controllers/pacing.py,
PendingMessages._write_pending), and Events per object and reason are rate-limited as
client-go's spam filter does (app/kube/events.py)."""

from __future__ import annotations

import pytest

from app.controllers.pacing import MATERIAL, REFRESH, SAME, pending_change, skeleton, split_tail
from app.core.decisions import Pending, PendingReason
from app.core.types import ClusterQueueName, WorkloadKey
from app.kube.events import EventRecorder
from tests.unit.test_eta_messages import T, _flush, _loop, _message

KEY = WorkloadKey("ns/x")
SHORT = ("insufficient unused quota for cpu in flavor default: 6 requested, {} available, "
         "limited by nominalQuota (nominal 8, usage {}, borrowed 0)")


def _pending(message: str, reason: PendingReason = PendingReason.WAITING_FOR_QUOTA) -> Pending:
    return Pending(KEY, ClusterQueueName("gpu"), reason, message)


def _qr(message: str, reason: str = "Pending", status: str = "False") -> dict[str, str]:
    return {"type": "QuotaReserved", "status": status, "reason": reason, "message": message}


@pytest.mark.parametrize(("current", "reason", "message", "want"), [
    pytest.param(None, "Pending", "x", MATERIAL, id="no condition yet: material"),
    pytest.param(_qr("m", "QuotaReserved", "True"), "Pending", "m", MATERIAL,
                 id="quota was reserved: material"),
    pytest.param(_qr("m"), "Inadmissible", "m", MATERIAL, id="another reason: material"),
    pytest.param(_qr(SHORT.format(2, 6)), "Pending", SHORT.format(2, 6), SAME, id="same"),
    pytest.param(_qr(SHORT.format(2, 6)), "Pending", SHORT.format("500m", "7500m"), REFRESH,
                 id="only numbers and quantities changed: refresh"),
    pytest.param(_qr("waiting; position 3, expected start in ~10m"), "Pending",
                 "waiting; position 2, expected start in ~5m", REFRESH,
                 id="only the ETA tail changed: refresh"),
    pytest.param(_qr("waiting"), "Pending", "waiting; position 1", REFRESH,
                 id="an ETA tail appears: refresh"),
    pytest.param(_qr(SHORT.format(2, 6)), "Pending",
                 "no longer fits after processing another workload this cycle; will retry",
                 MATERIAL, id="other words: material"),
    pytest.param(_qr("insufficient quota in flavor a100"), "Pending",
                 "insufficient quota in flavor l4", MATERIAL, id="another flavor: material"),
])
def test_pending_change_tells_material_from_refresh(current, reason, message, want) -> None:
    assert pending_change(current, reason, message) == want


def test_the_tail_is_only_the_loops_eta_suffix() -> None:
    assert split_tail("a; b; position 3, expected start in ~1h") == (
        "a; b", "position 3, expected start in ~1h")
    assert split_tail("a; will retry") == ("a; will retry", "")
    assert skeleton("cohort c1: 14 of 16 in use; expected start now") == "cohort c#: # of # in use"


async def test_a_numbers_only_change_waits_for_the_interval_then_the_newest_is_written() -> None:
    loop, ctx, _ = _loop(refresh_seconds=60.0)
    loop.apply(_pending(SHORT.format(2, 6)))
    await _flush(loop)
    assert len(ctx.client.writes) == 1 and len(ctx.events) == 1

    ctx.set_clock(T + 70)  # 10 s after the first write: numbers only -> held back
    loop.apply(_pending(SHORT.format(1, 7)))
    await _flush(loop)
    loop.apply(_pending(SHORT.format(0, 8)))
    await _flush(loop)
    assert len(ctx.client.writes) == 1 and loop.messages.pending_deferred == 1
    assert loop.messages.requeue_deferred() == 0  # not due yet

    ctx.set_clock(T + 120)  # 60 s after the first write: the newest numbers land
    assert loop.messages.requeue_deferred() == 1
    await _flush(loop)
    assert len(ctx.client.writes) == 2 and _message(ctx) == SHORT.format(0, 8)
    assert len(ctx.events) == 1  # the same wording: no second Event


async def test_a_material_change_is_written_at_once_with_an_event() -> None:
    loop, ctx, _ = _loop(refresh_seconds=60.0)
    loop.apply(_pending(SHORT.format(2, 6)))
    await _flush(loop)
    ctx.set_clock(T + 61)  # 1 s after the first write: numbers only -> held back
    loop.apply(_pending(SHORT.format(1, 7)))
    await _flush(loop)
    assert len(ctx.client.writes) == 1
    ctx.set_clock(T + 62)  # new words: at once, and the held-back refresh is moot
    retry = "no longer fits after processing another workload this cycle; will retry"
    loop.apply(_pending(retry))
    await _flush(loop)
    assert len(ctx.client.writes) == 2 and _message(ctx) == retry
    assert ctx.events == [SHORT.format(2, 6), retry]
    assert loop.messages._deferred == {}  # noqa: SLF001 - nothing left to refresh


async def test_eta_tail_changes_are_paced_per_workload() -> None:
    loop, ctx, sim = _loop(refresh_seconds=60.0)
    decisions = [d for d in sim.c.schedule(T + 60) if isinstance(d, Pending)]
    loop.apply(decisions[0])
    await _flush(loop)
    core = decisions[0].message
    assert loop.messages.refresh_eta_messages() == 1  # the tail appears at once: held back
    await _flush(loop)
    assert len(ctx.client.writes) == 1 and _message(ctx) == core
    # "position 1, expected start in ~10m" (or without the ETA when its budget ran out)
    tail = loop.messages._eta_tail[KEY]  # noqa: SLF001

    ctx.set_clock(T + 120)
    assert loop.messages.requeue_deferred() == 1
    await _flush(loop)
    assert tail.startswith("position 1") and _message(ctx) == f"{core}; {tail}"
    assert len(ctx.client.writes) == 2 and ctx.events == [core]


def test_events_about_one_object_and_reason_are_rate_limited() -> None:
    clock = [T]
    rec = EventRecorder(None, burst=3, refill_seconds=300.0, clock=lambda: clock[0])
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": "x", "namespace": "ns", "uid": "u1"}}
    other = {**wl, "metadata": {**wl["metadata"], "name": "y", "uid": "u2"}}
    assert [rec.emit(wl, "Warning", "Pending", f"m{i}") for i in range(5)] == [
        True, True, True, False, False]
    assert rec.rate_limited == 2
    assert rec.emit(wl, "Normal", "Preempted", "p")  # another reason: its own bucket
    assert rec.emit(other, "Warning", "Pending", "m9")  # another object: its own bucket
    clock[0] += 300  # one token back
    assert rec.emit(wl, "Warning", "Pending", "m5") and not rec.emit(wl, "Warning", "Pending",
                                                                      "m6")


def test_the_default_bucket_is_client_gos() -> None:
    rec = EventRecorder(None)
    assert (rec.burst, rec.refill_seconds) == (25, 300.0)


def test_refresh_credit_gives_way_to_a_busy_controller() -> None:
    """The ETA refresher earns ``share`` of the time on a quiet controller and ``share x
    floor`` while the rest of the process keeps a CPU busy; its own computing does not
    count as the rest's."""
    from app.controllers.pacing import RefreshCredit

    quiet = RefreshCredit(0.1, 1.5, wall=0.0, cpu=0.0)
    quiet.spend(1.5)
    assert quiet.earn(10.0, 0.0) == pytest.approx(1.0)  # 0.1 x 10 s
    busy = RefreshCredit(0.1, 1.5, wall=0.0, cpu=0.0)
    busy.spend(1.5)
    busy.earn(10.0, 10.0)
    # The rest used 10 - 1.5 = 8.5 of 10 s: rate 0.1 x max(0.25, 0.15) = 0.025.
    assert busy.rate == pytest.approx(0.025)
    assert busy.credit == pytest.approx(0.25)
    # Half busy: half the share; the refresher's own 1 s of CPU is not the rest's.
    half = RefreshCredit(0.1, 1.5, wall=0.0, cpu=0.0)
    half.spend(1.0)
    half.earn(10.0, 6.0)
    assert half.rate == pytest.approx(0.05)
    assert half.seconds_until(half.credit + 0.5) == pytest.approx(10.0)
    # Never more than the cap.
    assert RefreshCredit(0.1, 1.5).earn(1e6, 0.0) == 1.5
    with pytest.raises(ValueError, match="share"):
        RefreshCredit(0.0, 1.0)
