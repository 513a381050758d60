"""Benchmark: how close is the ETA given at submission to the real start? JSON on stdout.

Replays simulator traces (``app/sim/engine.py``, the core on a virtual clock). When a
sampled Workload has arrived and the instant's cycles are over, and it is still pending,
its ETA is computed from the simulator's own state (``app.core.eta.estimate`` on the live
``Scheduler``: the fork leaves it untouched); at the end it is compared with the Workload's
real first admission. Error = |ETA wait - real wait| / real wait, over the Workloads that
waited (those admitted at their arrival instant get no ETA: nothing to predict).

Traces and runtime knowledge:

- ``baseline``: Kueue's baseline scenario (bench/scenarios/baseline.yaml: 30 ClusterQueues,
  15,000 Workloads arriving over a minute, preemption by priority). ``limit=runtime``: every
  Workload's ``maximumExecutionTimeSeconds`` equals its runtime (all ETAs bounded).
- ``gpu-teams``: generated here (seeded): one cohort of three GPU teams (research 8 GPUs,
  training 16, inference 8, borrowing allowed), 600 Workloads of 1-8 GPUs arriving as a
  Poisson stream over ~20 h, runtimes lognormal (median 20 min, sigma 1.2: a heavy tail,
  p99 ~ 5 h). Variants: ``limit=runtime``; ``limit=2x-median`` (limits are what users write:
  a runtime draw above the limit is cut at it, so each job still ends by its limit, but
  most end well before); ``learned`` (no limits: the decayed median of the finished runs of
  the same LocalQueue and shape, learned as the replay goes).

``+arrivals`` variants (what pykueue does by default) project arrivals into each run
(``ArrivalModel`` with the default ``scheduling.eta_arrivals_window_seconds``, 3600 s, on
both traces: nothing is tuned per trace): the streams of higher priority than some pending
Workload go on at their recent rate for as long as each has gone on, then stop, and the
run goes on until every Workload has a start. On the baseline the small jobs (lowest
priority) wait for the higher-priority streams to end (at 50 and 60 s), which no model of
the past can date exactly: the ETA of a small job submitted at t says those streams end at
about 2t (early for t < 25 s, late after 30 s); the medium jobs' ETAs are exact.

Last results (a random 1 in 50 / 1 in 2 of the arrivals, every one that waited, ``unknown``
counted as a miss; median / p90): gpu-teams limit=runtime 0.225 / 0.62 without projection,
0.217 / 0.63 with it (0 unknown; the former fixed horizon: 12 unknown, 0.19); baseline
limit=runtime 0.83 / 0.97 without (early for 270 of 275), 0.35 / 0.88 with it (0 unknown;
medium 0.00, small 0.51; the former fixed horizon: 200 of 275 unknown). The issue's target
(median within 25 %) is met on gpu-teams, not on the baseline: its small jobs wait for
bursts to end, which the model dates at twice their age when seen.
With Gott's 50% interval (``RangedRun``, 2026-12-01): the same medians; coverage (real
start inside the range) 0.65 on the baseline, 0.68 on its held-out variant, 0.17 / 0.12 on
gpu-teams and its held-out seed 16 (0.094 / 0.685 there); ``--pool-shapes``: no gain.
More in docs/status.md ("ETA").

Each variant prints the count of ETAs, the confidence words given, median / p90 error over
the ETAs given, the median counting each ``unknown`` as a miss (null when half or more are
unknown), that median per workload class (baseline: small, medium, large; gpu-teams: g1,
g2, g4, g8 GPUs), and the cost of the ETA runs (median / max ms, unbudgeted).

Held-out traces (``--held-out`` or ``--only held-out``; limit=runtime only): gpu-teams with
``--held-out-seed`` (16) and the baseline with other stream lengths (``HELD_OUT_COUNTS``),
to check that a change is not fitted to the developed traces. Each variant with projected
arrivals also prints ``ranges`` (ETAs with Gott's interval) and ``range_coverage``.

    .venv/bin/python bench/eta_accuracy.py [--every 50] [--only gpu-teams|baseline|held-out]
        [--held-out] [--projected-only] [--limit-runtime-only] [--pool-shapes] [--no-arrivals]
        [--window 3600]
    (about 70 s on a quiet machine with --no-arrivals; the baseline's +arrivals run is
    the slow one: each ETA run carries up to ~600 projected Workloads per cohort)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.config import SchedulingSettings  # noqa: E402
from app.core.eta import ArrivalModel, RuntimeModel, estimate  # noqa: E402
from app.core.types import WorkloadKey  # noqa: E402
from app.sim.engine import Simulator  # noqa: E402
from app.sim.trace import US, Submission, Trace, parse_trace  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class EtaProbe(Simulator):
    """The simulator, plus: Workloads get a time limit from ``limit_of`` at arrival; each
    arrival is sampled with probability ``1 / every`` (seeded: the same Workloads in every
    variant) and, if still pending when its instant settles, gets an ETA; finished runs
    teach ``model``. Random, not every N-th: the baseline's arrivals follow a fixed pattern
    (0.1 / 0.5 / 1.2 s per class), and every 50th arrival over-sampled the medium class
    (95 of 252 Workloads that waited, against ~22% of them)."""

    def __init__(self, trace: Trace, *, limit_of, every: int, model: RuntimeModel,
                 arrivals: ArrivalModel | None = None) -> None:
        super().__init__(trace)
        self.arrivals = arrivals
        self.limit_of = limit_of
        self.every = every
        self.rng = random.Random(f"eta-sample-{every}")
        self.model = model
        self.arrived: list[WorkloadKey] = []
        self.seen = 0
        # key -> (start, confidence, earliest, latest); NaN: none (latest: no later bound)
        self.etas: dict[WorkloadKey, tuple[float, str, float, float]] = {}
        self.eta_ms: list[float] = []

    def _arrive(self, s: Submission) -> None:
        limit = self.limit_of(s)
        wl = replace(s.workload, max_execution_seconds=limit)
        super()._arrive(replace(s, workload=wl))
        if self.arrivals is not None:
            self.arrivals.observe(wl)
        self.seen += 1
        if self.rng.random() * self.every < 1:
            self.arrived.append(s.workload.key)

    def _finish(self, t: int, key: WorkloadKey, run: int) -> None:
        r = self.runs[key]
        wl = self._wls.get(key)
        if wl is not None and r.run == run and r.finished_us is None \
                and r.last_admitted_us is not None:
            self.model.observe(wl, (t - r.last_admitted_us) / US)
        super()._finish(t, key, run)

    def _sample(self, t: int) -> None:
        super()._sample(t)
        arrived, self.arrived = self.arrived, []
        done: set = set()
        for key in arrived:
            info = self.cluster.workload(key)
            if info is None or info.state != "pending" or info.cluster_queue is None:
                continue
            if key in done:
                continue
            run = estimate(self.cluster, info.cluster_queue, t / US, self.model,
                           clock=time.perf_counter, arrivals=self.arrivals)
            self.eta_ms.append(run.ms)
            for k in arrived:  # one run answers every sampled arrival of the cohort
                e = run.etas.get(k)
                if e is not None and k not in self.etas:
                    nan = math.nan
                    self.etas[k] = (
                        e.start if e.start is not None else nan, e.confidence,
                        e.earliest if e.earliest is not None else nan,
                        e.latest if e.latest is not None else
                        (math.inf if e.earliest is not None else nan))
                    done.add(k)


def evaluate(trace: Trace, *, limit_of, every: int, arrivals: ArrivalModel | None = None,
             ) -> dict:
    sim = EtaProbe(trace, limit_of=limit_of, every=every, model=RuntimeModel(),
                   arrivals=arrivals).run()
    errors, words = [], {"bounded": 0, "estimated": 0, "unknown": 0}
    by_class: dict[str, list[float]] = {}  # workload class -> errors, unknown as inf
    late = early = unknown_waited = 0
    inside = ranged = 0  # Gott's 50% interval: how often the real start falls inside
    for key, (start, word, lo, hi) in sim.etas.items():
        words[word] += 1
        r = sim.runs[key]
        if r.first_admitted_us is None:
            continue
        if math.isnan(start):
            if r.first_admitted_us > r.created_us:
                unknown_waited += 1
                by_class.setdefault(r.class_name, []).append(math.inf)
            continue
        real = (r.first_admitted_us - r.created_us) / US
        predicted = start - r.created_us / US
        if real <= 0:
            continue
        if not math.isnan(lo):
            ranged += 1
            inside += lo - 1e-6 <= r.first_admitted_us / US <= hi + 1e-6
        errors.append(abs(predicted - real) / real)
        by_class.setdefault(r.class_name, []).append(errors[-1])
        late += predicted > real
        early += predicted < real
    errors.sort()
    # The same median with every unknown ETA (of a Workload that waited) counted as a miss
    # (an infinite error): None when half or more of them are unknown.
    both = errors + [math.inf] * unknown_waited
    strict = statistics.median(both) if both else None
    return {
        "etas": len(sim.etas),
        "confidence": words,
        "compared": len(errors),
        "median_rel_error": round(statistics.median(errors), 3) if errors else None,
        "p90_rel_error": round(errors[int(0.9 * (len(errors) - 1))], 3) if errors else None,
        "unknown_that_waited": unknown_waited,
        "median_rel_error_unknown_as_miss": (
            round(strict, 3) if strict is not None and math.isfinite(strict) else None),
        "median_by_class_unknown_as_miss": {
            k: (round(m, 3) if math.isfinite(m := statistics.median(v)) else None)
            for k, v in sorted(by_class.items())},
        "ranges": ranged,
        "range_coverage": round(inside / ranged, 3) if ranged else None,
        "eta_later_than_real": late,
        "eta_earlier_than_real": early,
        "eta_run_ms": {"median": round(statistics.median(sim.eta_ms), 2) if sim.eta_ms else 0,
                       "max": round(max(sim.eta_ms), 2) if sim.eta_ms else 0},
    }


def gpu_teams(seed: int = 15, n: int = 600) -> Trace:
    """The generated GPU-team trace (see the module doc); the same ``seed`` gives the same
    trace."""
    rng = random.Random(seed)
    teams = {"research": 8, "training": 16, "inference": 8}
    cqs = []
    for name, gpus in teams.items():
        cqs.append(f"""
      - name: {name}
        namespace: {name}
        preemption: {{withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}}
        namespaceSelector: {{}}
        resourceGroups:
          - coveredResources: [nvidia.com/gpu]
            flavors:
              - name: a100
                resources: [{{name: nvidia.com/gpu, nominalQuota: {gpus}, borrowingLimit: 8}}]""")
    arrivals = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(1 / 120)  # one every 2 min on average
        team = rng.choices(list(teams), weights=(3, 2, 3))[0]
        gpus = rng.choice((1, 1, 1, 2, 2, 4, 8))
        runtime = max(30.0, rng.lognormvariate(math.log(1200), 1.2))
        prio = 10 if team == "inference" else 0
        arrivals.append(
            f"  - {{at: {t:.1f}, name: {team}-{i}, class: g{gpus}, localQueue: {team}/{team}, "
            f"request: {{nvidia.com/gpu: {gpus}}}, runtime: {runtime:.1f}, priority: {prio}}}")
    text = ("name: gpu-teams\nflavors:\n  - name: a100\ncohorts:\n  - name: gpus\n"
            "    clusterQueues:" + "".join(cqs) + "\narrivals:\n" + "\n".join(arrivals) + "\n")
    return parse_trace(text, "gpu-teams")


HELD_OUT_COUNTS = {"small": 500, "medium": 60, "large": 70}


def baseline_variant(counts: dict[str, int] | None = None) -> Trace:
    """Kueue's baseline scenario, or (``counts``: class -> Workloads per ClusterQueue) the
    same with other stream lengths: a class's stream lasts ``count x interval``. The
    held-out variant (``HELD_OUT_COUNTS``) ends the small stream at 50 s (was 35 s), the
    medium at 30 s (was 50 s) and the large at 84 s (was 60 s): the order of the ends
    changes, so a model fitted to the baseline's ends would show it."""
    text = (ROOT / "bench/scenarios/baseline.yaml").read_text()
    for cls, n in (counts or {}).items():
        text, k = re.subn(rf"(class: {cls}, count: )\d+", rf"\g<1>{n}", text)
        assert k == 1, cls
    name = "baseline" if not counts else "baseline-held-out"
    return parse_trace(text, name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=50,
                    help="baseline: ETA for 1 in N arrivals, sampled at random (gpu-teams: "
                         "1 in N/25)")
    ap.add_argument("--only", choices=("baseline", "gpu-teams", "held-out"),
                    help="one trace family; held-out: the traces nothing was developed on "
                         "(gpu-teams with --held-out-seed, the baseline with other stream "
                         "lengths: baseline_variant)")
    ap.add_argument("--held-out", action="store_true",
                    help="also run the held-out traces (see --only held-out)")
    ap.add_argument("--held-out-seed", type=int, default=16,
                    help="seed of the held-out gpu-teams trace (the developed one is 15)")
    ap.add_argument("--pool-shapes", action="store_true",
                    help="ArrivalModel(pool_shapes=True): a stream per (LocalQueue, "
                         "priority) whose arrivals take the shapes of its recent mix")
    ap.add_argument("--projected-only", action="store_true",
                    help="only the variants with projected arrivals (pykueue's default)")
    ap.add_argument("--limit-runtime-only", action="store_true",
                    help="only the limit=runtime variants (the ones the target is about)")
    ap.add_argument("--no-arrivals", dest="arrivals", action="store_false",
                    help="skip the variants with projected arrivals (ArrivalModel, slow)")
    ap.add_argument("--window", type=float,
                    default=SchedulingSettings().eta_arrivals_window_seconds,
                    help="ArrivalModel window, seconds (default: the setting's default)")
    a = ap.parse_args()
    out: dict = {}

    def exact(s: Submission) -> float:
        return s.runtime_us / US

    def variants(trace: Trace, every: int, **limits) -> dict:
        """Each ``name=limit_of`` without projected arrivals, then with them (the setting's
        default window, the same for every trace: nothing here is tuned per trace)."""
        got = {} if a.projected_only else {
            name: evaluate(trace, limit_of=lim, every=every) for name, lim in limits.items()}
        if a.arrivals and a.window > 0:
            for name, lim in limits.items():
                model = ArrivalModel(window_seconds=a.window, pool_shapes=a.pool_shapes)
                got[f"{name}+arrivals"] = evaluate(trace, limit_of=lim, every=every,
                                                   arrivals=model)
        return got

    every_gpu = max(1, a.every // 25)
    if a.only in (None, "gpu-teams"):
        trace = gpu_teams()
        if a.limit_runtime_only:
            out["gpu-teams"] = variants(trace, every_gpu, **{"limit=runtime": exact})
        else:
            median = statistics.median(s.runtime_us / US for s in trace.submissions())
            cut = 2 * median

            def cut_trace(tr: Trace) -> Trace:
                # Each job is stopped at its limit (2 x the median runtime) as Kueue would.
                subs = [replace(s, runtime_us=min(s.runtime_us, int(cut * US)))
                        for s in tr.submissions()]
                clone = replace(tr)  # a shallow copy whose submissions() returns the cut runs
                clone.submissions = lambda: subs  # type: ignore[method-assign]
                return clone

            out["gpu-teams"] = variants(trace, every_gpu, **{"limit=runtime": exact,
                                                             "learned": lambda s: None})
            out["gpu-teams"].update(variants(cut_trace(trace), every_gpu,
                                             **{"limit=2x-median": lambda s: cut}))
    if a.only in (None, "baseline"):
        out["baseline"] = variants(baseline_variant(), a.every, **{"limit=runtime": exact})
    if a.only == "held-out" or a.held_out:
        # Only limit=runtime: the traces exist to check that a change is not fitted to the
        # developed ones, on the variant the target is about.
        out[f"gpu-teams-seed{a.held_out_seed}"] = variants(
            gpu_teams(seed=a.held_out_seed), every_gpu, **{"limit=runtime": exact})
        out["baseline-held-out"] = variants(baseline_variant(HELD_OUT_COUNTS), a.every,
                                            **{"limit=runtime": exact})
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
