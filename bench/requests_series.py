#!/usr/bin/env python3
"""Write requests a minute, by resource, from ``bench/versus.py --requests-every S``'s
``<out>/<run>/requests.jsonl`` (issue 33: where a controller's write budget goes while the
runner creates Workloads).

    .venv/bin/python bench/requests_series.py OUT/pykueue/requests.jsonl [--top 6]

Prints one row per recorded interval: seconds into the run, then requests a second over that
interval for the ``--top`` write kinds (POST, PUT, PATCH, APPLY, DELETE by resource) with the
most requests over the whole file, and the rest as ``other writes``. Counts are the API
server's (``apiserver_request_total``): every client's, the runner's included.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

WRITES = ("POST", "PUT", "PATCH", "APPLY", "DELETE")


def series(path: Path, top: int) -> tuple[list[str], list[tuple[float, list[float]]]]:
    """(column names, rows of (t, rates a second)) from one ``requests.jsonl``."""
    points = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not points:
        return [], []
    last = points[-1]["requests"]
    kinds = sorted((k for k in last if k.split(" ", 1)[0] in WRITES), key=lambda k: -last[k])
    cols = kinds[:top]
    rows = []
    prev_t, prev = 0.0, {}
    for p in points:
        dt = p["t"] - prev_t
        if dt <= 0:
            continue
        cur = p["requests"]
        delta = {k: cur.get(k, 0) - prev.get(k, 0) for k in kinds}
        rest = sum(v for k, v in delta.items() if k not in cols)
        rows.append((p["t"], [delta[k] / dt for k in cols] + [rest / dt]))
        prev_t, prev = p["t"], cur
    return cols + ["other writes"], rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--top", type=int, default=6)
    a = ap.parse_args()
    cols, rows = series(a.path, a.top)
    print("t_s\t" + "\t".join(cols))
    for t, vals in rows:
        print(f"{t:.0f}\t" + "\t".join(f"{v:.1f}" for v in vals))


if __name__ == "__main__":
    main()
