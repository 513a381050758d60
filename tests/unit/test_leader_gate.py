"""Issue 14.10: only the leader writes. A Manager whose election never succeeds must make no
write at all (no Workload, no Job update, no status, no Event, no finalizer), however much
there is to do; the same Manager, once leading, does write (so the fake records writes and
the first test can fail)."""

from __future__ import annotations

import asyncio

import pytest

from app.config import LeaderElectionSettings, Settings
from app.controllers.manager import Manager
from app.kube.leader import LeaderElector
from tests.recording_client import RecordingClient


async def _run(monkeypatch: pytest.MonkeyPatch, *, wins: bool) -> list[tuple[str, str]]:
    async def campaign(self: LeaderElector) -> None:
        if wins:
            self._set(True)
        await asyncio.Event().wait()  # a rival holds the Lease for ever (or we keep it)

    monkeypatch.setattr(LeaderElector, "run", campaign)
    client = RecordingClient()
    settings = Settings(controllers_enabled=True,
                        leader_election=LeaderElectionSettings(enabled=True))
    m = Manager(settings, client=client, watch_nodes=False)  # type: ignore[arg-type]
    await m.start()
    try:
        await m.wait_ready(10)
        # Long enough for every worker, the scheduling loop and the status flush to act.
        for _ in range(40):
            await asyncio.sleep(0.05)
            if wins and any(v == "create" and r == "workloads" for v, r in client.writes):
                break
    finally:
        await m.stop()
    return client.writes


async def test_a_follower_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert LeaderElectionSettings().enabled, "leader election is on by default"
    writes = await _run(monkeypatch, wins=False)
    assert writes == []


async def test_the_same_manager_writes_once_it_leads(monkeypatch: pytest.MonkeyPatch) -> None:
    writes = await _run(monkeypatch, wins=True)
    assert ("create", "workloads") in writes
