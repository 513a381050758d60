"""When will a pending Workload start? Run the core forward on a copy of its cohort.

``estimate(state, cluster_queue, now, runtimes)`` forks the cohort of ``cluster_queue``
(``QuotaState.fork``: its ClusterQueues, their admitted and pending Workloads) and drives
the copy with a virtual clock exactly as the simulator drives the core (``app/sim/engine.py``):
cycles at an instant until nothing is decided, every Admit "written" at once, preemption
victims stopping at once and queued again. So the answer follows the real rules (queue order,
borrowing, lending limits, preemption), not a guess from the position in the queue.

Each run ends at its *expected end*, from ``RuntimeModel.remaining``:

- ``maximumExecutionTimeSeconds`` where set: admission time + the limit: a *bound* (Kueue
  and pykueue deactivate a Workload at its limit: docs/lifecycle.md);
- else the decayed median of the runtimes of finished Workloads of the same LocalQueue and
  shape (falling back to the LocalQueue's any-shape runtimes), among those that ran longer
  than this one has run so far: an *estimate*;
- else unknown: the run holds its quota for the rest of the simulation.

Confidence of a Workload's ETA (``Eta.confidence``): ``bounded`` when every run that ended in
the simulation before it started had a time limit, ``estimated`` when one of them ended at a
learned runtime or a projected arrival went ahead of it, ``unknown`` when it never starts in
the simulation (a run ahead has no known end, the ClusterQueue is inactive, the budget ran
out, more projected arrivals went ahead than ``ArrivalModel.max_future`` lets the run
carry). Workloads that will arrive later are modelled only with an ``ArrivalModel``
(``+arrivals``: each stream of higher priority goes on at its recent rate for as long as it
has been going, see there). Not modelled: runs that end before their limit (a bounded ETA
is then late, never early, when nothing arrives), eviction delays.

Cost: O(cycles x cohort size). ``estimate`` is one slice: ``budget_ms`` stops the run (with
an injected ``clock``, the core reads none) and the Workloads without a start are
``unknown``. ``ForwardRun`` is the same run in slices: it stops when a slice's budget is
spent and resumes where it was, on the cohort forked when it started, so every pending
Workload gets its ETA after a bounded number of slices while the caller yields between
them. ``EtaBoard`` caches the answer per cohort, recomputes it at most every
``min_interval`` seconds and only when the state changed (``QuotaState.generation``),
the run's first expected end passed with nothing changed (``EtaRun.valid_until``), or
``max_age`` passed, and resumes a run one slice per call (at most ``max_slices``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from app.core.decisions import Admit, Preempt
from app.core.scheduling_cycle import Scheduler
from app.core.types import ClusterQueueName, WorkloadKey
from app.core.workload import Workload

__all__ = [
    "ArrivalModel",
    "BOUNDED",
    "COMPUTING",
    "OUTPACED",
    "OVERDUE",
    "ESTIMATED",
    "UNKNOWN",
    "Eta",
    "EtaBoard",
    "EtaRun",
    "ForwardRun",
    "GOTT_EARLY",
    "GOTT_LATE",
    "RangedRun",
    "RuntimeModel",
    "estimate",
    "eta_text",
    "shape_key",
]

BOUNDED, ESTIMATED, UNKNOWN = "bounded", "estimated", "unknown"
LIMIT, LEARNED = "maximumExecutionTimeSeconds", "learned"
OUTPACED = "outpaced by higher-priority arrivals"
OVERDUE = "an expected end passed; recomputing"


@dataclass(frozen=True, slots=True)
class Eta:
    """Estimated start of one pending Workload.

    ``start``: seconds since the epoch (None when ``unknown``); ``confidence``: ``bounded`` /
    ``estimated`` / ``unknown`` (module docstring); ``basis``: which expected ends it rests
    on: ``maximumExecutionTimeSeconds``, ``learned`` (decayed median of finished runs),
    ``maximumExecutionTimeSeconds+learned``, or why it is unknown (``no end known``,
    ``budget exceeded``, ``never admitted``).

    ``earliest`` / ``latest``: Gott's 50% interval of the start (seconds since the epoch),
    only for a start that rests on projected arrivals (``basis`` ends ``+arrivals``): the
    start had every higher-priority stream lasted a third of its age more (``earliest``)
    or three times its age more (``latest``) instead of as long again (``start``). Gott's
    delta-t argument gives those ends even odds of bracketing a stream's real end, so the
    real start falls inside about half the time when one stream decides it
    (``RangedRun``). ``earliest`` None: no range (the start rests on no projection, or the
    range was not computed); ``latest`` None with ``earliest`` set: no later bound (the
    longer projection left it without a start within the run's budget or the
    ``ArrivalModel.max_future`` cut)."""

    start: float | None
    confidence: str
    basis: str
    earliest: float | None = None
    latest: float | None = None

    def wait(self, now: float) -> float | None:
        """Seconds from ``now`` to the start (0 when due), None when unknown."""
        return None if self.start is None else max(0.0, self.start - now)


def shape_key(wl: Workload) -> tuple[object, ...]:
    """What makes two Workloads "the same job" for runtime learning: per pod set its
    name, count and per-pod requests."""
    return tuple((ps.name, ps.count, tuple(sorted(ps.requests.items()))) for ps in wl.pod_sets)


class RuntimeModel:
    """Runtimes of finished Workloads per (LocalQueue, shape) and per LocalQueue.

    ``observe`` records one finished run (seconds of admission); ``remaining`` answers how
    long a run that has lasted ``elapsed`` seconds will still last, with its source. The
    median is weighted by recency: the i-th newest sample weighs ``0.5 ** (i / half_life)``,
    so a queue whose jobs got longer is followed within about ``half_life`` runs; at most
    ``max_samples`` per key are kept, and at most ``max_keys`` keys of each kind (shapes,
    LocalQueues), the least recently observed forgotten first: memory O(max_keys x
    max_samples) however many shapes tenants submit.
    """

    def __init__(self, *, half_life: float = 16.0, max_samples: int = 64,
                 max_keys: int = 4096) -> None:
        self.half_life = half_life
        self.max_samples = max_samples
        self.max_keys = max_keys
        # Insertion order = observation order (an observed key moves to the end).
        self._by_shape: dict[tuple[str, tuple[object, ...]], list[float]] = {}
        self._by_lq: dict[str, list[float]] = {}

    def observe(self, wl: Workload, seconds: float) -> None:
        """Record that ``wl`` ran ``seconds`` (negative values are ignored)."""
        if seconds < 0 or math.isnan(seconds):
            return
        lq = f"{wl.namespace}/{wl.queue_name}"
        for store, key in ((self._by_shape, (lq, shape_key(wl))), (self._by_lq, lq)):
            samples = store.pop(key, None) or []  # type: ignore[attr-defined]
            store[key] = samples  # type: ignore[index]
            samples.append(float(seconds))
            if len(samples) > self.max_samples:
                del samples[0]
            if len(store) > self.max_keys:
                del store[next(iter(store))]  # type: ignore[arg-type]

    def samples(self, wl: Workload) -> list[float]:
        """The samples used for ``wl``, oldest first: its shape's, else its LocalQueue's."""
        lq = f"{wl.namespace}/{wl.queue_name}"
        return self._by_shape.get((lq, shape_key(wl))) or self._by_lq.get(lq) or []

    def remaining(self, wl: Workload, elapsed: float = 0.0) -> tuple[float | None, str]:
        """``(seconds still to run or None, source)`` for ``wl`` after ``elapsed`` seconds
        of admission. Source ``maximumExecutionTimeSeconds`` (limit - elapsed, at least 0),
        ``learned`` (decayed median of the samples longer than ``elapsed``, minus
        ``elapsed``), or ``""`` with None when neither is known (no samples, or it already
        ran longer than every sample)."""
        if wl.max_execution_seconds is not None:
            return max(0.0, wl.max_execution_seconds - elapsed), LIMIT
        samples = self.samples(wl)
        n = len(samples)
        kept = [(s, 0.5 ** ((n - 1 - i) / self.half_life))
                for i, s in enumerate(samples) if s > elapsed]
        if not kept:
            return None, ""
        kept.sort()
        half = sum(w for _, w in kept) / 2
        acc = 0.0
        for s, w in kept:
            acc += w
            if acc >= half:
                return s - elapsed, LEARNED
        return kept[-1][0] - elapsed, LEARNED  # pragma: no cover - float rounding only


@dataclass(slots=True)
class EtaRun:
    """One forward run over a cohort: ``etas`` per pending Workload, ``cycles`` run, ``ms``
    spent (by the injected clock, 0 without one; summed over slices), ``truncated`` when the
    budget stopped it, ``computed_at`` (the ``now`` it started from), ``generation`` of the
    state it forked, ``slices`` it took (``ForwardRun.advance`` calls), ``valid_until``:
    the first expected end or arrival after ``computed_at`` (None: none): if the state has
    not changed by then, that end did not come as expected and the run is out of date."""

    etas: dict[WorkloadKey, Eta] = field(default_factory=dict)
    cycles: int = 0
    ms: float = 0.0
    truncated: bool = False
    computed_at: float = 0.0
    generation: int = -1
    slices: int = 0
    valid_until: float | None = None


_END, _EVICTED, _ARRIVE, _WAKE = 0, 1, 2, 3
# A run whose cycles at the core's wake-ups (``Scheduler.next_wakeup``) admit nothing this many
# times in a row stops waking there (a wake-up that recurs without changing anything, e.g.
# Admission Fair Sharing's decay, must not keep a run going until its budget).
_MAX_IDLE_WAKES = 3
# Gott's delta-t argument: seen at a uniformly random moment of its life, a stream that has
# lasted ``a`` has spent between a quarter and three quarters of it with probability 1/2,
# so it goes on for between a/3 and 3a more (the median: a more).
GOTT_EARLY, GOTT_LATE = 1.0 / 3.0, 3.0
COMPUTING = "computing"


class ForwardRun:
    """A forward run over ``cluster_queue``'s cohort that can stop and resume (slices).

    The cohort is forked at construction: the run answers for the state at that moment,
    whatever happens to ``state`` between slices. ``advance(budget_ms, clock)`` drives it
    until every pending Workload has a start, nothing is left to happen, or the slice's
    budget is spent (checked after each core cycle, so a slice overruns by at most one
    cycle); it returns ``done``. ``result()`` is the run so far: Workloads without a start
    yet are ``unknown`` (``computing`` while the run goes on; once done, why: see
    ``estimate``). ETAs already given never change in later slices: the virtual clock only
    moves forward. ``finish()`` ends it where it is (``truncated``: the rest get
    ``budget exceeded``).
    """

    def __init__(self, state: Scheduler, cluster_queue: ClusterQueueName, now: float,
                 runtimes: RuntimeModel, *, arrivals: ArrivalModel | None = None,
                 max_cycles_per_instant: int = 10_000, horizon: float = 1.0) -> None:
        self.run = EtaRun(computed_at=now, generation=state.generation)
        self.projected = 0  # how many projected arrivals the run carries
        self.done = False
        self.runtimes = runtimes
        self.max_cycles_per_instant = max_cycles_per_instant
        members = state.scope_members(cluster_queue)
        self._targets: dict[WorkloadKey, int] = {}  # pending Workload -> its priority
        self._events: list[tuple[float, int, int, WorkloadKey, str]] = []
        self._seq = 0
        # Which runs end where: a key's generation guards against a stale end after eviction.
        self._runs: dict[WorkloadKey, int] = {}
        self._future: dict[WorkloadKey, Workload] = {}
        # Past this instant the projection was cut by ``max_future`` (not by the streams'
        # own horizons): a start behind projected arrivals after it would only date the cut.
        self._horizon_end = math.inf
        # The highest priority among projected Workloads admitted so far: a target of lower
        # priority admitted after one of them owes its ETA to the projection ("+arrivals").
        self._ahead = -math.inf
        self._endless = 0  # runs with no known end: they hold their quota for the whole run
        self._sources: set[str] = set()  # the kinds of expected ends consumed so far
        self._t = now
        self._in_instant = True  # cycles at ``_t`` still to run
        self._instant_cycles = 0
        # The core's own timers (reclaim backoff, minimum runtime: ``Scheduler.next_wakeup``)
        # end in the projection too: an instant there runs a cycle, as the live loop does, so
        # a queue in its reclaim backoff with nothing else to come is admitted when the
        # backoff ends rather than "never".
        self._wake_only = False
        self._idle_wakes = 0
        if not members:
            self.done = True
            return
        sim = state.fork(members)
        assert isinstance(sim, Scheduler)
        self._sim = sim
        for name in members:
            for info in sim.pending_workloads(name):
                self._targets[info.workload] = info.priority
        if arrivals is not None and self._targets:
            # Only classes that would go ahead of some pending Workload: above the lowest
            # pending priority (a lower or equal one queues behind all of them).
            lqs = {f"{lq.namespace}/{lq.name}" for lq in sim.local_queues_of(members)}
            projected = arrivals.future(now, lqs, above_priority=min(self._targets.values()),
                                        horizon=horizon)
            self.projected = len(projected)
            for wl in projected:
                self._future[wl.key] = wl
                self._push(wl.creation, _ARRIVE, wl.key, "")
            if len(projected) >= arrivals.max_future:  # capped: the projection ends sooner
                self._horizon_end = projected[-1].creation
        for name in members:
            for key in sim.admitted(name):
                info = sim.workload(key)
                wl = sim.domain_workload(key)
                if info is None or wl is None:
                    continue
                self._runs[key] = 0
                if info.state == "evicting":
                    self._push(now, _EVICTED, key, LIMIT)
                    continue
                started = wl.quota_reserved_at if wl.quota_reserved_at is not None \
                    else wl.creation
                left, source = runtimes.remaining(wl, max(0.0, now - started))
                if left is not None:
                    self._push(now + left, _END, key, source)
                else:
                    self._endless += 1

    def restrict(self, keys: Iterable[WorkloadKey]) -> None:
        """Answer only for ``keys`` (of the pending Workloads): the run is done once they
        have a start, so a run that needs few answers stops early. Call before ``advance``;
        the others are left out of ``result``."""
        keep = set(keys)
        self._targets = {k: p for k, p in self._targets.items() if k in keep}
        if not self._targets:
            self.done = True

    def _push(self, at: float, kind: int, key: WorkloadKey, source: str) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, key, source))

    def advance(self, budget_ms: float | None = None,
                clock: Callable[[], float] | None = None) -> bool:
        """Run one slice (no budget or no clock: to the end); returns ``done``."""
        if self.done:
            return True
        t0 = clock() if clock is not None else 0.0
        deadline = None if budget_ms is None or clock is None else t0 + budget_ms / 1000.0
        self.run.slices += 1
        try:
            while not self.done:
                if not self._targets:
                    self.done = True
                elif self._in_instant:
                    self._cycle()
                elif not self._events:
                    self.done = True
                else:
                    self._next_instant()
                if deadline is not None and clock is not None and clock() > deadline:
                    break
        finally:
            if clock is not None:
                self.run.ms += (clock() - t0) * 1000.0
        return self.done

    def _cycle(self) -> None:
        sim, t, targets = self._sim, self._t, self._targets
        ds = sim.schedule(t)
        self.run.cycles += 1
        self._instant_cycles += 1
        for d in ds:
            if isinstance(d, Admit):
                key = d.workload
                wl = sim.domain_workload(key)
                if key in targets:
                    prio = targets.pop(key)
                    self.run.etas[key] = _eta_at(t, self._sources, self._ahead > prio,
                                                 bool(self._future) and t > self._horizon_end)
                if wl is None:
                    continue
                if key in self._future:
                    self._ahead = max(self._ahead, wl.priority)
                sim.update_workload(wl)  # the admission "lands" (as in the simulator)
                gen = self._runs[key] = self._runs.get(key, 0) + 1
                left, source = self.runtimes.remaining(wl, 0.0)
                if left is not None:
                    self._push(t + left, _END, key, f"{source}:{gen}")
                else:
                    self._endless += 1
            elif isinstance(d, Preempt):
                for v in d.victims:
                    self._push(t, _EVICTED, v.workload,
                               f"{LIMIT}:{self._runs.get(v.workload, 0)}")
        if not ds:
            self._in_instant = False
            if self._wake_only and self._instant_cycles == 1:
                self._idle_wakes += 1
            self._push_wake(t)
        else:
            self._idle_wakes = 0
        if ds and self._instant_cycles >= self.max_cycles_per_instant:
            self.finish()  # a core that never settles at one instant: stop as truncated

    def _push_wake(self, t: float) -> None:
        """After a cycle that changed nothing at ``t``: an instant at the core's next
        wake-up, unless another event comes first (its cycle looks again) or the wake-ups
        stopped changing anything (``_MAX_IDLE_WAKES``)."""
        at = self._sim.next_wakeup()
        if at is None or at <= t or self._idle_wakes >= _MAX_IDLE_WAKES:
            return
        if self._events and self._events[0][0] <= at:
            return
        self._push(at, _WAKE, WorkloadKey(""), "")

    def _next_instant(self) -> None:
        events, sim = self._events, self._sim
        t = self._t = events[0][0]
        if self.run.valid_until is None and t > self.run.computed_at:
            self.run.valid_until = t
        self._wake_only = True
        while events and events[0][0] == t:
            _, _, kind, key, tag = heapq.heappop(events)
            if kind == _WAKE:
                continue  # only the cycle at ``t``
            self._wake_only = False
            source, _, gen = tag.partition(":")
            if int(gen or 0) != self._runs.get(key, 0):
                continue  # the run this end belonged to was preempted
            if kind == _ARRIVE:
                sim.add_workload(self._future[key])
            elif kind == _END:
                self._sources.add(source)
                sim.finish(key)
            else:
                self._runs[key] = self._runs.get(key, 0) + 1
                sim.finish_eviction(key, t)
        self._in_instant = True
        self._instant_cycles = 0

    def finish(self) -> None:
        """Stop here: the Workloads without a start get ``budget exceeded``."""
        if not self.done:
            self.done = self.run.truncated = True

    def result(self) -> EtaRun:
        """The run so far (see the class doc); a new ``EtaRun`` sharing nothing mutable."""
        out = replace(self.run, etas=dict(self.run.etas))
        if not self.done:
            why = COMPUTING
        elif self.run.truncated:
            why = "budget exceeded"
        else:
            # Nothing left to happen: either a run ahead never ends in the model, or the
            # Workload cannot be admitted however long it waits (inactive queue, more than
            # the quota).
            why = "no end known" if self._endless else "never admitted"
        for key in self._targets:
            out.etas[key] = Eta(None, UNKNOWN, why)
        return out


class RangedRun:
    """A ``ForwardRun`` at Gott's median horizon and, when it projects arrivals, the same
    run at the ends of Gott's 50% interval, giving each start that rests on projected
    arrivals an ``earliest`` / ``latest`` (``Eta``).

    The three runs fork the cohort at construction (the same moment: their answers are
    comparable); the early (``GOTT_EARLY``) and late (``GOTT_LATE``) runs go only after the
    median run is done, restricted to its ``+arrivals`` Workloads (``ForwardRun.restrict``),
    so they stop once those have a start. Same interface as ``ForwardRun`` (``run``,
    ``done``, ``advance``, ``finish``, ``result``): ``advance`` spends one slice's budget
    across the phases, ``run.ms`` and ``run.slices`` count all of them, so a caller's cap on
    slices (``EtaBoard.max_slices``) bounds the three together. ``result`` answers from the
    median run as soon as it is done (ranges once both ends are); ``finish`` ends it where
    it is: the median run's unanswered Workloads get ``budget exceeded``, the ends' missing
    answers leave no range (early) or no later bound (late). A start outside its interval
    (the core is not monotone in the arrivals: a projected Workload can preempt or free
    room) widens the interval to contain it.
    """

    def __init__(self, state: Scheduler, cluster_queue: ClusterQueueName, now: float,
                 runtimes: RuntimeModel, *, arrivals: ArrivalModel | None = None,
                 max_cycles_per_instant: int = 10_000) -> None:
        self.median = ForwardRun(state, cluster_queue, now, runtimes, arrivals=arrivals,
                                 max_cycles_per_instant=max_cycles_per_instant)
        self.run = self.median.run
        self.ends: list[ForwardRun] = []
        if arrivals is not None and self.median.projected:
            self.ends = [ForwardRun(state, cluster_queue, now, runtimes, arrivals=arrivals,
                                    max_cycles_per_instant=max_cycles_per_instant,
                                    horizon=h) for h in (GOTT_EARLY, GOTT_LATE)]
        self._restricted = False
        self.done = self.median.done and not self.ends

    def _phase(self) -> ForwardRun | None:
        if not self.median.done:
            return self.median
        if not self._restricted:
            self._restricted = True
            want = [k for k, e in self.median.run.etas.items()
                    if e.start is not None and e.basis.endswith("+arrivals")]
            for fr in self.ends:
                fr.restrict(want)
        return next((fr for fr in self.ends if not fr.done), None)

    def advance(self, budget_ms: float | None = None,
                clock: Callable[[], float] | None = None) -> bool:
        """One slice across the phases (no budget or no clock: to the end); ``done``."""
        if self.done:
            return True
        t0 = clock() if clock is not None else 0.0
        self.run.slices += 1
        first = True
        while (fr := self._phase()) is not None:
            left = None
            if budget_ms is not None and clock is not None:
                left = budget_ms - (clock() - t0) * 1000.0
                if left <= 0 and not first:
                    break  # the first phase always gets its step, as ForwardRun's slices do
            first = False
            before_ms = fr.run.ms
            fr.advance(left, clock)
            if fr is not self.median:
                self.run.ms += fr.run.ms - before_ms
            else:
                self.run.slices -= 1  # counted above, once per call
            if not fr.done:
                break
        self.done = self._phase() is None
        return self.done

    def finish(self) -> None:
        """Stop here (see the class doc)."""
        self.median.finish()
        for fr in self.ends:
            fr.finish()
        self.done = True

    def result(self) -> EtaRun:
        """The median run's answer, with ranges once both ends are done."""
        out = self.median.result()
        if not self.ends or not all(fr.done for fr in self.ends):
            return out
        early, late = (fr.run.etas for fr in self.ends)
        for key, e in out.etas.items():
            lo, hi = early.get(key), late.get(key)
            if e.start is None or lo is None or lo.start is None:
                continue
            latest = None if hi is None or hi.start is None else max(hi.start, e.start)
            out.etas[key] = replace(e, earliest=min(lo.start, e.start), latest=latest)
        return out


