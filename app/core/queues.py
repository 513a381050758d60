"""Pending Workloads of one ClusterQueue: an ordered heap plus a parked "inadmissible" set.

Rules (Kueue ``pkg/cache/queue``, reference 3.2 and 3.3):

- Order: higher priority first, then earlier queue-order timestamp (creation, or eviction
  time of a Workload evicted back to pending), then uid, then ``namespace/name``; a total
  order, so the same input always gives the same head.
- A head that issued preemptions stays the head ("sticky", either strategy) until it is
  admitted, parked or removed, so a later higher-priority arrival cannot take the capacity
  its victims free. BestEffortFIFO: a head that does not fit is *parked* as inadmissible
  and the next Workload becomes the head.
- StrictFIFO: a head that does not fit stays the head and blocks the queue; only a
  namespace mismatch parks it.
- Admission Fair Sharing (Kueue ``admissionScope: UsageBasedAdmissionFairSharing``,
  ``pkg/cache/queue/cluster_queue.go`` ``queueOrderingFunc``): the queue is given
  ``usage_of(local queue key) -> float`` and orders by (that LocalQueue's usage, the key
  above): lower usage first. All Workloads of one LocalQueue share its usage, so each
  LocalQueue keeps a heap of its own and the head is the best of the LocalQueues' heads
  (O(LocalQueues) per ``head``); usage can change between calls (every admission, every
  sample) without re-sorting anything. The sticky preemptor still comes first (Kueue puts
  the usage before it: see docs/fair-sharing.md).
- Parked Workloads return to the heap on ``unpark`` (the cluster calls it when capacity
  changes in the cohort: a Workload finishes, is deleted or evicted, a queue or flavor
  changes; which ones return is the scheduler's choice, app.core.scheduling_cycle).
- Parked changes (``watch_parked``): once asked, the queue records every key that entered
  or left the parked set (``park``, ``unpark``, ``push`` or ``remove`` of a parked key)
  until ``parked_changes`` hands the record over, so the scheduler can keep its grouping of
  the parked Workloads up to date in O(changes) instead of regrouping all of them.

- Order version (``version``): bumped by every change of the pending set or of its order
  (``push`` that moves or adds, ``park``, ``unpark``, ``remove``, a new sticky head, the
  fair-sharing switch). ``ordered`` keeps its last answer while the version stays and, under
  Admission Fair Sharing, the usages of the LocalQueues it saw are unchanged.

- Queued index (``bind``): a queue bound to a ``QueuedIndex`` under a name keeps that name in
  the index exactly while it has queued (active, not parked) Workloads, so the scheduling
  cycle visits only those ClusterQueues instead of every one (an idle ClusterQueue then
  costs nothing per cycle).

Cost: ``push``/``remove``/``head``/``unpark`` are O(log n) amortised (lazy deletion);
``ordered`` O(n log n) after a change, O(1) otherwise (O(LocalQueues) under fair sharing);
a bound queue's first queued Workload and its last leaving add O(log q) comparisons and
O(q) list moves (q: the queues in the index).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping

from app.core.types import WorkloadKey
from app.core.workload import Workload

SortKey = tuple[int, float, str, str]


def sort_key(wl: Workload) -> SortKey:
    """Queue order key: (−priority, queue-order time, uid, key); smaller is earlier."""
    return (-wl.priority, wl.queue_order_time, wl.uid, wl.key)


class QueuedIndex:
    """The names of the queues bound to it (``PendingQueue.bind``) that have queued (active,
    not parked) Workloads, in name order (the scheduling cycle's order of ClusterQueues).
    The queues keep it up to date; ``add`` and ``discard`` are idempotent."""

    __slots__ = ("_names",)

    def __init__(self) -> None:
        self._names: list[str] = []  # sorted, no duplicates

    def add(self, name: str) -> None:
        """Insert ``name`` unless present: O(log n) comparisons, O(n) moves."""
        names = self._names
        i = bisect_left(names, name)
        if i == len(names) or names[i] != name:
            names.insert(i, name)

    def discard(self, name: str) -> None:
        """Remove ``name`` if present."""
        names = self._names
        i = bisect_left(names, name)
        if i < len(names) and names[i] == name:
            del names[i]

    def names(self) -> list[str]:
        """The names in order, a copy (the queues may change while it is iterated)."""
        return list(self._names)

    def __contains__(self, name: str) -> bool:
        names = self._names
        i = bisect_left(names, name)
        return i < len(names) and names[i] == name

    def __len__(self) -> int:
        return len(self._names)


class PendingQueue:
    """Heap of active pending Workloads and a parked (inadmissible) set for one ClusterQueue."""

    __slots__ = ("_heap", "_active", "_parked", "_sticky", "version", "_ordered", "usage_of",
                 "_lq_of", "_lq_heaps", "_parked_log", "_index", "_name")

    def __init__(self) -> None:
        self._heap: list[SortKey] = []
        self._active: dict[WorkloadKey, SortKey] = {}
        self._parked: dict[WorkloadKey, SortKey] = {}
        self._sticky: WorkloadKey | None = None
        self.version = 0
        # ``ordered``'s last answer: (version, usage per LocalQueue it saw or None, answer).
        self._ordered: tuple[int, dict[str, float] | None,
                             tuple[tuple[WorkloadKey, bool], ...]] | None = None
        # Admission Fair Sharing (None: off): usage of a LocalQueue key, each pending
        # Workload's LocalQueue and one heap per LocalQueue (lazy deletion as ``_heap``).
        self.usage_of: Callable[[str], float] | None = None
        self._lq_of: dict[WorkloadKey, str] = {}
        self._lq_heaps: dict[str, list[SortKey]] = {}
        # Keys that entered or left ``_parked`` since ``parked_changes`` (None: not recorded).
        self._parked_log: set[WorkloadKey] | None = None
        # ``bind``: the index holding ``_name`` while ``_active`` is not empty (None: unbound).
        self._index: QueuedIndex | None = None
        self._name = ""

    def bind(self, index: QueuedIndex | None, name: str) -> None:
        """Keep ``name`` in ``index`` exactly while this queue has queued (not parked)
        Workloads, from now on; ``None`` unbinds (the name leaves the old index)."""
        if self._index is not None:
            self._index.discard(self._name)
        self._index, self._name = index, name
        if index is not None and self._active:
            index.add(name)

    @property
    def sticky(self) -> WorkloadKey | None:
        """The head that issued preemptions (kept first until admitted, parked or removed)."""
        return self._sticky

    @sticky.setter
    def sticky(self, key: WorkloadKey | None) -> None:
        if key != self._sticky:
            self._sticky = key
            self.version += 1

    def set_fair_sharing(self, usage_of: Callable[[str], float] | None,
                         lq_of: Mapping[WorkloadKey, str]) -> None:
        """Order by LocalQueue usage (``usage_of``), or not (None). ``lq_of``: the LocalQueue
        key of every Workload in the queue (active and parked)."""
        self.version += 1
        self.usage_of = usage_of
        self._lq_of, self._lq_heaps = {}, {}
        if usage_of is None:
            return
        self._lq_of = {k: lq_of[k] for k in (*self._active, *self._parked)}
        for k, sk in self._active.items():
            self._lq_heaps.setdefault(self._lq_of[k], []).append(sk)
        for h in self._lq_heaps.values():
            heapq.heapify(h)

    def _lq_push(self, sk: SortKey) -> None:
        heapq.heappush(self._lq_heaps.setdefault(self._lq_of[sk[3]], []), sk)

    def __len__(self) -> int:
        return len(self._active) + len(self._parked)

    def __contains__(self, key: object) -> bool:
        return key in self._active or key in self._parked

    @property
    def active_count(self) -> int:
        """Workloads in the heap (not parked)."""
        return len(self._active)

    @property
    def parked_count(self) -> int:
        """Workloads in the parked (inadmissible) set."""
        return len(self._parked)

    def watch_parked(self, on: bool = True) -> None:
        """Start (``on``) or stop recording the keys whose parked state changes; starting
        clears the record."""
        self._parked_log = set() if on else None

    def parked_changes(self) -> set[WorkloadKey]:
        """The keys that entered or left the parked set (or were parked again) since the
        last call or ``watch_parked()``, and a fresh record; empty when not watching."""
        log = self._parked_log
        if log is None:
            return set()
        self._parked_log = set()
        return log

    def is_parked(self, key: WorkloadKey) -> bool:
        """True when ``key`` is parked as inadmissible."""
        return key in self._parked

    def push(self, wl: Workload) -> None:
        """Insert or re-order ``wl`` in the heap (un-parking it if parked)."""
        k = sort_key(wl)
        if self._parked.pop(wl.key, None) is not None:
            self.version += 1
            if self._parked_log is not None:
                self._parked_log.add(wl.key)
        if self.usage_of is not None:
            lq = f"{wl.namespace}/{wl.queue_name}"
            if self._lq_of.get(wl.key) != lq:
                self._lq_of[wl.key] = lq
                self._active.pop(wl.key, None)  # its entry in the old LocalQueue's heap is stale
        if self._active.get(wl.key) == k:
            return
        self.version += 1
        self._active[wl.key] = k
        if len(self._active) == 1 and self._index is not None:
            # Idempotent: under Admission Fair Sharing a re-keyed Workload left and came back.
            self._index.add(self._name)
        heapq.heappush(self._heap, k)
        if self.usage_of is not None:
            self._lq_push(k)
        self._maybe_compact()

    def park(self, wl: Workload) -> None:
        """Move ``wl`` to the inadmissible set (kept in queue order for the status view)."""
        key = wl.key
        if self.usage_of is not None:
            self._lq_of.setdefault(key, f"{wl.namespace}/{wl.queue_name}")
        sk = self._active.pop(key, None)
        if sk is not None and not self._active and self._index is not None:
            self._index.discard(self._name)
        self._parked[key] = sort_key(wl) if sk is None else sk
        self.version += 1
        if self._parked_log is not None:
            self._parked_log.add(key)
        if self.sticky == wl.key:
            self.sticky = None

    def remove(self, key: WorkloadKey) -> bool:
        """Drop ``key`` from the heap or the parked set; True if it was there."""
        if self.sticky == key:
            self.sticky = None
        found = self._active.pop(key, None) is not None
        if found and not self._active and self._index is not None:
            self._index.discard(self._name)
        if self._parked.pop(key, None) is not None:
            found = True
            if self._parked_log is not None:
                self._parked_log.add(key)
        if self.usage_of is not None:
            self._lq_of.pop(key, None)
        if found:
            self.version += 1
        return found

    def head(self) -> WorkloadKey | None:
        """The Workload to evaluate next: the sticky preemptor if any, else the heap's top."""
        if self.sticky is not None and self.sticky in self._active:
            return self.sticky
        self.sticky = None
        if self.usage_of is not None:
            return self._fair_head(self.usage_of)
        heap = self._heap
        while heap:
            k = heap[0]
            if self._active.get(k[3]) == k:
                return k[3]
            heapq.heappop(heap)
        return None

    def _fair_head(self, usage_of: Callable[[str], float]) -> WorkloadKey | None:
        """The head under Admission Fair Sharing: min over LocalQueues of (usage, its head's
        key)."""
        best: tuple[float, SortKey] | None = None
        active, lq_of = self._active, self._lq_of
        for lq in list(self._lq_heaps):
            heap = self._lq_heaps[lq]
            while heap and (active.get(heap[0][3]) != heap[0] or lq_of.get(heap[0][3]) != lq):
                heapq.heappop(heap)
            if not heap:
                del self._lq_heaps[lq]
                continue
            cand = (usage_of(lq), heap[0])
            if best is None or cand < best:
                best = cand
        return None if best is None else best[1][3]

    def unpark(self, key: WorkloadKey) -> bool:
        """Move one parked Workload back to the heap; False when ``key`` is not parked."""
        sk = self._parked.pop(key, None)
        if sk is None:
            return False
        if self._parked_log is not None:
            self._parked_log.add(key)
        self.version += 1
        self._active[key] = sk
        if len(self._active) == 1 and self._index is not None:
            self._index.add(self._name)
        heapq.heappush(self._heap, sk)
        if self.usage_of is not None:
            self._lq_push(sk)
        self._maybe_compact()
        return True

    def parked_order(self, key: WorkloadKey) -> SortKey | None:
        """Queue-order key of a parked Workload (None when not parked)."""
        return self._parked.get(key)

    def parked(self) -> Iterator[WorkloadKey]:
        """Parked keys (insertion order)."""
        return iter(list(self._parked))

    def active(self) -> Iterator[WorkloadKey]:
        """Keys in the heap (unordered)."""
        return iter(list(self._active))

    def active_keys(self) -> Iterable[WorkloadKey]:
        """Keys in the heap (unordered), a live view without a copy: the queue must not
        change while it is iterated."""
        return self._active.keys()

    def ordered(self) -> tuple[tuple[WorkloadKey, bool], ...]:
        """All pending keys in queue order with ``parked`` flags (for status and the
        visibility API). The sticky preemptor comes first, as ``head`` evaluates it first:
        positions match the order the scheduler admits in. The same tuple as the last call
        while nothing changed (see the module doc): O(n log n) after a change, else O(1)."""
        usage_of = self.usage_of
        cached = self._ordered
        if cached is not None and cached[0] == self.version:
            seen = cached[1]
            if usage_of is None or (seen is not None
                                    and all(usage_of(lq) == u for lq, u in seen.items())):
                return cached[2]
        items = [(k, False) for k in self._active.values()]
        items += [(k, True) for k in self._parked.values()]
        usage: dict[str, float] | None = None
        if usage_of is None:
            items.sort()
        else:
            usage = {lq: usage_of(lq) for lq in set(self._lq_of.values())}
            items.sort(key=lambda it: (usage[self._lq_of[it[0][3]]], it))
        out = [(k[3], parked) for k, parked in items]
        if self.sticky is not None and self.sticky in self._active:
            out.remove((self.sticky, False))
            out.insert(0, (self.sticky, False))
        answer = tuple(out)
        self._ordered = (self.version, usage, answer)
        return answer

    def _maybe_compact(self) -> None:
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._active):
            self._heap = [k for k in self._heap if self._active.get(k[3]) == k]
            heapq.heapify(self._heap)
            if self.usage_of is not None:
                self.set_fair_sharing(self.usage_of, self._lq_of)
