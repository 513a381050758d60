"""List + watch into in-memory stores, one informer per kind (client-go's reflector/informer).

Each ``Informer`` lists its kind (paged), fills its ``Store`` and then watches from the list's
resourceVersion with bookmarks. It keeps the latest resourceVersion seen (events and
bookmarks), re-watches from it when the server ends a stream, relists when the API server
answers 410 Gone (the version is too old), and backs off exponentially on errors (the API
server restarting, a CRD not installed yet). After a relist it tells its handlers what
changed (ADDED / MODIFIED / DELETED), so nothing is missed across a gap.

What changed is judged against what the handlers were last *told* (per key, the object of
the last event they got), not against the store: writers put their responses into the store
early (``Store.put``), and when the watch breaks before it delivers the event of such a write
(kube-apiserver restarting), the relist finds the store already at that resourceVersion. The
handlers must still hear of it, or the scheduler never learns of a Workload just created, or
keeps the quota of one just finished, and nothing wakes it up again.

Handlers are synchronous ``(event_type, old, new) -> None`` callables; they must only update
stores / caches and signal a wake-up (design.md: "Watch handlers only update stores").
``synced`` is set after the first complete list; ``InformerSet.wait_synced()`` is the barrier
before any decision.

Objects are plain ``dict``s as the API server sends them, minus ``metadata.managedFields``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType

from app.kube.client import KubeClient, Resource
from app.kube.errors import ApiError, Backoff, Gone, from_exception, from_status
from app.wire.fields import Obj

log = logging.getLogger(__name__)

Handler = Callable[[str, Obj | None, Obj | None], None]

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def object_key(obj: Obj) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def resource_version(obj: Obj | None) -> str:
    """``metadata.resourceVersion`` or ``""``."""
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion", ""))


class Store:
    """Objects of one kind by ``object_key``. Read-only for everyone but its informer.

    Secondary indexes (``index``): ``name -> (key function, index value -> object keys)``,
    kept up to date by every ``put``/``remove``/``replace_all`` (the informer's events and the
    writers that put their own write early alike), so ``by_index`` costs the size of its
    answer, not of the store.
    """

    def __init__(self, resource: Resource) -> None:
        self.resource = resource
        self._items: dict[str, Obj] = {}
        self._indexes: dict[str, tuple[Callable[[Obj], str | None], dict[str, set[str]]]] = {}

    def index(self, name: str, key_fn: Callable[[Obj], str | None]) -> None:
        """Keep index ``name``: ``key_fn(obj)`` is the object's index value (None: not
        indexed). Built from the current content once (O(store)); later calls with the same
        ``name`` are no-ops."""
        if name in self._indexes:
            return
        buckets: dict[str, set[str]] = {}
        for key, obj in self._items.items():
            value = key_fn(obj)
            if value is not None:
                buckets.setdefault(value, set()).add(key)
        self._indexes[name] = (key_fn, buckets)

    def by_index(self, name: str, value: str) -> list[Obj]:
        """The objects whose index ``name`` value is ``value`` (any order). Raises
        ``KeyError`` when the index was never created (``index``)."""
        keys = self._indexes[name][1].get(value, ())
        return [self._items[k] for k in keys]

    def _reindex(self, key: str, old: Obj | None, new: Obj | None) -> None:
        for key_fn, buckets in self._indexes.values():
            before = key_fn(old) if old is not None else None
            after = key_fn(new) if new is not None else None
            if before == after:
                continue
            if before is not None and (bucket := buckets.get(before)) is not None:
                bucket.discard(key)
                if not bucket:
                    del buckets[before]
            if after is not None:
                buckets.setdefault(after, set()).add(key)

    def get(self, key: str) -> Obj | None:
        return self._items.get(key)

    def list(self) -> list[Obj]:
        return list(self._items.values())

    def keys(self) -> list[str]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Obj]:
        return iter(list(self._items.values()))

    def __contains__(self, key: object) -> bool:
        return key in self._items

    # --- used by the informer (and by writers that want to see their own write early) ---

    def put(self, obj: Obj) -> Obj | None:
        """Insert or replace; returns the old object. Ignores an older resourceVersion of a
        known object (a write's response racing the watch)."""
        key = object_key(obj)
        old = self._items.get(key)
        if old is not None and _rv_older(resource_version(obj), resource_version(old)):
            return old
        self._items[key] = obj
        if self._indexes:
            self._reindex(key, old, obj)
        return old

    def set(self, key: str, obj: Obj) -> None:
        """Store ``obj`` under ``key`` whatever its resourceVersion (the watch's event)."""
        old = self._items.get(key)
        self._items[key] = obj
        if self._indexes:
            self._reindex(key, old, obj)

    def remove(self, key: str) -> Obj | None:
        old = self._items.pop(key, None)
        if old is not None and self._indexes:
            self._reindex(key, old, None)
        return old

    def replace_all(self, objs: Iterable[Obj]) -> dict[str, Obj]:
        """Replace the whole content (indexes rebuilt); returns the previous content."""
        old = self._items
        self._items = {object_key(o): o for o in objs}
        indexes, self._indexes = self._indexes, {}
        for name, (key_fn, _) in indexes.items():
            self.index(name, key_fn)
        return old


def _rv_older(a: str, b: str) -> bool:
    """True when resourceVersion ``a`` is known to be older than ``b`` (both integers)."""
    try:
        return int(a) < int(b)
    except ValueError:
        return False


def _strip(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def identity_only(obj: Obj) -> Obj:
    """What a store needs to tell that ``obj`` exists, whether it is being deleted and what
    controls it: ``apiVersion``, ``kind`` and of ``metadata`` the ``name``, ``namespace``,
    ``uid``, ``resourceVersion``, ``deletionTimestamp`` (a Job being deleted adopts no pod:
    ``framework.adopted_by_job``) and the controller ownerReference(s) (``controller:
    true``; ``apiVersion``, ``kind``, ``name``, ``uid``), the rest dropped (labels,
    annotations, spec, status). For a read-only store whose readers look objects up only to
    find them and follow their controller (``Informer`` ``transform``)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    out_meta: Obj = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                          "deletionTimestamp") if k in meta}
    refs = meta.get("ownerReferences")
    controllers = [{k: r[k] for k in ("apiVersion", "kind", "name", "uid", "controller")
                    if k in r}
                   for r in refs if isinstance(r, dict) and r.get("controller") is True] \
        if isinstance(refs, list) else []
    if controllers:
        out_meta["ownerReferences"] = controllers
    out: Obj = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    out["metadata"] = out_meta
    return out


class Informer:
    """List + watch one kind into ``store``; call handlers on every change.

    ``namespace``: only that namespace (None = all); ``label_selector``: server-side filter;
    ``transform``: applied to every object before it is stored and handed to the handlers
    (``identity_only``: a store that needs less than whole objects keeps less; a store with
    writers, whose ``Store.put`` takes whole objects, must not have one).
    ``watch_timeout_seconds``: asked per watch request (randomised by up to +50% so many
    informers do not reconnect together). Counters for tests/metrics: ``lists``, ``relists``
    (lists after the first), ``watches`` (watch requests), ``errors``.
    """

    def __init__(self, client: KubeClient, resource: Resource, *,
                 namespace: str | None = None, label_selector: str | None = None,
                 watch_timeout_seconds: int = 300, backoff: Backoff | None = None,
                 transform: Callable[[Obj], Obj] | None = None) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.transform = transform
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff = backoff or Backoff(base=0.2, cap=10.0)
        self.store = Store(resource)
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.handlers: list[Handler] = []
        self.lists = 0
        self.relists = 0
        self.watches = 0
        self.errors = 0
        self.last_error: ApiError | None = None
        # Per key: the object of the last event given to the handlers (DELETED drops it).
        self._announced: dict[str, Obj] = {}

    @property
    def name(self) -> str:
        return self.resource.plural

    def _kept(self, obj: Obj) -> Obj:
        """A listed object as the store keeps it (``_strip``, then ``transform``)."""
        obj = _strip(obj)
        return obj if self.transform is None else self.transform(obj)

    def add_handler(self, handler: Handler) -> None:
        self.handlers.append(handler)

    def _emit(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        if etype == DELETED:
            if old is not None:
                self._announced.pop(object_key(old), None)
        elif new is not None:
            self._announced[object_key(new)] = new
        for h in self.handlers:
            try:
                h(etype, old, new)
            except Exception:  # noqa: BLE001 - a handler bug must not stop the watch
                log.exception("informer %s: handler failed on %s", self.name, etype)

    async def relist(self) -> None:
        """List everything, replace the store and emit the differences."""
        items, rv = await self.client.list(self.resource, self.namespace,
                                           label_selector=self.label_selector)
        self.lists += 1
        if self.synced.is_set():
            self.relists += 1
        self.store.replace_all(self._kept(o) for o in items)
        # Differences against what the handlers were told (see the module doc), not
        # against the old store, which may already hold a writer's response.
        for key, obj in list(self.store._items.items()):  # noqa: SLF001 - own store
            told = self._announced.get(key)
            if told is None:
                self._emit(ADDED, None, obj)
            elif resource_version(told) != resource_version(obj):
                self._emit(MODIFIED, told, obj)
        for key, told in list(self._announced.items()):
            if key not in self.store:
                self._emit(DELETED, told, None)
        self.resource_version = rv
        self.synced.set()

    def _apply(self, event: Obj) -> None:
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "BOOKMARK":
            self.resource_version = resource_version(obj) or self.resource_version
            return
        if etype == "ERROR":
            raise from_status(int(obj.get("code") or 500), json.dumps(obj))
        if etype not in (ADDED, MODIFIED, DELETED):
            return
        obj = _strip(obj)
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        if self.transform is not None:
            obj = self.transform(obj)
        rv = resource_version(obj)
        if etype == DELETED:
            old = self.store.remove(object_key(obj))
            self._emit(DELETED, old or obj, None)
        else:
            key = object_key(obj)
            old = self.store.get(key)
            if old is not None and _rv_older(rv, resource_version(old)):
                # A writer already stored the response of a later write: never go back in
                # time; the event of that write follows and is announced then.
                self.resource_version = rv or self.resource_version
                return
            self.store.set(key, obj)  # the watch is authoritative
            told = self._announced.get(key)
            self._emit(ADDED if told is None else MODIFIED, told, obj)
        if rv:
            self.resource_version = rv

    async def _watch_once(self) -> None:
        timeout = int(self.watch_timeout_seconds * (1 + random.random() / 2))
        self.watches += 1
        async for event in self.client.watch(self.resource, self.namespace,
                                             resource_version=self.resource_version,
                                             label_selector=self.label_selector,
                                             timeout_seconds=timeout):
            self._apply(event)
            self.backoff.reset()

    async def run(self) -> None:
        """Run until cancelled: list, then watch; relist on Gone; back off on errors."""
        need_list = True
        while True:
            try:
                if need_list:
                    await self.relist()
                    need_list = False
                    self.backoff.reset()
                await self._watch_once()
            except asyncio.CancelledError:
                raise
            except Gone:
                log.info("informer %s: resourceVersion %s expired; relisting", self.name,
                         self.resource_version)
                need_list = True
            except Exception as exc:  # noqa: BLE001
                err = from_exception(exc)
                self.errors += 1
                self.last_error = err
                delay = self.backoff.next()
                log.warning("informer %s: %s; retrying in %.2fs", self.name, err, delay)
                await asyncio.sleep(delay)


class InformerSet:
    """A named group of informers run together; ``wait_synced`` is the decision barrier.

    ``informers``: the informers by store key, in the order they were added, read-only (a
    view: ``add`` and ``adopt`` are the only changes, so they keep the index by API group and
    kind that ``keys_for`` reads)."""

    def __init__(self) -> None:
        self._informers: dict[str, Informer] = {}
        self.informers: Mapping[str, Informer] = MappingProxyType(self._informers)
        # (API group, kind) of each informer's ``store.resource`` -> the keys, in added order.
        self._by_kind: dict[tuple[str, str], tuple[str, ...]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def add(self, key: str, informer: Informer) -> Informer:
        """Add ``informer`` under ``key`` (last in the order); a key added again has its
        informer replaced, in its place."""
        replaced = key in self._informers
        self._informers[key] = informer
        if replaced:  # rare (nothing in the app does it): rebuild the index
            self._by_kind = {}
            for k, inf in self._informers.items():
                self._index(k, inf)
        else:
            self._index(key, informer)
        return informer

    def _index(self, key: str, informer: Informer) -> None:
        res = informer.store.resource
        kind = (res.group, res.kind)
        self._by_kind[kind] = (*self._by_kind.get(kind, ()), key)

    def keys_for(self, group: str, kind: str) -> tuple[str, ...]:
        """The keys of the informers whose resource is ``group``'s ``kind`` (``""``: the
        core group), in the added order; ``()`` when none. Costs the size of the answer, not
        the number of informers (about 30: one per Kueue kind, job kind and side store)."""
        return self._by_kind.get((group, kind), ())

    def adopt(self, key: str, informer: Informer, task: asyncio.Task[None]) -> None:
        """Add an informer already running in ``task`` (started after ``start``, e.g. for a
        CRD installed later); ``stop`` stops it with the others."""
        self.add(key, informer)
        self._tasks.append(task)

    def __getitem__(self, key: str) -> Informer:
        return self.informers[key]

    def store(self, key: str) -> Store:
        return self.informers[key].store

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Wait until every informer has listed once (``asyncio.TimeoutError`` on timeout)."""
        await asyncio.wait_for(
            asyncio.gather(*(i.synced.wait() for i in self.informers.values())), timeout)

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The running informer tasks (one per informer, named ``informer-<key>``)."""
        return list(self._tasks)

    def start(self) -> None:
        for key, inf in self.informers.items():
            self._tasks.append(asyncio.create_task(inf.run(), name=f"informer-{key}"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