def estimate(
    state: Scheduler,
    cluster_queue: ClusterQueueName,
    now: float,
    runtimes: RuntimeModel,
    *,
    budget_ms: float | None = None,
    clock: Callable[[], float] | None = None,
    max_cycles_per_instant: int = 10_000,
    arrivals: ArrivalModel | None = None,
    ranges: bool = True,
) -> EtaRun:
    """ETA of every pending Workload of ``cluster_queue``'s cohort in one slice (see the
    module doc and ``ForwardRun``).

    ``state`` is not modified (a fork is driven). ``now``: seconds since the epoch;
    admitted Workloads' elapsed time is ``now - quota_reserved_at`` (``creation`` when
    unknown). ``budget_ms`` with ``clock`` (seconds, e.g. ``time.perf_counter``): stop
    after that much time, the rest ``unknown`` (``budget exceeded``, ``truncated``). An
    unknown ClusterQueue gives an empty run. Raises nothing for a core that keeps deciding
    at one instant past ``max_cycles_per_instant``: the run stops there as truncated.
    ``arrivals``: project Workloads still to come (``ArrivalModel.future``) into the run,
    so later higher-priority arrivals delay the ETA as they will; the basis of an ETA they
    delayed gets ``+arrivals`` and, with ``ranges``, Gott's 50% interval (``RangedRun``,
    ``Eta.earliest`` / ``latest``; the budget covers the three runs).
    """
    t0 = clock() if clock is not None else 0.0
    fr: ForwardRun | RangedRun
    if ranges:
        fr = RangedRun(state, cluster_queue, now, runtimes, arrivals=arrivals,
                       max_cycles_per_instant=max_cycles_per_instant)
    else:
        fr = ForwardRun(state, cluster_queue, now, runtimes, arrivals=arrivals,
                        max_cycles_per_instant=max_cycles_per_instant)
    if not fr.advance(budget_ms, clock):
        fr.finish()
    if clock is not None:
        fr.run.ms = (clock() - t0) * 1000.0  # the fork counts too
    return fr.result()


