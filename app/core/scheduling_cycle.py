"""The scheduling cycle of the admission core: ``Scheduler`` = ``QuotaState``
(``app.core.quota_state``: objects, quota usage, pending queues) + ``schedule(now)``.

Pure: plain dataclasses in (``app.core.spec``, ``app.core.workload``), decisions out
(``app.core.decisions``), time passed in (seconds since the epoch), no I/O, no clock.
Quantities are the core's integer units (``app.core.quantity``: milli for CPU-like
resources, bytes, counts). Nothing here raises on a bad object: a ClusterQueue the core
cannot use is inactive with a reason, a Workload that cannot fit is Pending with a reason
and message.

Feeding it (the reconciler mirrors API objects; the simulator builds them)::

    c = Scheduler()
    c.add_flavor(ResourceFlavor(FlavorName("a100"), node_labels={"pool": "a100"}))
    c.add_cluster_queue(ClusterQueueSpec(
        ClusterQueueName("team-a"), cohort=CohortName("ai"),
        namespace_selector=LabelSelector(),                    # {} = all namespaces
        resource_groups=(ResourceGroup((ResourceName("nvidia.com/gpu"),), (
            FlavorQuotas(FlavorName("a100"), (ResourceQuota(ResourceName("nvidia.com/gpu"), 4),)),
        )),),
    ))
    c.add_local_queue(LocalQueue("ns", "team-a", ClusterQueueName("team-a")))
    c.set_namespace("ns", {"team": "a"})
    c.add_workload(workload)            # pending (no admission) or admitted (restart rebuild)

One cycle::

    for d in c.schedule(now=time.time()):
        match d:
            case Admit():    write d.admission; on failure c.forget(d.workload)
            case Preempt():  evict each d.victims[i] (reason d.victims[i].reason);
                             on failure c.cancel_eviction(victim)
            case Pending():  set QuotaReserved=False, d.reason.condition_reason, d.message

Then report what happens in the API: ``update_workload(wl)`` (with admission: confirms an
assumption; without: eviction finished), ``finish(key)``, ``delete_workload(key)``,
``finish_eviction(key)``; and config changes (``add/update/delete`` of flavors,
ClusterQueues, LocalQueues, ``set_namespace``). When ``schedule`` returns ``[]`` nothing will
change until one of those calls or ``next_wakeup()``: wait for the next event.

Status: ``cluster_queue_status(name)`` (usage / borrowed / lent / available per
flavor-resource, Active reason), ``pending_workloads(name)`` (queue order, position,
inadmissible, last reason), ``workload(key)``, ``local_queue_status(key)``.

The cycle (Kueue v0.17.1 ``Scheduler.schedule``, ``pkg/scheduler/scheduler.go``; reference
3.4):

1. Requeue: parked (inadmissible) Workloads of ClusterQueues whose cohort changed return to
   their queues (Kueue ``QueueInadmissibleWorkloads``), with ``requeue_batch_s`` > 0 in
   Kueue's batches: the first change of a ClusterQueue's cohort after its last requeue is
   stamped with the next cycle's ``now`` and its parked Workloads return at the first cycle
   at or after ``now + requeue_batch_s``; changes in between join that batch (Kueue v0.17.1
   ``requeueBatchPeriod``, 1 s: ``REQUEUE_BATCH_S``; ``next_wakeup`` names the time). The
   core's own timers (``next_wakeup``: backoffs, minimum runtimes) requeue at once, and so
   does a ClusterQueue active again what it parked while inactive. Under
   BestEffortFIFO, parked
   Workloads with the same nomination key (step 3: same priority and shape, and queue-order
   time under LowerOrNewerEqualPriority) get the same verdict at a given cohort version, so
   only the first of each class in queue order (its representative) returns; the others stay
   parked until the representative leaves the queue (admitted, deleted, moved). A
   representative parked again keeps its class parked until the next change. pykueue's
   rule, not Kueue's (Kueue re-evaluates every parked Workload, one head per ClusterQueue
   per cycle): the admissions and preemptions are the same, except that the queues of a
   cohort may interleave differently within one instant (test
   ``test_parked_class_mates_do_not_hold_their_queue_back_in_the_cohort``). Classes are
   kept across requeues (``_ParkedClasses``) for a selector that selects every namespace:
   a requeue costs O(changes x log(class size) + classes); the outcome is the full
   regrouping's (test ``test_requeue_classes_properties``).
2. Heads: one per ClusterQueue with queued Workloads, in name order; only those are visited
   (``QuotaState._queued``, kept by the pending queues), so an idle ClusterQueue costs
   nothing. An inactive ClusterQueue parks all its Workloads with its reason; a head whose
   namespace does not match the selector is parked (even under StrictFIFO).
3. Nominate: flavor assignment for each head against usage at cycle start (Kueue
   ``getAssignments``, ``pkg/scheduler/flavorassigner``), memoized per ClusterQueue and
   head shape (per pod set: name, count, requests, nodeSelector, affinity, tolerations),
   priority (and queue-order time under LowerOrNewerEqualPriority) while the cohort's
   version (``QuotaState._version``) is unchanged and, in a ClusterQueue using Admission
   Fair Sharing, no sample changed its LocalQueues' usage (which orders its own
   preemption candidates: the victims, and so the borrowing level and flavor). A head
   that needs preemption gets its fewest victims here too (Kueue ``GetTargets``,
   ``pkg/scheduler/preemption``); when its assignment needs what its nomination's
   preemption oracle searched in this cycle (same flavor-resource and amount), that search
   is its victims (nothing changed in between; ``_cycle_searches``), else it is searched
   again.
4. Order: not borrowing before borrowing, then higher priority, then earlier queue-order
   time, uid, key (Kueue ``entryOrdering``); under fair sharing a tournament by dominant
   resource share in each cohort tree (``_fair_next``; Kueue's fair sharing iterator,
   reference 3.8).
5. Process in order against the live usage (earlier admissions of this cycle count):
   Fit => re-check it still fits, assume, Admit; then, pykueue's rule (not Kueue's), a
   ClusterQueue below its nominal quota with Workloads still queued keeps part of that
   unused nominal quota from the rest of the cycle (``_keep_nominal_for_queue``,
   ``KEEP_PEAK_WINDOW_S``); Preempt/Reclaim => its targets from step 3, skipped (retried
   next cycle, no new victims) when they overlap another preemptor's of this cycle or no
   longer make room once this cycle's earlier admissions and preemptors are counted (Kueue
   ``fits``); else mark new ones evicting, Preempt, and hold the preemptor's whole usage
   for the rest of the cycle; NoCandidates => Pending, and unless reclaimWithinCohort is
   Any the ClusterQueue holds its unused nominal headroom for the rest of the cycle
   (acceptance KQ-09); NoFit => Pending. A head that does not fit stays the head under
   StrictFIFO and is parked under BestEffortFIFO. A preemptor stays the head (sticky)
   until admitted.

No preempt/re-admit loop: victims stay counted until their eviction finishes; a victim
re-queued after eviction is ordered by its eviction time; a preemptor waiting for victims
already being evicted issues no new preemption (acceptance KQ-18, KQ-29).

pykueue's ClusterQueue annotations ``MIN_RUNTIME_ANNOTATION`` and
``RECLAIM_BACKOFF_ANNOTATION`` bound preemption (an opt-in departure from Kueue, read by
``app.wire.queues``).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeAlias

from app.core.decisions import Admit, Decision, PendingReason, Preempt, PreemptionReason, Victim
from app.core.flavors import Assignment, Mode, assign_flavors, shortfall
from app.core.preemption import (
    Candidate,
    OrderedCandidates,
    Preemptor,
    Targets,
    candidate_order,
    find_fair_targets,
    find_targets,
)
from app.core.queues import PendingQueue, SortKey
from app.core.quota import Share
from app.core.quota_state import PENDING, QuotaState, _Record
from app.core.spec import (
    AdmissionFairSharing,
    BorrowWithinCohort,
    ClusterQueueSpec,
    FairSharing,
    QueueingStrategy,
    ReclaimWithinCohort,
    WithinClusterQueue,
)
from app.core.types import ClusterQueueName, FlavorResource, WorkloadKey
from app.core.workload import Workload

__all__ = ["Scheduler", "MIN_RUNTIME_ANNOTATION", "RECLAIM_BACKOFF_ANNOTATION"]

# pykueue's ClusterQueue annotations for bounded preemption (named in Pending messages; read
# by app/wire/queues.py).
MIN_RUNTIME_ANNOTATION = "pykueue.dev/min-runtime-before-preemption"
RECLAIM_BACKOFF_ANNOTATION = "pykueue.dev/reclaim-backoff"


def _duration(seconds: float) -> str:
    """``4m12s`` / ``1h0m5s`` / ``9s``: whole seconds, rounded up."""
    s = max(0, math.ceil(seconds - 1e-9))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    return f"{m}m{sec}s" if m else f"{sec}s"

REQUEUE_BATCH_S = 1.0
"""Kueue v0.17.1's batch period for returning parked (inadmissible) Workloads after a change in
their cohort (``requeueBatchPeriod``, ``pkg/cache/queue/inadmissible_workloads.go``; seconds):
``Settings.scheduling.requeue_batch_seconds`` = 1 gives Kueue's timing. pykueue's default
(the core's, the setting's and the simulator's) is 0: at the next cycle."""

KEEP_PEAK_WINDOW_S = 5.0
"""How long a ClusterQueue's usage peak, and its queued requests beyond it, justify keeping its
unused nominal quota from borrowers while it admits (``Scheduler._keep_nominal_for_queue``;
seconds). A few seconds: above the arrival period of the classes of Kueue's performance
baseline (largest 1.2 s) with a loaded controller's cycle delays; and the longest a borrower
waits for room its lender does not use."""

KEEP_MAX_HOLD_S = 2 * KEEP_PEAK_WINDOW_S
"""The longest a ClusterQueue waits, once room kept by ``_keep_nominal_for_queue`` refused
its head, before a lender of its cohort stops keeping room its borrowing head would fit in
(seconds): from then on that head is lent the room as under Kueue v0.17.1 (which would
reclaim it at the lender's next peak). A lender whose usage reaches its nominal once every
window keeps its unused room in every cycle it admits; with this bound no borrower, nor a
stream of them, waits behind it longer."""

KEEP_FORGET_S = 3 * KEEP_MAX_HOLD_S
"""A ClusterQueue's wait for kept room is forgotten once kept room has neither refused its
head nor been given up for it for this long (seconds): long enough for a lender that runs
at its nominal for several seconds between the cycles it keeps room in (brk37b K2)."""


def _window_max_add(
    window: deque[tuple[float, int]], now: float, value: int, width: float
) -> None:
    """Add sample ``value`` at ``now`` to ``window`` (times increasing, values decreasing) and
    drop samples older than ``width`` seconds, so that ``window[0][1]`` is the highest value
    of the last ``width`` seconds (sliding-window maximum; amortized O(1))."""
    while window and window[-1][1] <= value:
        window.pop()
    window.append((now, value))
    while window[0][0] < now - width:
        window.popleft()


_REASON_TEXT = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
    "InCohortFairSharing": "fair sharing within the cohort",
}


