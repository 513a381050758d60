"""breaker7: the ETA refresher's CPU credit (``app.controllers.pacing.RefreshCredit``) is
charged the refresher's own computing, not the time other coroutines run while it yields
between slices. Charged by the wall clock around a whole refresh, an admission storm that
runs at each of its yields counted as the refresher's own CPU: the storm looked idle to
``earn`` (the rate stayed at ``share`` instead of falling towards ``share x floor``) and
the credit was drained by others' work."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

import app.controllers.pending_messages as sched_mod
from app.controllers.pacing import RefreshCredit
from tests.unit.test_eta_messages import _arrive, _loop, _until

T = 1_000_000.0


def _burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def test_the_refresher_is_charged_its_own_slices_not_the_others_work(
        monkeypatch: pytest.MonkeyPatch) -> None:
    charged: list[float] = []

    class Recording(RefreshCredit):
        def spend(self, seconds: float) -> None:
            charged.append(seconds)
            super().spend(seconds)

    monkeypatch.setattr(sched_mod, "RefreshCredit", Recording)
    loop, ctx, sim = _loop(strict=False, eta_min_interval_seconds=0.0,
                           eta_message_seconds=3600, eta_budget_ms=0.5, eta_refresh_share=1.0)
    computed = [0.0]
    advance = loop.eta.advance

    def timed_advance(*a: Any, **kw: Any) -> bool:
        t0 = time.perf_counter()
        try:
            return advance(*a, **kw)
        finally:
            computed[0] += time.perf_counter() - t0

    loop.eta.advance = timed_advance  # type: ignore[method-assign]
    t0 = time.monotonic()
    ctx.clock = lambda: T + 60 + (time.monotonic() - t0)
    stop = False

    async def storm() -> None:  # the rest of the controller: 10 ms of work at every turn
        while not stop:
            _burn(0.01)
            await asyncio.sleep(0)

    busy = asyncio.create_task(storm())
    task = asyncio.create_task(loop.messages.run_refresher())  # noqa: SLF001
    try:
        for i in range(30):
            _arrive(loop, ctx, sim, f"y{i}", ctx.clock())
        loop.messages._eta_kick.set()  # noqa: SLF001
        await _until(lambda: "ns/y29" in loop.messages._eta_tail)  # noqa: SLF001
    finally:
        stop = True
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await busy
    assert charged and computed[0] > 0
    # Its own computing (the slices, plus the messages written after each whole run) is
    # charged; the storm's 10 ms turns at its yields are not.
    assert sum(charged) < 2 * computed[0] + 0.01, (sum(charged), computed[0], len(charged))


def test_refresh_credit_never_waits_for_ever_nor_divides_by_zero() -> None:
    """``floor`` 0 on a fully busy process: rate 0, ``seconds_until`` is ``inf`` (not a
    ZeroDivisionError in the refresher); an amount over the cap (an ``eta_budget_ms``
    larger than ``eta_refresh_share x eta_message_seconds``) is due once the cap is banked,
    not never (arrivals would wait for the period)."""
    c = RefreshCredit(0.5, 1.0, floor=0.0, wall=0.0, cpu=0.0)
    c.spend(1.0)
    c.earn(10.0, 11.0)  # the rest: 10 of 10 s
    assert c.rate == 0.0 and c.seconds_until(0.1) == float("inf")
    small = RefreshCredit(0.01, 0.01, wall=0.0, cpu=0.0)  # 1 s periods at 1 %
    assert small.seconds_until(0.05) == 0.0  # a 50 ms slice: the full bank is enough
    small.spend(0.01)
    small.earn(0.5, 0.0)
    assert small.seconds_until(0.05) == pytest.approx(0.5)
    # Clocks that stand still or step back earn nothing and change nothing.
    assert small.earn(0.5, 0.0) == small.earn(0.4, 0.0) == pytest.approx(0.005)