def _eta_at(t: float, sources: set[str], arrivals: bool = False,
            past_horizon: bool = False) -> Eta:
    """The Eta of a start at ``t`` after the expected ends ``sources``; ``arrivals``: a
    projected higher-priority Workload went ahead of it; ``past_horizon``: it starts after
    the projection was cut short (``ArrivalModel.max_future``)."""
    if arrivals and past_horizon:
        # It starts only once the cut projection stops: the answer would date the cut, not
        # the queue. Higher-priority arrivals outpace the quota as far as the model knows.
        return Eta(None, UNKNOWN, OUTPACED)
    if LEARNED in sources:
        basis = f"{LIMIT}+{LEARNED}" if LIMIT in sources else LEARNED
    else:
        basis = LIMIT
    if arrivals:  # a projection went ahead of it: an estimate, whatever the limits
        return Eta(t, ESTIMATED, basis + "+arrivals")
    return Eta(t, BOUNDED if basis == LIMIT else ESTIMATED, basis)


class ArrivalModel:
    """Recent arrivals per class (LocalQueue, priority, shape), to project the next ones.

    ``observe(wl)`` records a Workload's creation. ``future(now, local_queues,
    above_priority)`` returns the Workloads expected after ``now`` from the classes of
    priority strictly above ``above_priority`` (only they go ahead of a pending Workload of
    that priority: an equal-priority arrival is younger, so it queues behind it in Kueue's
    order, priority then creation).

    Rate: per class with at least ``min_samples`` arrivals in the last ``window_seconds``,
    (n - 1) / (last - first); one copy of its latest Workload every ``1 / rate`` seconds. A
    class whose last arrival is older than ``stale_gaps`` mean gaps has stopped (a burst
    that ended projects nothing; a Poisson stream leaves such a gap about 5% of the time at
    3).

    Horizon: a stream is projected for as long as it has been going (its *age*: since the
    first arrival after a gap longer than ``window_seconds``), then stops. Nothing says
    when a stream will end; "as long again as it has lasted" is the median guess when
    nothing else is known (Gott's delta-t argument, the Lindy rule: seen at a random moment
    of its life, a stream is as likely to be in its first half as in its second). After
    every stream's horizon the run goes on with no arrivals, so every Workload gets a
    start: a young burst is expected to end soon, a stream that has gone on all day to go
    on for a day. At most ``max_future`` projected in all, the soonest first (the cost of
    each run); a start behind projected arrivals after that cut is ``unknown``
    (``OUTPACED``). They are named ``~eta-N`` (never a real Kubernetes name) and keep the
    latest one's time limit.

    ``pool_shapes``: a stream is a (LocalQueue, priority), not a class: its rate and age
    come from all its recent arrivals, and each shape seen in the window arrives at its
    share of that rate (a team's 8-GPU job, rare in itself, is projected once the team's
    stream has ``min_samples`` arrivals; its age is the stream's, not restarted after each
    long gap between 8-GPU jobs). Off by default (bench/eta_accuracy.py ``--pool-shapes``;
    results in docs/benchmarks.md, ETA).
    """

    def __init__(self, *, window_seconds: float = 3600.0,
                 min_samples: int = 3, max_future: int = 2000, max_samples: int = 256,
                 stale_gaps: float = 3.0, pool_shapes: bool = False) -> None:
        self.window_seconds = window_seconds
        self.pool_shapes = pool_shapes
        self.min_samples = min_samples
        self.max_future = max_future
        self.max_samples = max_samples
        self.stale_gaps = stale_gaps
        # class -> (latest Workload, recent arrival times, start of the stream)
        self._classes: dict[tuple[object, ...], tuple[Workload, list[float], float]] = {}
        # Forgetting ended classes (``_forget_ended``): the newest arrival seen, and the
        # size and newest arrival at the last sweep.
        self._newest = -math.inf
        self._swept_size = 0
        self._swept_at = -math.inf

    def observe(self, wl: Workload) -> None:
        """Record the arrival of ``wl`` (at ``wl.creation``)."""
        key = (wl.namespace, wl.queue_name, wl.priority, shape_key(wl))
        got = self._classes.get(key)
        times = got[1] if got is not None else []
        since = got[2] if got is not None else wl.creation
        if times and wl.creation - max(times) > self.window_seconds:
            # Nothing for a whole window: the stream had ended, this one starts afresh.
            since = wl.creation
        times.append(wl.creation)
        if len(times) > self.max_samples:
            del times[0]
        latest = wl if got is None or wl.creation >= got[0].creation else got[0]
        self._classes[key] = (latest, times, min(since, wl.creation))
        self._newest = max(self._newest, wl.creation)
        if len(self._classes) > 2 * self._swept_size + 64 \
                or self._newest - self._swept_at > self.window_seconds:
            self._forget_ended()

    def _forget_ended(self) -> None:
        """Drop the classes with no arrival in the last ``window_seconds`` before the newest
        one seen: they project nothing (``future`` reads only the window) and their next
        arrival starts a new stream anyway (``observe``), so forgetting them changes no
        projection. Without it a tenant creating Workloads of ever new shapes grows the
        model, and the Workloads it keeps, for ever. Run when the number of
        classes doubled or a window passed since the last sweep: amortized O(1) per
        ``observe``."""
        cutoff = self._newest - self.window_seconds
        self._classes = {k: v for k, v in self._classes.items() if max(v[1]) >= cutoff}
        self._swept_size, self._swept_at = len(self._classes), self._newest

    def future(self, now: float, local_queues: set[str],
               above_priority: int | None = None, horizon: float = 1.0) -> list[Workload]:
        """The projected arrivals of ``local_queues`` (``namespace/name``) after ``now``,
        of priority above ``above_priority`` (None: every class); each stream goes on for
        ``horizon`` times its age (1: the median guess; ``GOTT_EARLY`` / ``GOTT_LATE``: the
        ends of Gott's 50% interval)."""
        streams: list[tuple[float, int, float, float, Workload]] = []
        # Streams: a class each, or with ``pool_shapes`` a (LocalQueue, priority) each whose
        # arrivals take the shapes of its recent mix.
        groups: dict[tuple[object, ...], list[tuple[Workload, list[float], float]]] = {}
        for (ns, queue, prio, shape), (latest, times, since) in self._classes.items():
            if f"{ns}/{queue}" not in local_queues:
                continue
            if above_priority is not None and latest.priority <= above_priority:
                continue
            recent = sorted(x for x in times if now - self.window_seconds <= x <= now)
            if not recent:
                continue
            key = (ns, queue, prio) if self.pool_shapes else (ns, queue, prio, shape)
            groups.setdefault(key, []).append((latest, recent, since))
        for members in groups.values():
            merged = sorted(x for _, recent, _ in members for x in recent)
            if len(merged) < self.min_samples or merged[-1] <= merged[0]:
                continue
            step = (merged[-1] - merged[0]) / (len(merged) - 1)
            if now - merged[-1] > self.stale_gaps * step:
                continue  # the stream stopped
            # The stream's age: its longest-running class (a rare shape's own age restarts
            # after each window-long gap although the stream went on).
            since = min(m[2] for m in members)
            end = now + horizon * (now - since)  # by default as long again as it has gone on
            for latest, recent, _ in members:
                # Each shape at its share of the stream's rate, in phase with its last.
                own = step * len(merged) / len(recent)
                at = recent[-1] + own * (math.floor((now - recent[-1]) / own) + 1)  # > now
                streams.append((at, len(streams), own, end, latest))
        # Soonest first across the classes, so the cap cuts the far end of the horizon and
        # never a whole class.
        heapq.heapify(streams)
        out: list[Workload] = []
        while streams and len(out) < self.max_future:
            at, i, step, end, latest = streams[0]
            if at > end:
                heapq.heappop(streams)  # this stream's projection is over
                continue
            n = len(out) + 1
            out.append(replace(latest, name=f"~eta-{n}", uid=f"~eta-{n}", creation=at,
                               admission=None, evicted_at=None, quota_reserved_at=None))
            heapq.heapreplace(streams, (at + step, i, step, end, latest))
        return out