@dataclass(slots=True)
class _Entry:
    rec: _Record
    spec: ClusterQueueSpec
    assignment: Assignment
    # Preemption targets chosen at nomination, against the cycle's starting usage (Kueue
    # ``getAssignments``): None when the assignment needs none or none were found.
    targets: Targets | None = None

    def order(self) -> tuple[object, ...]:
        wl = self.rec.wl
        return (self.assignment.borrow, -wl.priority, wl.queue_order_time, wl.uid, wl.key)


_NominationKey: TypeAlias = tuple[int, float | None, tuple[object, ...]]
"""(priority, queue-order time or None when the policy ignores it, shape)."""


@dataclass(slots=True)
class _ParkedClasses:
    """The parked Workloads of one BestEffortFIFO ClusterQueue grouped by nomination class
    (step 1), kept from one requeue to the next.

    Invariant, true right after each requeue's sync (``Scheduler._sync_classes``) when
    ``queue`` and ``context`` still hold: ``classes[c]`` lists the queue-order keys
    (``PendingQueue`` sort keys, ascending) of exactly the parked Workloads of class ``c``,
    and ``of[k]`` is the (class, sort key) under which parked ``k`` was filed. Between
    requeues the lists are the followers lists (``Scheduler._followers``), which
    ``_release_followers`` consumes from the front; every key whose parked state changes in
    the meantime is in the queue's ``parked_changes``, so the next sync re-files only those
    keys (a key's class can change only through ``push``: a new Workload version or
    LocalQueue). No class is ever re-sorted: a re-filed key is inserted in order
    (``insort``), and only a full regrouping (a new ``queue`` or ``context``) sorts.
    ``context`` = (withinClusterQueue policy, Admission Fair Sharing on): what the class
    of every key depends on besides the Workload; when it changes the grouping is redone
    from scratch.
    """

    queue: PendingQueue
    context: tuple[object, ...]
    classes: dict[object, list[SortKey]]
    of: dict[WorkloadKey, tuple[object, SortKey]]


@dataclass(frozen=True, slots=True)
class _CohortPart:
    """A cohort tree's candidates for every head but their own ClusterQueue's, in candidate
    order: being evicted, then not; ``cluster_queues``: the ClusterQueues they are in."""

    evicting: list[Candidate]
    running: list[Candidate]
    cluster_queues: tuple[ClusterQueueName, ...]


