#!/usr/bin/env python3
"""Deep queues (issue 33 item 4): ``bench/versus.py`` on bench/scenarios/versus-deep.yaml,
scaled.

    .venv/bin/python bench/deep.py --runs kueue,pykueue                 # the file as it is
    .venv/bin/python bench/deep.py --per-cq 100 --cqs 2 --runs pykueue  # smaller
    .venv/bin/python bench/deep.py --per-cq 1000 -- --port-base 25000 --state-root /tmp/x

``--per-cq N``: Workloads per ClusterQueue (each workloads set's count scaled by
N / the file's total per ClusterQueue, at least 1); ``--cqs M``: ClusterQueues (the queues
set's count). The scaled config is written to ``<out>/generator.yaml`` and given to
bench/versus.py with ``--generator``; every other argument (after ``--`` or not recognised
here) goes to bench/versus.py as is. Its table then has, per run, admissions per minute, time
to admission per class and the quota that sat idle while Workloads that fit were pending
(bench/workload_watch.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEEP = ROOT / "bench" / "scenarios" / "versus-deep.yaml"


def scaled(cfg: dict, per_cq: int | None, cqs: int | None) -> dict:
    """``cfg`` (a generator config) with each queues set's ClusterQueue count set to ``cqs``
    and its workloads sets' counts scaled to ``per_cq`` Workloads per ClusterQueue."""
    for cs in cfg.get("cohorts") or []:
        for qs in cs.get("queuesSets") or []:
            if cqs:
                qs["count"] = cqs
            sets = qs.get("workloadsSets") or []
            total = sum(ws["count"] * len(ws.get("workloads") or [1]) for ws in sets)
            if per_cq and total:
                for ws in sets:
                    ws["count"] = max(1, round(ws["count"] * per_cq / total))
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-cq", type=int, help="Workloads per ClusterQueue")
    ap.add_argument("--cqs", type=int, help="ClusterQueues")
    ap.add_argument("--config", type=Path, default=DEEP)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "deep")
    a, rest = ap.parse_known_args()
    rest = [x for x in rest if x != "--"]
    cfg = scaled(yaml.safe_load(a.config.read_text()), a.per_cq, a.cqs)
    a.out.mkdir(parents=True, exist_ok=True)
    gen = a.out / "generator.yaml"
    gen.write_text(f"# {a.config.name} scaled by bench/deep.py (per-cq {a.per_cq}, "
                   f"cqs {a.cqs})\n" + yaml.safe_dump(cfg, sort_keys=False))
    cmd = [sys.executable, str(ROOT / "bench" / "versus.py"), "--generator", str(gen),
           "--out", str(a.out), *rest]
    print("deep: " + " ".join(cmd), file=sys.stderr, flush=True)
    os.execv(sys.executable, cmd)


if __name__ == "__main__":
    main()
