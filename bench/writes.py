#!/usr/bin/env python3
"""The API writes of a ``bench/versus.py --trace`` run, by purpose and per admission (issue 16:
"fewer API writes per admission").

    .venv/bin/python bench/writes.py OUT/pykueue-qps1000 [OUT/kueue-qps1000 ...] [--json F]

Reads, per run directory, ``workloads.jsonl`` (the Workload watch: every stored version, in
resourceVersion order) and ``events.jsonl`` (the Event watch), and ``../summary.json`` for
``apiserver_request_total`` by verb and resource (``api_requests_by_resource``). Each new
version of a Workload is one write; its purpose is read from what changed against the
previous version (first rule that holds):

* ``create``: a new Workload (the runner's POST);
* ``admission``: ``status.admission`` set (the controller's; ``admission_split`` counts the
  ones that set QuotaReserved=True without Admitted=True, to be followed by another write);
* ``released``: ``status.admission`` cleared, or QuotaReserved=False "Evicted by the test
  runner" (the runner plays the owner of an evicted one);
* ``finished``: Finished=True (the runner);
* ``eviction``: a new Evicted=True transition (the controller);
* ``pending/*``: the QuotaReserved=False condition changed without an admission (the
  controller's pending message), split into ``first`` (no QuotaReserved=False before),
  ``reason`` (condition reason changed), ``words`` (the message's words changed: the message
  with every number masked and the ETA tail cut differs), ``numbers`` (only numbers of the
  message changed), ``tail`` (only the ``position N, expected start in ~T`` tail changed);
* ``other``: anything else (e.g. Admitted or Requeued alone).

Events: ``ADDED`` is one POST, ``MODIFIED`` one PATCH/PUT (client-go's correlator counting a
repeat), counted by reason. Queue status: the ``patch``/``update``/``apply`` counts of
``clusterqueues/status``, ``localqueues/status`` and ``cohorts/status``.
Also every write by verb and resource of ``apiserver_request_total`` (every client: with
Kueue's runner, ``POST workloads`` and ``APPLY workloads/status`` are the runner's; pykueue
writes Workload status with ``PUT``). Per admission = count / number of ``admission`` writes.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from evictions import cond, events  # bench/ is on sys.path when run as a script

NUMBER = re.compile(r"\d+(\.\d+)?")
# Kueue's performance runner, playing the owner of an evicted Workload, writes this message.
RUNNER_MESSAGE = "Evicted by the test runner"
TAIL = re.compile(r"; (position \d+|expected start|start time unknown)")


def true(obj: dict[str, Any], t: str) -> bool:
    c = cond(obj, t)
    return bool(c) and c.get("status") == "True"


def watch(path: Path):
    """(arrival time, watch event) per line of a versus trace (none when absent)."""
    return events(path) if path.exists() else iter(())


def split_tail(message: str) -> tuple[str, str]:
    """(core message, ETA tail) of a pykueue pending message."""
    m = TAIL.search(message)
    return (message[:m.start()], message[m.start() + 2:]) if m else (message, "")


def pending_kind(old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    if old is None or old.get("status") != "False":
        return "first"
    if old.get("reason") != new.get("reason"):
        return "reason"
    (oc, ot), (nc, nt) = split_tail(old.get("message", "")), split_tail(new.get("message", ""))
    if oc != nc:
        return "numbers" if NUMBER.sub("#", oc) == NUMBER.sub("#", nc) else "words"
    return "tail" if ot != nt else "same"


def purpose(old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    if old is None:
        return "create"
    oa, na = (old.get("status") or {}).get("admission"), (new.get("status") or {}).get(
        "admission")
    if na and not oa:
        return "admission"
    if oa and not na:
        return "released"
    if true(new, "Finished") and not true(old, "Finished"):
        return "finished"
    oe, ne = cond(old, "Evicted") or {}, cond(new, "Evicted") or {}
    if ne.get("status") == "True" and (oe.get("status") != "True" or oe.get(
            "lastTransitionTime") != ne.get("lastTransitionTime")):
        return "eviction"
    oq, nq = cond(old, "QuotaReserved"), cond(new, "QuotaReserved")
    if nq is not None and str(nq.get("message", "")).startswith(RUNNER_MESSAGE):
        return "released"  # the runner's second write of a release
    if not na and nq is not None and nq.get("status") == "False" and (
            oq is None or (oq.get("status"), oq.get("reason"), oq.get("message"))
            != (nq.get("status"), nq.get("reason"), nq.get("message"))):
        return "pending/" + pending_kind(oq, nq)
    return "other"


def analyse(run: Path) -> dict[str, Any]:
    last: dict[str, dict[str, Any]] = {}
    wl: Counter[str] = Counter()
    split = 0
    for _t, ev in watch(run / "workloads.jsonl"):
        obj = ev["object"]
        uid = obj["metadata"].get("uid", obj["metadata"].get("name"))
        if ev["type"] == "DELETED":
            last.pop(uid, None)
            wl["deleted"] += 1
            continue
        prev = last.get(uid)
        if prev is not None and prev["metadata"].get("resourceVersion") == obj["metadata"].get(
                "resourceVersion"):
            continue  # the same version again (a resumed watch)
        p = purpose(prev, obj)
        wl[p] += 1
        if p == "admission" and not true(obj, "Admitted"):
            split += 1
        last[uid] = obj
    events: Counter[str] = Counter()
    for _t, ev in watch(run / "events.jsonl"):
        if ev["type"] == "DELETED":
            continue
        e = ev["object"]
        comp = e.get("reportingComponent") or (e.get("source") or {}).get("component") or "?"
        verb = "POST" if ev["type"] == "ADDED" else "PATCH"
        events[f"{verb} {comp} {e.get('reason')}"] += 1
    api: dict[str, int] = {}
    summary = run.parent / "summary.json"
    if summary.exists():
        doc = json.loads(summary.read_text())
        for r in doc.get("runs", doc) if isinstance(doc, dict) else doc:
            if r.get("run") == run.name:
                api = r.get("api_requests_by_resource") or {}
    queues = {k: n for k, n in api.items()
              if k.split(" ")[1] in ("clusterqueues/status", "localqueues/status",
                                     "cohorts/status") and k.split(" ")[0] != "get"}
    admissions = wl["admission"] or 1
    per = {k: round(n / admissions, 3) for k, n in sorted(wl.items())}
    return {"run": run.name, "admissions": wl["admission"], "admission_split": split,
            "workload_writes": dict(sorted(wl.items())), "workload_per_admission": per,
            "events": dict(sorted(events.items(), key=lambda kv: -kv[1])),
            "events_total": sum(events.values()),
            "events_per_admission": round(sum(events.values()) / admissions, 3),
            "queue_status_writes": queues,
            "queue_status_per_admission": round(sum(queues.values()) / admissions, 3),
            "api_writes": {k: n for k, n in api.items()
                           if k.split(" ")[0] in ("POST", "PUT", "PATCH", "APPLY", "DELETE")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out = [analyse(r) for r in args.runs]
    for r in out:
        print(f"{r['run']}: {r['admissions']} admissions "
              f"({r['admission_split']} without Admitted in the same write)")
        for k, n in r["workload_writes"].items():
            print(f"  workload {k:<18} {n:>7}  {r['workload_per_admission'][k]:>7.3f}/adm")
        print(f"  events total        {r['events_total']:>7}  "
              f"{r['events_per_admission']:>7.3f}/adm")
        for k, n in list(r["events"].items())[:12]:
            print(f"    {k:<48} {n:>6}")
        for k, n in r["queue_status_writes"].items():
            print(f"  queue {k:<32} {n:>7}")
        print(f"  queue status per admission {r['queue_status_per_admission']:.3f}")
        print("  API writes by verb and resource (every client, the runner's included):")
        for k, n in sorted(r["api_writes"].items(), key=lambda kv: -kv[1]):
            print(f"    {k:<40} {n:>7}  {n / (r['admissions'] or 1):>7.3f}/adm")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