class EtaBoard:
    """ETAs per cohort, cached; see the module doc for when a cohort is recomputed.

    ``runtimes``: the learned runtimes (shared with whoever observes finished runs);
    ``arrivals``: an ``ArrivalModel`` to project arrivals into each run (None: none);
    ``min_interval`` / ``max_age``: seconds; ``budget_ms``: per slice of a cohort's run;
    ``max_slices``: a run still going after that many slices is ended (the rest ``budget
    exceeded``), so a full answer costs at most ``max_slices x budget_ms`` (plus the fork);
    ``clock``: seconds for the budget (``time.perf_counter``), injected so the core reads no
    clock; ``ranges``: give starts that rest on projected arrivals Gott's 50% interval
    (``RangedRun``: up to two more runs per cohort, within the same ``max_slices``).
    ``runs`` (runs started), ``slices`` and ``total_ms`` count the work done.

    A run that does not finish within one slice is kept and resumed by the next call for
    its cohort (``advance``, or ``for_cluster_queue``: one slice per call at most), on the
    state forked when it started; meanwhile answers come from it where it has got and from
    the previous finished run for the rest.
    """

    def __init__(
        self,
        runtimes: RuntimeModel | None = None,
        *,
        min_interval: float = 5.0,
        max_age: float = 60.0,
        budget_ms: float = 50.0,
        max_slices: int = 400,
        clock: Callable[[], float] | None = None,
        arrivals: ArrivalModel | None = None,
        ranges: bool = True,
    ) -> None:
        self.runtimes = runtimes or RuntimeModel()
        self.ranges = ranges
        self.arrivals = arrivals
        self.min_interval = min_interval
        self.max_age = max_age
        self.budget_ms = budget_ms
        self.max_slices = max_slices
        self.clock = clock
        self.runs = 0
        self.slices = 0
        self.total_ms = 0.0
        self._cache: dict[tuple[ClusterQueueName, ...], EtaRun] = {}
        self._running: dict[tuple[ClusterQueueName, ...], ForwardRun | RangedRun] = {}

    def _current(self, cached: EtaRun | None, state: Scheduler, now: float) -> bool:
        if cached is None:
            return False
        age = now - cached.computed_at
        # An expected end that passed with nothing changed did not happen: the ETAs behind
        # it are in the past ("now") although nothing can start; run again.
        due = cached.valid_until is not None and now >= cached.valid_until
        fresh = cached.generation == state.generation and age < self.max_age and not due
        return fresh or 0 <= age < self.min_interval

    def due_at(self, state: Scheduler, name: ClusterQueueName, now: float) -> float | None:
        """When ``name``'s cohort's answer can next be brought up to date (seconds since the
        epoch, as ``now``): None when the cached run already answers for the state as it is
        (``QuotaState.generation``) or ``name`` is unknown; ``now`` when a run is going or
        a new one may start; else ``computed_at + min_interval`` of the cached run (the rate
        limit: the state changed less than ``min_interval`` after it started). ``advance``
        at that time does a slice. For a caller that wants a new pending Workload's ETA
        promptly (``SchedulerLoop``)."""
        members = state.scope_members(name)
        if not members:
            return None
        scope = tuple(sorted(members))
        cached = self._cache.get(scope)
        if scope in self._running or not self._current(cached, state, now):
            return now
        assert cached is not None  # _current is False without one
        if cached.generation == state.generation:
            return None
        return max(now, cached.computed_at + self.min_interval)

    def advance(self, state: Scheduler, name: ClusterQueueName, now: float) -> bool:
        """One slice of ``name``'s cohort's run when its cached answer is out of date
        (starting a run on the state as it is now if none is going); True when the cached
        answer is complete and current (nothing was left to do, or this slice ended it)."""
        members = state.scope_members(name)
        if not members:
            return True
        scope = tuple(sorted(members))
        fr = self._running.get(scope)
        if fr is None:
            if self._current(self._cache.get(scope), state, now):
                return True
            # A cohort that gained or lost a ClusterQueue is a new scope: its old run and
            # answer are dropped rather than kept forever.
            for store in (self._cache, self._running):
                for old in [o for o in store if o != scope and set(o) & set(scope)]:
                    del store[old]
            t0 = self.clock() if self.clock is not None else 0.0
            fr = RangedRun(state, name, now, self.runtimes, arrivals=self.arrivals) \
                if self.ranges else ForwardRun(state, name, now, self.runtimes,
                                               arrivals=self.arrivals)
            if self.clock is not None:
                fr.run.ms += (self.clock() - t0) * 1000.0  # the fork
            self._running[scope] = fr
            self.runs += 1
        before = fr.run.ms
        done = fr.advance(self.budget_ms, self.clock)
        self.slices += 1
        if not done and fr.run.slices >= self.max_slices:
            fr.finish()
            done = True
        self.total_ms += fr.run.ms - before
        if done:
            self._cache[scope] = fr.result()
            del self._running[scope]
        return done

    def for_cluster_queue(self, state: Scheduler, name: ClusterQueueName, now: float,
                          advance: bool = True) -> EtaRun:
        """The best answer covering ``name``'s cohort after at most one slice of work: the
        finished run, or while one is going its ETAs so far over the previous finished
        run's (``computing`` where neither has one; the previous one, with its range, for a
        start whose range is not computed yet). ``advance=False``: no work at all, only
        what was computed (a reader beside a background refresher). A start that passed
        since the run while the Workload still waits reads ``unknown`` (``OVERDUE``)."""
        if advance:
            self.advance(state, name, now)
        members = state.scope_members(name)
        if not members:
            return EtaRun(computed_at=now)
        scope = tuple(sorted(members))
        cached = self._cache.get(scope)
        fr = self._running.get(scope)
        if fr is None:
            return _without_overdue(cached, now) if cached is not None \
                else EtaRun(computed_at=now)
        out = fr.result()
        if cached is not None:
            for key, e in out.etas.items():
                old = cached.etas.get(key)
                if old is None:
                    continue
                # Still computing; or a start behind projections whose range is still being
                # computed (``RangedRun``'s ends): the previous whole answer, point and range
                # together, rather than a point whose range blinks out on every new run.
                if e.basis == COMPUTING or (e.earliest is None and old.earliest is not None
                                            and e.basis.endswith("+arrivals")):
                    out.etas[key] = old
        return _without_overdue(out, now)

    def eta(self, state: Scheduler, name: ClusterQueueName, key: WorkloadKey,
            now: float) -> Eta:
        """ETA of pending ``key`` in ClusterQueue ``name`` (``unknown`` if not in the run:
        it arrived after the cached run, within ``min_interval``)."""
        got = self.for_cluster_queue(state, name, now).etas.get(key)
        return got if got is not None else Eta(None, UNKNOWN, "not computed yet")

    def forget_missing(self, names: Iterable[ClusterQueueName]) -> None:
        """Drop cached cohorts that contain none of ``names`` (deleted queues)."""
        keep = set(names)
        for store in (self._cache, self._running):
            for scope in [s for s in store if not keep.intersection(s)]:
                del store[scope]


