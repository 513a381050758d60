"""Issue 14.10: only the leader writes. A Manager whose election never succeeds must make no
write at all (no Workload, no Job update, no status, no Event, no finalizer), however much
there is to do; the same Manager, once leading, does write (so the fake records writes and
the first test can fail)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.config import LeaderElectionSettings, Settings
from app.controllers.client import (
    CLUSTER_QUEUES,
    JOBS,
    LOCAL_QUEUES,
    NAMESPACES,
    RESOURCE_FLAVORS,
    Resource,
)
from app.controllers.leader import LeaderElector
from app.controllers.manager import Manager

NS = "research"
OBJECTS: dict[str, list[dict[str, Any]]] = {
    NAMESPACES.plural: [{"metadata": {"name": NS, "resourceVersion": "1"}}],
    RESOURCE_FLAVORS.plural: [{"metadata": {"name": "default-flavor", "resourceVersion": "1"}}],
    CLUSTER_QUEUES.plural: [{"metadata": {"name": "cq", "resourceVersion": "1"}, "spec": {
        "namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}}],
    LOCAL_QUEUES.plural: [{"metadata": {"name": "lq", "namespace": NS, "resourceVersion": "1"},
                           "spec": {"clusterQueue": "cq"}}],
    JOBS.plural: [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "j", "namespace": NS, "uid": "u1", "resourceVersion": "1",
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"suspend": True, "parallelism": 1, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}}],
}


class RecordingClient:
    """Lists fixed objects, watches forever, records every write (and answers it)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []
        self._rv = 100

    async def list(self, res: Resource, namespace: str | None = None, **_: Any):
        return [dict(o) for o in OBJECTS.get(res.plural, [])], "1"

    async def watch(self, res: Resource, namespace: str | None = None, **_: Any):
        await asyncio.Event().wait()
        yield {}  # pragma: no cover - never reached

    def _answer(self, verb: str, res: Resource, body: Any, name: str = "") -> dict[str, Any]:
        self.writes.append((verb, res.plural))
        self._rv += 1
        out = dict(body) if isinstance(body, dict) and "metadata" in body else {
            "metadata": {"name": name}}
        out["metadata"] = {**out["metadata"], "resourceVersion": str(self._rv),
                           "uid": f"uid-{self._rv}"}
        return out

    async def create(self, res: Resource, body: dict[str, Any], *_: Any, **__: Any):
        return self._answer("create", res, body)

    async def replace(self, res: Resource, body: dict[str, Any], *_: Any, **__: Any):
        return self._answer("replace", res, body)

    async def patch(self, res: Resource, name: str, patch: Any, *_: Any, **__: Any):
        return self._answer("patch", res, None, name)

    async def delete(self, res: Resource, name: str, *_: Any, **__: Any):
        return self._answer("delete", res, None, name)

    async def get(self, res: Resource, name: str, *_: Any, **__: Any):
        from app.controllers.errors import NotFound
        raise NotFound(404, "not found")

    async def close(self) -> None:
        return None


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