class Scheduler(QuotaState):
    """The admission core: ``QuotaState`` plus ``schedule(now)``. See the module docstring."""

    def __init__(self, fair_sharing: FairSharing | None = None,
                 admission_fair_sharing: AdmissionFairSharing | None = None, *,
                 requeue_batch_s: float = 0.0,
                 order_evicted_by_eviction_time: bool = True,
                 keep_nominal_for_queue: bool = True) -> None:
        # admission_fair_sharing: Kueue Configuration admissionFairSharing (None: off), used
        # by ClusterQueues whose admissionScope asks for it (app.core.quota_state).
        super().__init__(admission_fair_sharing)
        self.order_evicted_by_eviction_time = order_evicted_by_eviction_time
        # ``_keep_nominal_for_queue`` (pykueue's, the default); False: Kueue v0.17.1's
        # lend-then-reclaim (Settings.scheduling.keep_nominal_for_queue).
        self.keep_nominal_for_queue = keep_nominal_for_queue
        # Step 1's batch (seconds; 0: parked Workloads return at the next cycle). Per
        # ClusterQueue whose cohort changed since its last requeue: when its batch is due,
        # and the earliest of those times.
        self.requeue_batch_s = requeue_batch_s
        self._requeue_due: dict[ClusterQueueName, float] = {}
        self._requeue_next: float | None = None
        # ClusterQueues that parked their Workloads because they were inactive: when they are
        # active again those return at the next cycle, not in a batch (Kueue keeps an inactive
        # queue's Workloads in its heap, skipped until it is active again; a StrictFIFO queue
        # would otherwise admit a newer arrival before them).
        self._parked_inactive: set[ClusterQueueName] = set()
        # Kueue Configuration fairSharing: None = classical ordering and preemption.
        self.fair_sharing = fair_sharing
        # Bounded preemption (pykueue annotations, see ``ClusterQueueSpec``): the time of the
        # cycle being run, when the next protection or backoff expires (every ClusterQueue
        # is then requeued and every memo dropped), and per ClusterQueue the end of its
        # reclaim backoff.
        self._now = 0.0
        self._wake_at: float | None = None
        self._no_borrow_until: dict[ClusterQueueName, float] = {}
        # Per BestEffortFIFO ClusterQueue: representative -> the queue-order keys of its
        # parked class-mates, earliest first (see step 1 of the module docstring); and the
        # parked Workloads grouped by class across requeues (``_ParkedClasses``).
        self._followers: dict[ClusterQueueName, dict[WorkloadKey, list[SortKey]]] = {}
        self._parked_classes: dict[ClusterQueueName, _ParkedClasses] = {}
        # Per ClusterQueue: (version it was computed at, plus under Admission Fair Sharing
        # its count of samples, {nomination key: assignment}).
        self._nominations: dict[
            ClusterQueueName, tuple[tuple[int, ...], dict[_NominationKey, Assignment]]
        ] = {}
        self._nomination_hits = 0
        self._nomination_misses = 0
        # The victim searches of this cycle's nominations (their preemption oracle) that found
        # victims, by (preemptor, ClusterQueue, need, request, cohort searched): the state
        # does not change between nomination and ``_entry_targets``, so a head whose
        # assignment needs exactly what its oracle searched reuses that search. Emptied
        # every cycle.
        self._cycle_searches: dict[tuple[object, ...], Targets] = {}
        self.search_reuses = 0
        # Per cohort tree root: (version, {priority bound: its borrowing ClusterQueues'
        # candidates}) (``_candidates``).
        self._cohort_candidates: dict[
            ClusterQueueName, tuple[tuple[int, int], dict[int | None, _CohortPart]]
        ] = {}
        # ``_keep_nominal_for_queue``: per ClusterQueue and flavor-resource, its usage after
        # each admission in the last KEEP_PEAK_WINDOW_S seconds as a window maximum (times and
        # values, values decreasing); and since when it has, in every cycle it admitted, kept
        # room for its queue beyond that recent usage.
        self._usage_peaks: dict[
            ClusterQueueName, dict[FlavorResource, deque[tuple[float, int]]]
        ] = {}
        self._keep_over_since: dict[ClusterQueueName, float] = {}
        # Since when a ClusterQueue has waited, once room ``_keep_nominal_for_queue`` kept
        # refused its head, and when kept room last refused it or was given up for it
        # (forgotten KEEP_FORGET_S after that); what this cycle keeps, per cohort root and
        # flavor-resource; and this cycle's heads by ClusterQueue.
        self._held_back_since: dict[ClusterQueueName, tuple[float, float]] = {}
        self._kept_now: dict[ClusterQueueName, dict[FlavorResource, int]] = {}
        self._cycle_heads: dict[ClusterQueueName, _Entry] = {}

    def fork(self, names: Iterable[ClusterQueueName]) -> QuotaState:
        """``QuotaState.fork`` plus the fair sharing configuration and what
        ``_keep_nominal_for_queue`` remembers of ``names`` (recent usage peaks, since when
        room was kept for the queue), so a projection from the fork (``app.core.eta``)
        orders, keeps and lends as this state would."""
        names = tuple(names)
        out = super().fork(names)
        if isinstance(out, Scheduler):
            # The same ordering and preemption: a fork built by ``type(self)()`` alone
            # would order classically under fair sharing, and the ETA project other starts.
            out.fair_sharing = self.fair_sharing
            # Parked Workloads stay parked in the fork (``QuotaState.fork``): the timer
            # that requeues them when a backoff or minimum runtime ends comes along.
            out._wake_at = self._wake_at
            # Parked Workloads waiting for their requeue batch return when it is due there too.
            out.requeue_batch_s = self.requeue_batch_s
            out.keep_nominal_for_queue = self.keep_nominal_for_queue
            for n in names:
                if n in self._requeue_due:
                    out._requeue_due[n] = self._requeue_due[n]
            out._requeue_next = min(out._requeue_due.values(), default=None)
            for n in names:
                if n in self._usage_peaks:
                    out._usage_peaks[n] = {fr: deque(w) for fr, w in self._usage_peaks[n].items()}
                if n in self._keep_over_since:
                    out._keep_over_since[n] = self._keep_over_since[n]
                if n in self._held_back_since:
                    out._held_back_since[n] = self._held_back_since[n]
                # A lender whose reclaim backoff runs does not lend in the projection either.
                if n in self._no_borrow_until:
                    out._no_borrow_until[n] = self._no_borrow_until[n]
        return out

    def delete_cluster_queue(self, name: ClusterQueueName) -> bool:
        """``QuotaState.delete_cluster_queue`` plus forgetting the scheduler's per-queue
        memory of ``name`` (usage peaks, kept-room run, reclaim backoff, memoized
        nominations, parked class-mates): a ClusterQueue created again under the name starts
        afresh, and deleted queues hold no memory."""
        if not super().delete_cluster_queue(name):
            return False
        for memo in (self._usage_peaks, self._keep_over_since, self._held_back_since,
                     self._no_borrow_until,
                     self._nominations, self._followers, self._parked_classes,
                     self._requeue_due):
            memo.pop(name, None)
        self._parked_inactive.discard(name)
        return True

    def schedule(self, now: float) -> list[Decision]:
        """Run one scheduling cycle at time ``now`` (seconds) and return its decisions.

        Admit decisions are already assumed and victims already marked as being evicted.
        Pending decisions are returned when a Workload's reason or message changed or it was
        parked as inadmissible in this cycle; so ``[]`` means a fixed point: nothing changes
        until the next event.
        """
        out: list[Decision] = []
        self._now = now
        if self._afs_cqs:
            self._afs_sample(now)
        if self.requeue_batch_s > 0.0 and (self._requeue or self._requeue_due):
            self._batch_requeues(now)
        if self._wake_at is not None and now >= self._wake_at:
            self._wake_at = None
            self._no_borrow_until = {k: v for k, v in self._no_borrow_until.items() if v > now}
            for until in self._no_borrow_until.values():
                self._wake(until)
            self._bump_all()
            self._requeue.update(dict.fromkeys(self._cqs))
            self._requeue_due.clear()  # every queue returns now: their batches with it
            self._requeue_next = None
            self._parked_inactive = {n for n in self._parked_inactive if not self._cqs[n].active}
        self._apply_requeues()
        if self._followers:
            self._release_followers()
        for key in list(self._orphan_news):
            rec = self._wls[key]
            reason, message = self._orphan_reason(rec)
            d = self._set_pending(rec, reason, message, inadmissible=True)
            if d is not None:
                out.append(d)
        self._orphan_news.clear()

        entries: list[_Entry] = []
        self._cycle_searches.clear()  # searches of an earlier cycle's state never count
        cqs = self._cqs
        # The ClusterQueues with queued Workloads, in name order: the same visits, in the
        # same order, as every ClusterQueue's in name order skipping those with none queued.
        for name in self._queued.names():
            cq = cqs[name]
            if not cq.queue.active_count:
                continue
            if cq.problem is not None:
                if self.requeue_batch_s > 0.0:
                    self._parked_inactive.add(name)
                for key in sorted(cq.queue.active()):
                    rec = self._wls[key]
                    cq.queue.park(rec.wl)
                    d = self._set_pending(
                        rec,
                        PendingReason.CLUSTER_QUEUE_INACTIVE,
                        cq.problem.message,
                        inadmissible=True,
                    )
                    if d is not None:
                        out.append(d)
                continue
            key = cq.queue.head()
            if key is None:
                continue
            rec = self._wls[key]
            if not self.namespace_matches(cq.spec, rec.wl.namespace):
                cq.queue.park(rec.wl)
                d = self._set_pending(
                    rec,
                    PendingReason.NAMESPACE_MISMATCH,
                    f"namespace {rec.wl.namespace} doesn't match the namespaceSelector of "
                    f"ClusterQueue {name}",
                    inadmissible=True,
                )
                if d is not None:
                    out.append(d)
                continue
            if rec.wl.invalid_resources:
                # Kueue's nominate: inadmissible before any quota is looked at; parked
                # under BestEffortFIFO, the head that blocks its queue under StrictFIFO.
                park = cq.spec.queueing_strategy != QueueingStrategy.STRICT_FIFO
                if park:
                    cq.queue.park(rec.wl)
                d = self._set_pending(rec, PendingReason.INVALID_RESOURCES,
                                      rec.wl.invalid_resources, inadmissible=park)
                if d is not None:
                    out.append(d)
                continue
            entries.append(_Entry(rec, cq.spec, self._nominate(rec, cq.spec)))
        for e in entries:
            if e.assignment.mode in (Mode.PREEMPT, Mode.RECLAIM):
                e.targets = self._entry_targets(e)
        self._cycle_searches.clear()

        taken: dict[WorkloadKey, Candidate] = {}
        held: list[tuple[ClusterQueueName, dict[FlavorResource, int]]] = []
        self._kept_now.clear()
        if self._held_back_since:
            self._forget_held_back(now)
        self._cycle_heads = {e.spec.name: e for e in entries} if self._held_back_since else {}
        try:
            if self.fair_sharing is None:
                entries.sort(key=_Entry.order)
                for e in entries:
                    out.extend(self._process(e, now, taken, held))
            else:
                while entries:
                    e = self._fair_next(entries)
                    entries.remove(e)
                    out.extend(self._process(e, now, taken, held))
        finally:
            for name, usage in held:
                self.tree.remove_usage(name, usage)
        return out

    # ---- bounded preemption ------------------------------------------------------------------
    def next_wakeup(self) -> float | None:
        """When a minimum runtime or a reclaim backoff that held a decision back expires, an
        Admission Fair Sharing sample is due, or a requeue batch is (step 1; seconds), or
        None: a driver that only runs cycles on events must run one then."""
        afs = self._afs_wakeup() if self._afs_cqs else None
        times = [t for t in (self._wake_at, afs, self._requeue_next) if t is not None]
        return min(times) if times else None

    def _wake(self, at: float) -> None:
        if self._wake_at is None or at < self._wake_at:
            self._wake_at = at

    def _protected_until(self, cq: ClusterQueueName, reserved_at: float) -> float | None:
        """When a Workload of ``cq`` admitted at ``reserved_at`` may be preempted by reclaim
        or fair sharing, if that is after the current cycle (else None)."""
        mr = self._cqs[cq].spec.min_runtime_s if cq in self._cqs else None
        if mr is None or reserved_at + mr <= self._now:
            return None
        return reserved_at + mr

    def _protection_hint(self, e: _Entry) -> str:
        """``"; preemption possible in 4m12s (...)"`` when victims exist but a minimum runtime
        protects them, else ""."""
        a, spec = e.assignment, e.spec
        if not self._min_runtime_cqs or spec.preemption.reclaim_within_cohort \
                == ReclaimWithinCohort.NEVER:
            return ""
        p = self._preemptor(e.rec, spec)
        need = tuple(fr for fr, v in a.usage.items() if v > self.tree.available(spec.name, fr))
        if not need:
            return ""
        t = self._find_targets(p, spec, self._candidates(p, spec, protect=False), need,
                               dict(a.usage))
        if t is None:
            return ""
        until = [u for x in t.targets
                 if (u := self._protected_until(x.candidate.cluster_queue,
                                                x.candidate.reserved_at)) is not None]
        if not until:
            return ""
        when = max(until)
        self._wake(when)
        return (f"; preemption possible in {_duration(when - self._now)} (its victims are "
                f"within their ClusterQueue's {MIN_RUNTIME_ANNOTATION})")

    # ---- fair sharing order ------------------------------------------------------------------
    def _fair_next(self, entries: list[_Entry]) -> _Entry:
        """The next head under fair sharing (Kueue's fair sharing iterator, reference 3.8):
        in each cohort tree a tournament from the leaves up, where at each cohort the child
        entries compare by not borrowing, then the lower share of the child node with the
        entry's usage added, then priority and time (Kueue's ``entryComparer``, which has no
        term for a preemptor; with ``FairSharing.sticky_preemptor_first``, pykueue's opt-in,
        a preemptor that issued preemptions comes first); across trees (and queues without a
        cohort) the classical order. Shares are measured against the live usage, so each
        admission of the cycle moves the next pick."""
        tree = self.tree
        sticky = self.fair_sharing is not None and self.fair_sharing.sticky_preemptor_first
        paths: dict[int, list[str]] = {}
        shares: dict[int, dict[str, Share]] = {}
        roots: dict[str | None, list[_Entry]] = {}
        for e in entries:
            ps = tree.path_shares(e.spec.name, e.assignment.usage)
            paths[id(e)] = [n for n, _ in reversed(ps)]  # from below the root down to the CQ
            shares[id(e)] = dict(ps)
            roots.setdefault(tree.root_of(e.spec.name), []).append(e)

        def pick(group: list[_Entry], depth: int) -> _Entry:
            children: dict[str, list[_Entry]] = {}
            for e in group:
                children.setdefault(paths[id(e)][depth], []).append(e)
            winners = []
            for node, members in children.items():
                w = members[0] if len(members) == 1 else pick(members, depth + 1)
                winners.append((node, w))

            def key(nw: tuple[str, _Entry]) -> tuple[object, ...]:
                node, w = nw
                wl = w.rec.wl
                # sticky_preemptor_first (pykueue's opt-in): a preemptor whose victims are
                # gone takes the capacity they freed first; with Kueue's order a queue with a
                # lower share may take it and the preemptor preempt again.
                return (sticky and self._cqs[w.spec.name].queue.sticky != wl.key,
                        w.assignment.borrow > 0, shares[id(w)][node], -wl.priority,
                        wl.queue_order_time, wl.uid, wl.key)

            return min(winners, key=key)[1]

        best = [min(g, key=_Entry.order) if root is None else pick(g, 0)
                for root, g in roots.items()]
        return min(best, key=_Entry.order)

    # ---- requeue -----------------------------------------------------------------------------
    def _batch_requeues(self, now: float) -> None:
        """Step 1's batch: the ClusterQueues marked since the last cycle wait until ``now +
        requeue_batch_s`` unless already waiting (Kueue's delaying queue keeps the earliest
        time of an item added again); those due by ``now`` are left marked for
        ``_apply_requeues``, the rest are not. A ClusterQueue active again after parking
        its Workloads as inactive returns them at once (``_parked_inactive``)."""
        due = self._requeue_due
        at_once: list[ClusterQueueName] = []
        if self._requeue:
            at = now + self.requeue_batch_s
            added = False
            for name in self._requeue:
                cq = self._cqs.get(name)
                if name in self._parked_inactive and cq is not None and cq.active:
                    self._parked_inactive.discard(name)
                    at_once.append(name)
                elif name not in due:
                    due[name] = at
                    added = True
            if added and (self._requeue_next is None or at < self._requeue_next):
                self._requeue_next = at
        ready: list[ClusterQueueName] = []
        if self._requeue_next is not None and self._requeue_next <= now:
            ready = [n for n, t in due.items() if t <= now]
            for n in ready:
                del due[n]
            self._requeue_next = min(due.values(), default=None)
        self._requeue = dict.fromkeys([*at_once, *ready])

    def _apply_requeues(self) -> None:
        """Step 1: parked Workloads of marked ClusterQueues return to their heaps; under
        BestEffortFIFO one representative per nomination class (see the module docstring).

        Which keys are grouped: the parked Workloads whose namespace the selector matches
        (the others stay parked), by ``_class_of``. StrictFIFO, or fewer than two such
        keys: all of them return and the followers of the previous grouping are kept as
        they are (their members are no longer parked; ``_release_followers`` skips them
        unless parked again). Under a selector that selects every namespace (the usual
        ClusterQueue) the grouping is kept across requeues (``_ParkedClasses``) and synced
        with the queue's parked changes; else it is redone from scratch."""
        marked, self._requeue = self._requeue, {}
        for name in marked:
            cq = self._cqs.get(name)
            if cq is None or not cq.active:
                continue
            spec, q = cq.spec, cq.queue
            sel = spec.namespace_selector
            afs = name in self._afs_cqs
            if spec.queueing_strategy != QueueingStrategy.STRICT_FIFO and sel is not None \
                    and sel.selects_all and q.parked_count >= 2:
                pc = self._parked_classes.get(name)
                context = (spec.preemption.within_cluster_queue, afs)
                if pc is None or pc.queue is not q or pc.context != context:
                    q.watch_parked()
                    pc = self._parked_classes[name] = _ParkedClasses(q, context, {}, {})
                    self._file(pc, spec, afs, q.parked())
                else:
                    self._sync_classes(pc, spec, afs)
                classes = pc.classes
            else:
                # Not kept: a later requeue regroups from scratch.
                if self._parked_classes.pop(name, None) is not None:
                    q.watch_parked(False)
                keys = list(q.parked())
                if sel is None or not sel.selects_all:
                    keys = [k for k in keys
                            if self.namespace_matches(spec, self._wls[k].wl.namespace)]
                if spec.queueing_strategy == QueueingStrategy.STRICT_FIFO or len(keys) < 2:
                    for k in keys:
                        q.unpark(k)
                    continue
                pc = None
                classes = self._group(spec, afs, q, keys)
            followers: dict[WorkloadKey, list[SortKey]] = {}
            for c, members in list(classes.items()):
                rep = members.pop(0)[3]
                q.unpark(rep)
                if members:
                    followers[rep] = members
                else:
                    del classes[c]
                if pc is not None:
                    del pc.of[rep]
            if pc is not None:
                q.parked_changes()  # only the representatives just returned: not filed
            if followers:
                self._followers[name] = followers
            else:
                self._followers.pop(name, None)

    def _class_of(self, rec: _Record, spec: ClusterQueueSpec, afs: bool) -> object:
        """The nomination class of parked ``rec`` (step 1): its nomination key and, under
        Admission Fair Sharing, its LocalQueue (the LocalQueue orders the queue there: each
        gets its own representative, or one queue's parked class-mates would wait behind
        another queue's)."""
        key: object = self._nomination_key(rec, spec)
        if rec.wl.invalid_resources:
            # Refused before nomination, whatever its shape: never the representative of a
            # class-mate whose resources pass.
            key = (key, rec.wl.invalid_resources)
        return (rec.lq_key, key) if afs else key

    def _group(self, spec: ClusterQueueSpec, afs: bool, q: PendingQueue,
               keys: Iterable[WorkloadKey]) -> dict[object, list[SortKey]]:
        """Parked ``keys`` by class, each class's queue-order keys ascending."""
        classes: dict[object, list[SortKey]] = {}
        wls, order = self._wls, q.parked_order
        for k in keys:
            classes.setdefault(self._class_of(wls[k], spec, afs), []).append(order(k))
        for members in classes.values():
            members.sort()
        return classes

    def _file(self, pc: _ParkedClasses, spec: ClusterQueueSpec, afs: bool,
              keys: Iterable[WorkloadKey]) -> None:
        """File every parked key of ``keys`` in ``pc`` from scratch."""
        pc.classes = self._group(spec, afs, pc.queue, keys)
        pc.of = {sk[3]: (c, sk) for c, members in pc.classes.items() for sk in members}

    def _sync_classes(self, pc: _ParkedClasses, spec: ClusterQueueSpec, afs: bool) -> None:
        """Bring ``pc`` back to its invariant: each key whose parked state changed since the
        last requeue leaves the list it was filed in (if ``_release_followers`` has not
        taken it already) and, if parked now, is filed again under its current class and
        queue-order key. O(changes x log(class size))."""
        q, classes, of, wls = pc.queue, pc.classes, pc.of, self._wls
        for k in q.parked_changes():
            filed = of.pop(k, None)
            if filed is not None:
                members = classes.get(filed[0])
                if members is not None:
                    i = bisect_left(members, filed[1])
                    if i < len(members) and members[i] == filed[1]:
                        del members[i]
            sk = q.parked_order(k)
            if sk is not None:
                c = self._class_of(wls[k], spec, afs)
                members = classes.get(c)
                if members is None:
                    classes[c] = [sk]
                else:
                    insort(members, sk)
                of[k] = (c, sk)
        for c in [c for c, members in classes.items() if not members]:
            del classes[c]

    def _release_followers(self) -> None:
        """A representative that left its queue (admitted, deleted, moved) hands over to the
        next parked class-mate; one parked again (or still waiting) keeps them parked."""
        for name in list(self._followers):
            cq = self._cqs.get(name)
            if cq is None:
                del self._followers[name]
                continue
            q, followers = cq.queue, self._followers[name]
            for rep in [r for r in followers if r not in q]:
                members = followers.pop(rep)
                while members:
                    nxt = members.pop(0)[3]
                    if q.unpark(nxt):
                        if members:
                            followers[nxt] = members
                        break
            if not followers:
                del self._followers[name]

    # ---- nomination ------------------------------------------------------------------------
    def _candidates(
        self, p: Preemptor, spec: ClusterQueueSpec, protect: bool = True,
        cohort: bool = True,
    ) -> list[Candidate] | OrderedCandidates:
        """Admitted Workloads that ``find_targets`` could find eligible for ``p`` (a superset:
        it filters again). Skipped here, by the same rules (``preemption._eligibility``): the
        own ClusterQueue under withinClusterQueue Never, or those not below (not at most,
        for LowerOrNewerEqualPriority) the preemptor's priority; other ClusterQueues unless
        reclaimWithinCohort allows them and they borrow some flavor-resource (eligibility
        needs one needing preemption); under LowerPriority their Workloads not below it.
        With ``protect``, other queues' Workloads still within their queue's minimum runtime
        (the next expiry is remembered for ``next_wakeup``). Without ``cohort``, only the own
        ClusterQueue's (see ``_searches_cohort``). Under classical preemption, from the
        memoized part, an ``OrderedCandidates`` (``find_targets`` walks it lazily)."""
        name, pol = spec.name, spec.preemption
        within = pol.within_cluster_queue
        out: list[Candidate] = []
        if within == WithinClusterQueue.LOWER_PRIORITY:
            self._add_candidates(out, name, p.priority, None, name in self._afs_cqs)
        elif within == WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY:
            self._add_candidates(out, name, p.priority + 1, None, name in self._afs_cqs)
        root = self.tree.root_of(name)  # reclaim reaches the whole tree (reclaimable filters)
        if not cohort or root is None or pol.reclaim_within_cohort == ReclaimWithinCohort.NEVER:
            return out
        below = (
            p.priority if pol.reclaim_within_cohort == ReclaimWithinCohort.LOWER_PRIORITY
            else None
        )
        if protect and self._min_runtime_cqs:  # depends on the clock: not memoized
            for cq in self.tree.members(root):
                if cq != name and self.tree.borrows(cq):
                    self._add_candidates(out, cq, below, self._cqs[cq].spec.min_runtime_s,
                                         False)
            return out
        # Every other ClusterQueue's part is the same for every head of the tree at one
        # version: built (and, for classical preemption, sorted) once per version and
        # priority bound, not once per head.
        version = self._version(name)
        slot = self._cohort_candidates.get(root)
        if slot is None or slot[0] != version:
            slot = self._cohort_candidates[root] = (version, {})
        part = slot[1].get(below)
        if part is None:
            part = slot[1][below] = self._cohort_part(root, below)
        if self.fair_sharing is None:
            out.sort(key=lambda c: candidate_order(c, name))
            return OrderedCandidates(name, part.evicting, part.running, out,
                                     part.cluster_queues)
        for c in part.evicting:
            if c.cluster_queue != name:
                out.append(c)
        for c in part.running:
            if c.cluster_queue != name:
                out.append(c)
        return out

    def _cohort_part(self, root: ClusterQueueName, below: int | None) -> _CohortPart:
        """The candidates of every borrowing ClusterQueue of the tree under ``root`` with
        priority below ``below`` (None: any), in candidate order (another ClusterQueue's, as
        every head but their own sees them), split into being evicted and not."""
        cands: list[Candidate] = []
        cqs: list[ClusterQueueName] = []
        for cq in self.tree.members(root):
            if self.tree.borrows(cq):
                cqs.append(cq)
                self._add_candidates(cands, cq, below, None, False)
        cands.sort(key=lambda c: candidate_order(c, ClusterQueueName("")))
        split = next((i for i, c in enumerate(cands) if not c.evicting), len(cands))
        return _CohortPart(cands[:split], cands[split:], tuple(cqs))

    def _add_candidates(self, out: list[Candidate], cq: ClusterQueueName, below: int | None,
                        min_runtime_s: float | None, afs: bool) -> None:
        """Append the Workloads holding quota in ``cq`` with priority below ``below`` (None:
        any), skipping those within ``min_runtime_s`` of their reservation."""
        mr = min_runtime_s
        for key in self._admitted_by_cq.get(cq, {}):
            rec = self._wls[key]
            wl = rec.wl
            if below is not None and wl.priority >= below:
                continue
            reserved = wl.quota_reserved_at if wl.quota_reserved_at is not None else wl.creation
            if mr is not None and not rec.evicting and reserved + mr > self._now:
                self._wake(reserved + mr)  # protected until then
                continue
            out.append(
                Candidate(
                    key,
                    cq,
                    wl.priority,
                    wl.uid,
                    reserved,
                    wl.creation,
                    rec.usage,
                    rec.evicting,
                    self._afs_value(rec.lq_key) if afs else 0.0,
                )
            )

    def _searches_cohort(self, spec: ClusterQueueSpec, need: tuple[FlavorResource, ...]) -> bool:
        """Whether a victim search for ``need`` in ``spec`` can take other ClusterQueues'
        Workloads. Not under classical preemption with borrowWithinCohort Never when the
        ClusterQueue is not below its nominal quota of every flavor-resource of ``need``:
        ``find_targets`` then makes one attempt that skips every other ClusterQueue's
        candidate (Kueue: reclaim only for a ClusterQueue under nominal), so leaving them
        out finds the same victims without building the cohort's list. Always with a minimum
        runtime on some ClusterQueue (``min_runtime_s``): building the list arms the timer
        that requeues when a protection ends, as before."""
        if self.fair_sharing is not None or self._min_runtime_cqs:
            return True
        if spec.preemption.borrow_within_cohort != BorrowWithinCohort.NEVER:
            return True
        tree, name = self.tree, spec.name
        return all(tree.usage(name, fr) < tree.nominal(name, fr) for fr in need)

    def _find_targets(
        self,
        p: Preemptor,
        spec: ClusterQueueSpec,
        cands: list[Candidate] | OrderedCandidates,
        need: tuple[FlavorResource, ...],
        request: dict[FlavorResource, int],
    ) -> Targets | None:
        """Classical or, with fair sharing on, fair-sharing victim search."""
        if self.fair_sharing is None:
            return find_targets(p, spec, self.tree, cands, need, request)
        assert isinstance(cands, list)  # ``_candidates`` orders only for classical searches
        return find_fair_targets(p, spec, self.tree, cands, need, request, self.fair_sharing)

    def _preemptor(self, rec: _Record, spec: ClusterQueueSpec) -> Preemptor:
        wl = rec.wl
        return Preemptor(wl.key, spec.name, wl.priority, wl.uid, wl.queue_order_time)

    def _nomination_key(self, rec: _Record, spec: ClusterQueueSpec) -> _NominationKey:
        """What a nomination of ``rec`` in ``spec`` reads of the Workload (see step 3)."""
        wl = rec.wl
        if rec.shape_of is not wl.pod_sets:
            rec.shape = tuple(
                (
                    ps.name,
                    ps.count,
                    tuple(ps.requests.items()),
                    tuple(ps.node_selector.items()),
                    ps.affinity_terms,
                    ps.tolerations,
                    ps.min_count,
                )
                for ps in wl.pod_sets
            )
            rec.shape_of = wl.pod_sets
        order = (
            wl.queue_order_time
            if spec.preemption.within_cluster_queue
            == WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
            else None
        )
        return (wl.priority, order, rec.shape)

    def _nominate(self, rec: _Record, spec: ClusterQueueSpec) -> Assignment:
        """Flavor assignment of head ``rec`` in ``spec``, memoized (see step 3)."""
        version: tuple[int, ...] = self._version(spec.name)
        if self._afs_cqs and spec.name in self._afs_cqs:
            # An AFS sample reorders the own candidates (``Candidate.lq_usage``), so the
            # victims, the borrowing level once they are gone and the flavor may change.
            version = (*version, self._afs_samples.get(spec.name, 0))
        slot = self._nominations.get(spec.name)
        if slot is None or slot[0] != version:
            slot = self._nominations[spec.name] = (version, {})
        key = self._nomination_key(rec, spec)
        a = slot[1].get(key)
        if a is not None:
            self._nomination_hits += 1
            return a
        self._nomination_misses += 1
        a = slot[1][key] = self._assign(rec, spec)
        return a

    def _assign(self, rec: _Record, spec: ClusterQueueSpec) -> Assignment:
        """Flavor assignment of ``rec`` in ``spec``; with partial admission (a podSet with
        ``min_count``, Kueue PartialAdmission) and neither Fit nor preemption targets for
        the full count, the largest count down to ``min_count`` that gets one (binary
        search, Kueue ``flavorassigner/podset_reducer.go``); its ``admission`` carries the
        reduced count."""
        full = self._assign_shape(rec, spec, rec.wl)
        reducible = [i for i, ps in enumerate(rec.wl.pod_sets)
                     if ps.min_count is not None and ps.min_count < ps.count]
        if full.mode >= Mode.PREEMPT or not reducible:
            return full
        i = reducible[0]  # Kueue allows minCount on one podSet only (a CRD rule)
        ps = rec.wl.pod_sets[i]
        lo, hi, best = ps.min_count or 1, ps.count - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            sets = list(rec.wl.pod_sets)
            sets[i] = replace(ps, count=mid)
            a = self._assign_shape(rec, spec, replace(rec.wl, pod_sets=tuple(sets)))
            if a.mode >= Mode.PREEMPT:
                best, lo = a, mid + 1
            else:
                hi = mid - 1
        return best if best is not None else full

    def _assign_shape(self, rec: _Record, spec: ClusterQueueSpec, wl: Workload) -> Assignment:
        lists: dict[bool, list[Candidate] | OrderedCandidates] = {}  # with / without others'
        preemptor = self._preemptor(rec, spec)

        def oracle(fr: FlavorResource, amount: int) -> tuple[Mode, int]:
            cohort = self._searches_cohort(spec, (fr,))
            cands = lists.get(cohort)
            if cands is None:
                cands = lists[cohort] = self._candidates(preemptor, spec, cohort=cohort)
            t = self._find_targets(preemptor, spec, cands, (fr,), {fr: amount})
            if t is None:
                return Mode.NO_CANDIDATES, 0
            self._cycle_searches[(preemptor, spec.name, (fr,), ((fr, amount),), cohort)] = t
            tree = self.tree
            for x in t.targets:
                tree.remove_usage(x.candidate.cluster_queue, x.candidate.usage)
            borrow = tree.borrowing_level(spec.name, fr, amount)
            for x in t.targets:
                tree.add_usage(x.candidate.cluster_queue, x.candidate.usage)
            if all(x.candidate.cluster_queue != spec.name for x in t.targets):
                return Mode.RECLAIM, borrow
            return Mode.PREEMPT, borrow

        return assign_flavors(
            wl, spec, self._flavors, self.tree, oracle, self.fair_sharing is not None
        )

    # ---- processing ------------------------------------------------------------------------
    def _not_admitted(self, e: _Entry, park: bool) -> None:
        q = self._cqs[e.spec.name].queue
        if park and e.spec.queueing_strategy != QueueingStrategy.STRICT_FIFO:
            q.park(e.rec.wl)
        elif q.sticky == e.rec.wl.key:
            q.sticky = None

    def _hold_for(self, e: _Entry, held: list) -> None:
        """Keep capacity for a head that waits (Kueue ``resourcesToReserve``)."""
        name, tree, a = e.spec.name, self.tree, e.assignment
        keep: dict[FlavorResource, int] = {}
        for fr, amount in a.usage.items():
            q = tree.quota(name, fr)
            nominal = 0 if q is None else q.nominal
            used = tree.usage(name, fr)
            if a.borrow > 0:
                if q is None or q.borrowing_limit is None:
                    v = amount
                else:
                    v = min(amount, nominal + q.borrowing_limit - used)
            else:
                v = min(amount, nominal - used)
            if v > 0:
                keep[fr] = v
        if keep:
            tree.add_usage(name, keep)
            held.append((name, keep))

    def _keep_nominal_for_queue(self, e: _Entry, held: list) -> None:
        """pykueue, not Kueue: after admitting the head of a ClusterQueue that still has
        Workloads queued and is below its nominal quota, keep part of that unused nominal
        quota from the rest of the cycle, so borrowers of the cohort do not take what its
        next heads would reclaim by eviction a cycle or two later.

        Why: one head per ClusterQueue is admitted per cycle. Kueue v0.17.1 lends the rest of
        a lender's nominal quota to borrowers in the same cycle, and the lender's next head,
        within its nominal, reclaims it one cycle later by evicting what was just admitted
        (reclaimWithinCohort), so Workloads admitted under a second earlier are evicted
        again. Kept only while the ClusterQueue admits
        (a cycle in which its head does not fit holds nothing, so quota it cannot use is lent
        the next cycle) and only when it could reclaim (reclaimWithinCohort not Never); not
        under fair sharing, whose order is by share.

        How much, per flavor and resource (core units), at most the room
        ``nominal - usage``:

        * up to the highest usage the ClusterQueue had after an admission within the last
          ``KEEP_PEAK_WINDOW_S`` seconds (room it really used that recently: its arrivals
          often come right after a cycle, when its queue is short, so its queued requests
          alone under-state what it reclaims next);
        * or, for at most ``KEEP_PEAK_WINDOW_S`` seconds of consecutive admitting cycles,
          up to what its queued (not parked) Workloads request (a queue being drained, its
          usage not yet grown to it). Past that the queued part lapses until a cycle in
          which it keeps nothing beyond its recent usage, so a lender admitting every cycle
          from a queue it never grows into (each Workload finishes before the next is
          admitted) holds room it does not use for at most about twice the window (its
          peak ageing out, then the queued part lapsing), and the cohort's borrowers are
          admitted. Room it keeps using stays kept (Kueue's lender would reclaim it).

        Nothing is kept while a ClusterQueue of the cohort that has waited
        ``KEEP_MAX_HOLD_S`` since kept room first refused its head has a borrowing head that
        fits the room as it is (``_held_back``, ``_lent_to_held_back``), so a lender whose
        usage reaches its nominal every window starves no borrower, nor a stream of them."""
        spec = e.spec
        name = spec.name
        tree = self.tree
        now = self._now
        peaks = self._usage_peaks.setdefault(name, {})
        for fr in e.assignment.usage:
            _window_max_add(peaks.setdefault(fr, deque()), now, tree.usage(name, fr),
                            KEEP_PEAK_WINDOW_S)
        root = tree.root_of(name)
        if (self.fair_sharing is not None or not self.keep_nominal_for_queue
                or spec.preemption.reclaim_within_cohort == ReclaimWithinCohort.NEVER
                or not len(self._cqs[name].queue)
                or root is None or self._lent_to_held_back(root)):
            self._keep_over_since.pop(name, None)
            return
        room: dict[FlavorResource, int] = {}
        keep: dict[FlavorResource, int] = {}
        for fr in e.assignment.usage:
            r = tree.nominal(name, fr) - tree.usage(name, fr)
            if r > 0:
                room[fr] = r
                used = peaks[fr][0][1] - tree.usage(name, fr)
                if used > 0:
                    keep[fr] = min(r, used)
        # The queued part, while this run of admitting cycles is younger than the window.
        demand: dict[FlavorResource, int] = dict.fromkeys(room, 0)
        wls = self._wls
        for key in self._cqs[name].queue.active_keys():
            if all(demand[fr] >= room[fr] for fr in room):
                break
            for ps in wls[key].wl.pod_sets:
                for resource, amount in ps.total().items():
                    for fr in room:
                        if fr.resource == resource:
                            demand[fr] += amount
        beyond = {fr: min(room[fr], v) for fr, v in demand.items() if v > keep.get(fr, 0)}
        if not beyond:
            self._keep_over_since.pop(name, None)
        elif now - self._keep_over_since.setdefault(name, now) <= KEEP_PEAK_WINDOW_S:
            keep.update(beyond)
        if keep:
            tree.add_usage(name, keep)
            held.append((name, keep))
            kept = self._kept_now.setdefault(root, {})
            for fr, v in keep.items():
                kept[fr] = kept.get(fr, 0) + v

    def _held_back(self, name: ClusterQueueName, usage: Mapping[FlavorResource, int],
                   gone: Sequence[Candidate] = ()) -> None:
        """Remember since when ``name`` waits when this cycle's kept room is what refused its
        head: every flavor-resource of ``usage`` (its assignment, core units) it lacks, once
        ``gone`` (its preemption targets and this cycle's) released theirs, is covered by
        what ``_keep_nominal_for_queue`` kept for it in its cohort root (``_kept_now``;
        KEEP_MAX_HOLD_S)."""
        tree = self.tree
        root = tree.root_of(name)
        kept = self._kept_now.get(root) if root is not None else None
        if kept and self._fits_after(name, usage, gone, slack=kept):
            since = self._held_back_since.get(name, (self._now, self._now))[0]
            self._held_back_since[name] = (since, self._now)

    def _forget_held_back(self, now: float) -> None:
        """Step 0 of a cycle: forget the wait of a ClusterQueue deleted or out of any
        cohort, or that kept room has neither refused nor been given up for in
        ``KEEP_FORGET_S``."""
        tree, cqs = self.tree, self._cqs
        for n, (_, last) in list(self._held_back_since.items()):
            if n not in cqs or tree.root_of(n) is None or now - last >= KEEP_FORGET_S:
                del self._held_back_since[n]

    def _lent_to_held_back(self, root: ClusterQueueName) -> bool:
        """Whether a ClusterQueue of cohort tree ``root`` has waited ``KEEP_MAX_HOLD_S``
        since kept room first refused its head and its head this cycle, not processed yet,
        borrows and fits the room as it is (its preemption targets gone): then nothing is
        kept, and its wait is marked as served now (KEEP_FORGET_S)."""
        tree, now = self.tree, self._now
        for n, (since, _) in self._held_back_since.items():
            h = self._cycle_heads.get(n)
            if h is None or now - since < KEEP_MAX_HOLD_S or h.assignment.borrow <= 0 \
                    or h.rec.state != PENDING or tree.root_of(n) != root:
                continue
            gone = [t.candidate for t in h.targets.targets] if h.targets else []
            if self._fits_after(n, h.assignment.usage, gone):
                self._held_back_since[n] = (since, now)
                return True
        return False

    def _no_candidates(self, e: _Entry, held: list) -> Decision | None:
        if e.spec.preemption.reclaim_within_cohort != ReclaimWithinCohort.ANY:
            self._hold_for(e, held)
        a = e.assignment
        park = e.spec.queueing_strategy != QueueingStrategy.STRICT_FIFO
        self._not_admitted(e, park=True)
        return self._set_pending(
            e.rec,
            PendingReason.WAITING_FOR_QUOTA,
            a.message + self._protection_hint(e),
            a.shortfalls,
            inadmissible=park,
        )

    def _process(
        self, e: _Entry, now: float, taken: dict[WorkloadKey, Candidate], held: list
    ) -> list[Decision]:
        a, rec, spec = e.assignment, e.rec, e.spec
        park = spec.queueing_strategy != QueueingStrategy.STRICT_FIFO
        if a.mode == Mode.NO_FIT:
            self._not_admitted(e, park=True)
            d = self._set_pending(
                rec,
                a.reason or PendingReason.WAITING_FOR_QUOTA,
                a.message,
                a.shortfalls,
                inadmissible=park,
            )
            return [d] if d else []
        until = self._no_borrow_until.get(spec.name) if self._no_borrow_until else None
        if until is not None and until > now and a.borrow > 0:
            self._not_admitted(e, park=True)
            self._wake(until)
            d = self._set_pending(
                rec,
                PendingReason.WAITING_FOR_QUOTA,
                f"ClusterQueue {spec.name} may not borrow for another "
                f"{_duration(until - now)}: its workloads were just preempted to give quota "
                f"back ({RECLAIM_BACKOFF_ANNOTATION})",
                inadmissible=park,
            )
            return [d] if d else []
        if a.mode == Mode.NO_CANDIDATES:
            d = self._no_candidates(e, held)
            return [d] if d else []
        if a.mode in (Mode.PREEMPT, Mode.RECLAIM):
            return self._preempt(e, now, taken, held)
        # Fit: it must still fit after the earlier entries of this cycle.
        short = tuple(
            shortfall(self.tree, spec, "*", fr, v)
            for fr, v in a.usage.items()
            if v > self.tree.available(spec.name, fr)
        )
        if short:
            if self._kept_now:
                self._held_back(spec.name, a.usage)
            self._not_admitted(e, park=False)
            msg = (
                "no longer fits after higher-ordered workloads of the cohort took or held "
                "capacity this cycle: " + "; ".join(s.describe() for s in short)
            )
            d = self._set_pending(rec, PendingReason.WAITING_FOR_QUOTA, msg, short)
            return [d] if d else []
        admission = a.admission(spec.name)
        key = rec.wl.key
        self.assume(key, admission, now)
        self._keep_nominal_for_queue(e, held)
        return [Admit(key, spec.name, admission, dict(a.usage), borrowing=a.borrow > 0)]

    def _entry_targets(self, e: _Entry) -> Targets | None:
        """The fewest victims for head ``e`` against the current usage (called at
        nomination, before any decision of the cycle): the search its nomination's oracle
        made this cycle when the need and request are the same (``_cycle_searches``), else
        a new one."""
        p, need = self._preemptor(e.rec, e.spec), tuple(e.assignment.need_preemption)
        cohort = self._searches_cohort(e.spec, need)
        key = (p, e.spec.name, need, tuple(e.assignment.usage.items()), cohort)
        found = self._cycle_searches.get(key)
        if found is not None:
            self.search_reuses += 1
            return found
        cands = self._candidates(p, e.spec, cohort=cohort)
        return self._find_targets(p, e.spec, cands, need, e.assignment.usage)

    def _fits_after(
        self, name: ClusterQueueName, usage: Mapping[FlavorResource, int],
        gone: Sequence[Candidate], slack: Mapping[FlavorResource, int] | None = None,
    ) -> bool:
        """Whether ``usage`` fits ClusterQueue ``name`` once every Workload of ``gone`` has
        released its quota (Kueue ``scheduler.fits``), with ``slack`` more of each
        flavor-resource available (``_held_back``: the room kept this cycle); the tree is
        restored."""
        tree = self.tree
        slack = slack or {}
        for c in gone:
            tree.remove_usage(c.cluster_queue, c.usage)
        try:
            return all(v <= tree.available(name, fr) + slack.get(fr, 0)
                       for fr, v in usage.items())
        finally:
            for c in gone:
                tree.add_usage(c.cluster_queue, c.usage)

    def _retry_next_cycle(self, e: _Entry, message: str) -> list[Decision]:
        """A preemptor skipped this cycle (not parked): pending, waiting for quota."""
        self._not_admitted(e, park=False)
        d = self._set_pending(e.rec, PendingReason.WAITING_FOR_QUOTA, message)
        return [d] if d else []

    def _preempt(
        self, e: _Entry, now: float, taken: dict[WorkloadKey, Candidate], held: list
    ) -> list[Decision]:
        a, rec, spec = e.assignment, e.rec, e.spec
        targets = e.targets
        if targets is None:
            d = self._no_candidates(e, held)
            return [d] if d else []
        keys = [t.candidate.key for t in targets.targets]
        if any(k in taken for k in keys):
            return self._retry_next_cycle(
                e, "preemption targets overlap with another workload's this cycle; will retry")
        if not self._fits_after(spec.name, a.usage, [*taken.values(),
                                                      *(t.candidate for t in targets.targets)]):
            # Kueue ``fits``: the targets were chosen against the cycle's starting usage; an
            # earlier admission or preemptor of this cycle took what they would free. Kueue
            # skips the preemptor (retried next cycle) rather than preempting more.
            if self._kept_now:
                self._held_back(spec.name, a.usage, [*taken.values(),
                                                     *(t.candidate for t in targets.targets)])
            return self._retry_next_cycle(
                e, "no longer fits after processing another workload this cycle; will retry")
        for t in targets.targets:
            taken[t.candidate.key] = t.candidate
        out: list[Decision] = []
        victims = []
        awaiting = []
        path = self.tree.path_of(spec.name)
        for t in targets.targets:
            c = t.candidate
            if c.evicting:
                awaiting.append(c.key)
                continue
            self.evict(c.key, now)
            backoff = self._cqs[c.cluster_queue].spec.reclaim_backoff_s
            if backoff and t.reason != PreemptionReason.IN_CLUSTER_QUEUE:
                end = now + backoff
                self._no_borrow_until[c.cluster_queue] = max(
                    end, self._no_borrow_until.get(c.cluster_queue, 0.0))
                self._wake(end)
            victim_path = self.tree.path_of(c.cluster_queue)
            victims.append(
                Victim(
                    c.key,
                    c.cluster_queue,
                    t.reason,
                    f"Preempted to accommodate a workload (UID: {rec.wl.uid}, key: {rec.wl.key}) "
                    f"due to {_REASON_TEXT[t.reason]}; preemptor path: {path}; "
                    f"preemptee path: {victim_path}",
                )
            )
        if victims:
            out.append(
                Preempt(
                    rec.wl.key,
                    spec.name,
                    tuple(victims),
                    tuple(awaiting),
                    dict(a.usage),
                    targets.allow_borrowing,
                )
            )
        self._cqs[spec.name].queue.sticky = rec.wl.key
        # Kueue adds the preemptor's whole usage to the cycle's snapshot (``cq.AddUsage``):
        # its victims are still counted, so nothing else of the cohort takes the room they
        # free while they stop.
        usage = dict(a.usage)
        self.tree.add_usage(spec.name, usage)
        held.append((spec.name, usage))
        n = len(keys)
        d = self._set_pending(
            rec,
            PendingReason.WAITING_FOR_PREEMPTION,
            f"Pending the preemption of {n} workload(s): " + ", ".join(
                # A deleted Workload whose quota is held (``hold_deleted``): the API has it
                # no more, so say why it is waited for.
                f"{k} (deleted, its pods still hold resources)"
                if (r := self._wls.get(k)) is not None and r.gone else k for k in sorted(keys)),
        )
        if d is not None:
            out.append(d)
        return out
