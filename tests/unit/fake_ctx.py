"""A stand-in for ``app.kube.context.Context`` in unit tests of the job framework: the stores
the reconciler and the kinds read (filled by the test), and a client that records every write
as (verb, resource plural, name) instead of sending it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from app.config import Settings
from app.kube.informers import InformerSet, Store


class StoreOnly:
    """An informer's stand-in: its ``store``, nothing watched."""

    def __init__(self, resource: Any) -> None:
        self.store = Store(resource)


class Informers(InformerSet):
    """An ``InformerSet`` of one ``StoreOnly`` per key (store key -> ``Resource``), in
    ``keys``' order; a test adds more with ``add``."""

    def __init__(self, keys: Mapping[str, Any]) -> None:
        super().__init__()
        for k, r in keys.items():
            self.add(k, StoreOnly(r))  # type: ignore[arg-type]


class FakeCtx:
    """``keys``: store key -> ``Resource``; ``objects``: put into the store of each key.
    ``refuse_create``: what a create raises (after it is recorded). A Job's status patch
    answers the stored Job (store ``job_store``) with an empty status."""

    def __init__(self, keys: Mapping[str, Any],
                 objects: Mapping[str, Iterable[dict[str, Any]]] | None = None, *,
                 refuse_create: Exception | None = None, job_store: str = "job") -> None:
        self.settings = Settings()
        self.informers = Informers(keys)
        for key, objs in (objects or {}).items():
            for obj in objs:
                self.store(key).put(obj)
        self.refuse_create = refuse_create
        self.job_store = job_store
        self.writes: list[tuple[str, str, str]] = []
        self.created: list[dict[str, Any]] = []
        self.inflight: set[str] = set()
        self.recorder = type("R", (), {"emit": staticmethod(lambda *_: True)})()
        self.client = self

    def store(self, key: str) -> Store:
        return self.informers.store(key)

    def wake(self) -> None:
        pass

    async def replace(self, res: Any, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.writes.append(("replace", res.plural, body["metadata"]["name"]))
        return body

    async def patch(self, res: Any, name: str, patch: Any, namespace: str = "", *_: Any,
                    **__: Any) -> dict[str, Any]:
        self.writes.append(("patch", res.plural, name))
        stored = self.store(self.job_store).get(f"{namespace}/{name}") or {}
        return {**stored, "status": {}}

    async def delete(self, res: Any, name: str, *_: Any, **__: Any) -> None:
        self.writes.append(("delete", res.plural, name))

    async def create(self, res: Any, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("create", res.plural, body["metadata"]["name"]))
        self.created.append(body)
        if self.refuse_create is not None:
            raise self.refuse_create
        return {**body, "metadata": {**body["metadata"], "uid": "w-1", "resourceVersion": "1"}}
