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
- Parked Workloads return to the heap on ``unpark`` (the cluster calls it when capacity
  changes in the cohort: a Workload finishes, is deleted or evicted, a queue or flavor
  changes; which ones return is the scheduler's choice, app.core.scheduler).

Cost: ``push``/``remove``/``head``/``unpark`` are O(log n) amortised (lazy deletion).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from app.core.types import WorkloadKey
from app.core.workload import Workload

SortKey = tuple[int, float, str, str]


def sort_key(wl: Workload) -> SortKey:
    """Queue order key: (−priority, queue-order time, uid, key); smaller is earlier."""
    return (-wl.priority, wl.queue_order_time, wl.uid, wl.key)


class PendingQueue:
    """Heap of active pending Workloads and a parked (inadmissible) set for one ClusterQueue."""

    def __init__(self) -> None:
        self._heap: list[SortKey] = []
        self._active: dict[WorkloadKey, SortKey] = {}
        self._parked: dict[WorkloadKey, SortKey] = {}
        self.sticky: WorkloadKey | None = None

    def __len__(self) -> int:
        return len(self._active) + len(self._parked)

    def __contains__(self, key: object) -> bool:
        return key in self._active or key in self._parked

    @property
    def active_count(self) -> int:
        """Workloads in the heap (not parked)."""
        return len(self._active)

    def is_parked(self, key: WorkloadKey) -> bool:
        """True when ``key`` is parked as inadmissible."""
        return key in self._parked

    def push(self, wl: Workload) -> None:
        """Insert or re-order ``wl`` in the heap (un-parking it if parked)."""
        k = sort_key(wl)
        self._parked.pop(wl.key, None)
        if self._active.get(wl.key) == k:
            return
        self._active[wl.key] = k
        heapq.heappush(self._heap, k)
        self._maybe_compact()

    def park(self, wl: Workload) -> None:
        """Move ``wl`` to the inadmissible set (kept in queue order for the status view)."""
        key = wl.key
        sk = self._active.pop(key, None)
        self._parked[key] = sort_key(wl) if sk is None else sk
        if self.sticky == wl.key:
            self.sticky = None

    def remove(self, key: WorkloadKey) -> bool:
        """Drop ``key`` from the heap or the parked set; True if it was there."""
        if self.sticky == key:
            self.sticky = None
        found = self._active.pop(key, None) is not None
        found = self._parked.pop(key, None) is not None or found
        return found

    def head(self) -> WorkloadKey | None:
        """The Workload to evaluate next: the sticky preemptor if any, else the heap's top."""
        if self.sticky is not None and self.sticky in self._active:
            return self.sticky
        self.sticky = None
        heap = self._heap
        while heap:
            k = heap[0]
            if self._active.get(k[3]) == k:
                return k[3]
            heapq.heappop(heap)
        return None

    def unpark(self, key: WorkloadKey) -> bool:
        """Move one parked Workload back to the heap; False when ``key`` is not parked."""
        sk = self._parked.pop(key, None)
        if sk is None:
            return False
        self._active[key] = sk
        heapq.heappush(self._heap, sk)
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

    def ordered(self) -> list[tuple[WorkloadKey, bool]]:
        """All pending keys in queue order with ``parked`` flags (O(n log n), for status).
        The sticky preemptor comes first, as ``head`` evaluates it first: positions in the
        status API match the order the scheduler admits in."""
        items = [(k, False) for k in self._active.values()]
        items += [(k, True) for k in self._parked.values()]
        items.sort()
        out = [(k[3], parked) for k, parked in items]
        if self.sticky is not None and self.sticky in self._active:
            out.remove((self.sticky, False))
            out.insert(0, (self.sticky, False))
        return out

    def _maybe_compact(self) -> None:
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._active):
            self._heap = [k for k in self._heap if self._active.get(k[3]) == k]
            heapq.heapify(self._heap)
