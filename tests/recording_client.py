"""An in-process stand-in for ``KubeClient`` that lists fixed objects, watches forever and
records every write (answering it as the API server would, with a new resourceVersion).
For tests of which writes the controllers make; behaviour against a real API server is
tested on the lab."""

from __future__ import annotations

import asyncio
from typing import Any

from app.kube.client import (
    CLUSTER_QUEUES,
    JOBS,
    LOCAL_QUEUES,
    NAMESPACES,
    RESOURCE_FLAVORS,
    Resource,
)
from app.kube.errors import NotFound

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
    """Lists ``objects`` (resource plural -> objects; default ``OBJECTS``), watches forever,
    records every write as (verb, plural) in ``writes`` and the bodies in ``bodies``."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self.objects = OBJECTS if objects is None else objects
        self.writes: list[tuple[str, str]] = []
        self.bodies: list[tuple[str, str, Any]] = []
        self._rv = 100

    async def list(self, res: Resource, namespace: str | None = None, **_: Any):
        return [dict(o) for o in self.objects.get(res.plural, [])], "1"

    async def watch(self, res: Resource, namespace: str | None = None, **_: Any):
        await asyncio.Event().wait()
        yield {}  # pragma: no cover - never reached

    def _answer(self, verb: str, res: Resource, body: Any, name: str = "") -> dict[str, Any]:
        self.writes.append((verb, res.plural))
        self.bodies.append((verb, res.plural, body))
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
        raise NotFound(404, "not found")

    async def request(self, method: str, path: str, **_: Any):
        """Discovery and other raw paths: nothing is served (optional kinds are left out)."""
        raise NotFound(404, f"{method} {path}: not found")

    async def close(self) -> None:
        return None


