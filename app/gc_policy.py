"""The cyclic garbage collector's thresholds for a long-running pykueue process.

``apply()`` sets ``gc.set_threshold(*THRESHOLDS)`` and returns the previous thresholds
(``(generation 0 allocations, generation 1 collections, generation 2 collections)``, counts).

Why: CPython's defaults (700, 10, 10) run a young collection every 700 container allocations.
Each collection walks the references of the young objects into the old ones, and every few
rounds a full collection walks every tracked object. pykueue holds every Workload, ClusterQueue
and their cached views for as long as they exist, so with a few tens of thousands of Workloads
those walks touch memory spread over the whole heap: they cost more per admission the more
ClusterQueues and Workloads there are, and they evict from the CPU cache what the next
scheduling cycle reads. A young generation of 50,000 allocations and older generations
collected twice as rarely keep that walk off the admission path; the extra memory is the
cyclic garbage of at most 50,000 allocations, kept until the next young collection (acyclic
garbage is freed at once by reference counting, whatever the thresholds).

Used by ``pykueue serve`` and ``pykueue simulate`` (and the benchmarks that drive the core), so
the simulator measures the core under the controller's collector settings. The objects listed
at start are also frozen out of the collector once the informers have synced
(``app.controllers.manager``).
"""

from __future__ import annotations

import gc

__all__ = ["THRESHOLDS", "apply"]

THRESHOLDS: tuple[int, int, int] = (50_000, 20, 10)


def apply() -> tuple[int, int, int]:
    """Set the collector's thresholds to ``THRESHOLDS``; return the previous ones."""
    previous = gc.get_threshold()
    gc.set_threshold(*THRESHOLDS)
    return previous