def _without_overdue(run: EtaRun, now: float) -> EtaRun:
    """``run`` as read at ``now``: a start after the run's ``computed_at`` that has passed
    while its Workload is still pending rested on an expected end (or arrival) that did not
    come by then; it is ``unknown`` (``OVERDUE``) until the next run, rather than "now" for
    a Workload that cannot start. A start at ``computed_at`` itself (free quota: the next
    cycle admits it) stays. Returns ``run`` itself when nothing is overdue."""
    overdue = [k for k, e in run.etas.items()
               if e.start is not None and run.computed_at < e.start <= now]
    if not overdue:
        return run
    etas = dict(run.etas)
    for k in overdue:
        etas[k] = Eta(None, UNKNOWN, OVERDUE)
    return replace(run, etas=etas)


def eta_text(eta: Eta, now: float) -> str:
    """Short, coarsely rounded text for messages: ``expected start in ~12m``, ``expected
    start in under a minute``, ``expected start now`` (due: the start time has come),
    ``start time unknown``. The rounding (under a minute, 1 min below 5 min, then 5 min
    below 1 h, 15 min below 3 h, hours below 2 days, then days) keeps the text stable for
    minutes, so a message carrying it is rewritten rarely."""
    wait = eta.wait(now)
    if wait is None:
        return "start time unknown"
    if wait < 1:
        return "expected start now"
    if wait < 60:
        # Not "now": a Workload 40 s away (e.g. behind a run about to end) is not starting.
        return "expected start in under a minute"
    return f"expected start in ~{_round_duration(wait)}"


def _round_duration(seconds: float) -> str:
    m = seconds / 60
    if m < 5:
        return f"{max(1, round(m))}m"
    if m < 60:
        return f"{min(55, 5 * round(m / 5))}m" if round(m / 5) < 12 else "1h"
    if m < 180:
        q = 15 * round(m / 15)
        h, mm = divmod(q, 60)
        return f"{h}h" if mm == 0 else f"{h}h{mm:02d}m"
    h = seconds / 3600
    if h < 48:
        return f"{round(h)}h"
    return f"{round(h / 24)}d"


def summary(etas: Mapping[WorkloadKey, Eta]) -> dict[str, int]:
    """Counts per confidence word (for logs and the benchmark)."""
    out = {BOUNDED: 0, ESTIMATED: 0, UNKNOWN: 0}
    for e in etas.values():
        out[e.confidence] += 1
    return out
