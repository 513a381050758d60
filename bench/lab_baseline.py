#!/usr/bin/env python3
"""Kueue's baseline scenario through the real reconciler on the lab (issue 9, part 2).

    .venv/bin/python bench/lab_baseline.py                      # private lab, full baseline
    .venv/bin/python bench/lab_baseline.py --scale 0.05         # 5 % of each class: smoke run
    .venv/bin/python bench/lab_baseline.py --kubeconfig K --pykueue-pid PID   # your own setup

What it does, as Kueue's performance harness (test/performance/scheduler/runner) does:

1. a lab: ``--kubeconfig`` of a running one, else a private one started with hack/lab.py
   (state ``--lab-state``, ports from ``--port-base``; stopped at the end unless ``--keep``);
   the CRDs from manifests/crds;
2. pykueue: ``--pykueue-pid`` of a running one (sampled only), else ``pykueue serve`` started
   here against the lab (certificates in bench/out/lab-certs, leader election off, client
   QPS ``--qps``), stopped at the end;
3. the objects of the trace (``--trace``, default bench/scenarios/baseline.yaml): flavors,
   ClusterQueues, cohorts, namespaces and LocalQueues, their names prefixed with a run id;
4. the trace's Workloads (kueue.x-k8s.io/v1beta2, no Job) created at their arrival times
   (``--scale`` keeps that fraction of each class);
5. a watch on them: when one is admitted, it is marked Finished (a JSON patch adding the
   Finished condition) once its runtime has passed since the admission was seen; an
   eviction cancels that (the Workload runs its whole runtime again when re-admitted);
6. pykueue's CPU (utime + stime) and RSS sampled every second from /proc; kube-apiserver's
   ``apiserver_request_total`` read before and after, to count the requests by verb and
   resource;
7. the end: every Workload Finished, or ``--timeout`` seconds after the last create, or no
   Workload finished for ``--stall`` seconds (``completed``: false; ``unfinished`` lists up
   to 10 with the last conditions seen).

Prints one JSON document: ``wall_s`` (first create to last Finished), per class the average,
p50 and p95 time to admission (creation to the last admission seen, as Kueue's recorder) and
evictions, ``usage_pct`` (time-average of the ClusterQueues' usage from the admissions and
finishes seen, over the nominal quota), ``pykueue`` {cpu_s, cpu_pct, peak_rss_mb}, ``harness``
{create lag p50/p99, requests, errors}, ``apiserver_requests`` (top verb/resource counts) and
``apiserver_latency`` (their server-side mean and total time), ``other_cpu_s`` (CPU seconds of
the lab's processes and of this harness over the same window: where the machine's time went),
and the issue's targets: wall <= 175 s, time to admission small <= 100 s, medium <= 40 s, large
<= 10 s, usage >= 50 %, RSS <= 300 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.core.quantity import format_quantity  # noqa: E402
from app.sim.trace import US, Trace, load_trace  # noqa: E402

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
RUN_LABEL, CLASS_LABEL = "bench.pykueue.dev/run", "bench.pykueue.dev/class"
TARGETS = {"wall_s": 175, "small": 100, "medium": 40, "large": 10, "usage_pct": 50,
           "rss_mb": 300}


# ---- lab and pykueue processes ---------------------------------------------------------------

def lab_cmd(args: argparse.Namespace, *cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "hack" / "lab.py"), "--state-dir", str(args.lab_state),
         "--port-base", str(args.port_base), "--bin-dir", str(args.bin_dir), *cmd],
        text=True, capture_output=True, timeout=600)


def kubectl(args: argparse.Namespace, kubeconfig: Path, *cmd: str) -> str:
    r = subprocess.run([str(args.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), *cmd],
                       text=True, capture_output=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


def start_lab(args: argparse.Namespace) -> tuple[Path, bool]:
    if args.kubeconfig:
        return Path(args.kubeconfig), False
    started = False
    if lab_cmd(args, "status").returncode != 0:
        r = lab_cmd(args, "up")
        if lab_cmd(args, "status").returncode != 0:
            raise RuntimeError(f"lab up failed:\n{r.stdout}\n{r.stderr}")
        started = True
    kc = args.lab_state / "kubeconfig"
    kubectl(args, kc, "apply", "--server-side", "--force-conflicts", "-k",
            str(ROOT / "manifests" / "crds"))
    kubectl(args, kc, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    return kc, started


def start_pykueue(args: argparse.Namespace, kubeconfig: Path) -> subprocess.Popen[bytes]:
    certs = ROOT / "bench" / "out" / "lab-certs"
    if not (certs / "tls.crt").exists():
        subprocess.run([sys.executable, "-m", "certs.generate", "--out", str(certs)], cwd=ROOT,
                       check=True, capture_output=True, timeout=120)
    env = dict(os.environ)
    env.update({
        "PYKUEUE_CLIENT__KUBECONFIG": str(kubeconfig),
        "PYKUEUE_CLIENT__QPS": str(args.qps), "PYKUEUE_CLIENT__BURST": str(int(args.qps * 2)),
        "PYKUEUE_SERVER__PORT": str(args.pykueue_port),
        "PYKUEUE_SERVER__CERT_FILE": str(certs / "tls.crt"),
        "PYKUEUE_SERVER__KEY_FILE": str(certs / "tls.key"),
        "PYKUEUE_SERVER__CA_FILE": str(certs / "ca.crt"),
        "PYKUEUE_LEADER_ELECTION__ENABLED": "false",
    })
    log = open(ROOT / "bench" / "out" / "lab-baseline-pykueue.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "pykueue"), "serve", "--log-level",
                             "warning"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=ROOT)
    import ssl
    import urllib.request

    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("pykueue serve exited; see bench/out/lab-baseline-pykueue.log")
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{args.pykueue_port}/readyz",
                                        context=ctx, timeout=2) as r:  # noqa: S310
                if r.status == 200:
                    return proc
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    proc.terminate()
    raise RuntimeError("pykueue not ready after 90 s")


class ProcSampler:
    """CPU seconds (utime + stime) and RSS of one process from /proc, every second."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")
        self.cpu0 = self.cpu()
        self.rss_peak_kb = 0
        self.samples: list[tuple[float, float, int]] = []

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(") ", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.tick

    def rss_kb(self) -> tuple[int, int]:
        rss = hwm = 0
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
        return rss, hwm

    async def run(self) -> None:
        while True:
            try:
                rss, hwm = self.rss_kb()
                self.rss_peak_kb = max(self.rss_peak_kb, rss, hwm)
                self.samples.append((time.monotonic(), self.cpu() - self.cpu0, rss))
            except OSError:
                return
            await asyncio.sleep(1.0)


# ---- objects ---------------------------------------------------------------------------------

def objects(trace: Trace, run: str) -> tuple[list[dict], dict[str, str]]:
    """Cluster objects of the trace with run-prefixed names; returns (objects, ns map)."""
    p = f"b{run}-"
    labels = {RUN_LABEL: run}
    ns_map = {ns: f"{p}{ns}" for ns in trace.namespaces}
    out: list[dict] = [{"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": ns_map[ns], "labels": {**labels, **lbl}}}
                       for ns, lbl in trace.namespaces.items()]
    for f in trace.flavors:
        spec: dict[str, Any] = {}
        if f.node_labels:
            spec["nodeLabels"] = dict(f.node_labels)
        out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
                    "metadata": {"name": p + f.name, "labels": labels}, "spec": spec})
    for cq in trace.cluster_queues:
        groups = [{
            "coveredResources": list(g.covered_resources),
            "flavors": [{"name": p + f.name, "resources": [
                {"name": rq.name, "nominalQuota": format_quantity(rq.nominal, rq.name),
                 **({"borrowingLimit": format_quantity(rq.borrowing_limit, rq.name)}
                    if rq.borrowing_limit is not None else {}),
                 **({"lendingLimit": format_quantity(rq.lending_limit, rq.name)}
                    if rq.lending_limit is not None else {})}
                for rq in f.resources]} for f in g.flavors],
        } for g in cq.resource_groups]
        pre = cq.preemption
        spec = {"namespaceSelector": {}, "queueingStrategy": str(cq.queueing_strategy),
                "resourceGroups": groups,
                "preemption": {"withinClusterQueue": str(pre.within_cluster_queue),
                               "reclaimWithinCohort": str(pre.reclaim_within_cohort)}}
        if cq.cohort:
            spec["cohortName"] = p + cq.cohort
        out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue",
                    "metadata": {"name": p + cq.name, "labels": labels}, "spec": spec})
    for lq in trace.local_queues:
        out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
                    "metadata": {"name": lq.name, "namespace": ns_map[lq.namespace],
                                 "labels": labels},
                    "spec": {"clusterQueue": p + lq.cluster_queue}})
    return out, ns_map


def workload_object(sub: Any, ns: str, run: str) -> dict:
    wl = sub.workload
    ps = wl.pod_sets[0]
    requests = {r: format_quantity(v, r) for r, v in ps.requests.items()}
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
        "metadata": {"name": wl.name, "namespace": ns,
                     "labels": {RUN_LABEL: run, CLASS_LABEL: sub.class_name}},
        "spec": {"queueName": wl.queue_name, "priority": wl.priority, "podSets": [{
            "name": "main", "count": ps.count, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                                "resources": {"requests": requests}}]}}}]},
    }


def scaled(trace: Trace, scale: float) -> Trace:
    from dataclasses import replace

    if scale == 1.0:
        return trace
    return replace(trace, classes=[replace(c, count=max(1, round(c.count * scale)))
                                   for c in trace.classes])


# ---- the run -----------------------------------------------------------------------------------

@dataclass
class WState:
    key: str
    class_name: str
    cq: str
    request: dict[str, int]
    runtime: float
    created: float | None = None
    admitted_at: float | None = None  # last admission seen
    admitted: bool = False
    evictions: int = 0
    finished: float | None = None
    timer: asyncio.Task[None] | None = None
    last: str = ""  # the last state seen (for Workloads that never finish)


@dataclass
class Run:
    t0: float = 0.0
    states: dict[str, WState] = field(default_factory=dict)
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    integral: dict[str, dict[str, float]] = field(default_factory=dict)
    last_t: dict[str, float] = field(default_factory=dict)
    lags: list[float] = field(default_factory=list)
    requests: int = 0
    errors: list[str] = field(default_factory=list)
    last_finish: float = 0.0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def change(self, cq: str, req: dict[str, int], sign: int, now: float) -> None:
        u = self.usage.setdefault(cq, {})
        acc = self.integral.setdefault(cq, {})
        dt = now - self.last_t.get(cq, now)
        for r, v in u.items():
            acc[r] = acc.get(r, 0.0) + v * dt
        self.last_t[cq] = now
        for r, v in req.items():
            u[r] = u.get(r, 0) + sign * v


def _cond(obj: dict, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


async def harness(args: argparse.Namespace, kubeconfig: Path, trace: Trace, run_id: str,
                  sampler: ProcSampler) -> dict[str, Any]:
    from kubernetes_asyncio import client, config, watch
    from kubernetes_asyncio.client.exceptions import ApiException

    await config.load_kube_config(config_file=str(kubeconfig))
    api = client.ApiClient()
    api.configuration.connection_pool_maxsize = 64
    co = client.CustomObjectsApi(api)
    r = Run()
    objs, ns_map = objects(trace, run_id)
    p = f"b{run_id}-"
    subprocess.run([str(args.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "apply",
                    "-f", "-"], input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                  "items": objs}),
                   text=True, check=True, capture_output=True, timeout=300)
    subs = trace.submissions()
    lq_cq = {lq.key: p + lq.cluster_queue for lq in trace.local_queues}
    for s in subs:
        wl = s.workload
        key = f"{ns_map[wl.namespace]}/{wl.name}"
        ps = wl.pod_sets[0]
        r.states[key] = WState(key, s.class_name, lq_cq[f"{wl.namespace}/{wl.queue_name}"],
                               {k: v * ps.count for k, v in ps.requests.items()},
                               s.runtime_us / US)
    before = apiserver_counts(args, kubeconfig)
    procs = others(args)
    cpu_before = {k: proc_cpu(pid) for k, pid in procs.items()}
    sem = asyncio.Semaphore(args.concurrency)

    async def finish_later(st: WState, delay: float) -> None:
        await asyncio.sleep(delay)
        ns, name = st.key.split("/", 1)
        cond = {"type": "Finished", "status": "True", "reason": "Succeeded",
                "message": "bench: runtime elapsed since admission",
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            async with sem:
                r.requests += 1
                await co.patch_namespaced_custom_object_status(
                    GROUP, VERSION, ns, "workloads", name,
                    [{"op": "add", "path": "/status/conditions/-", "value": cond}])
        except ApiException as exc:
            r.errors.append(f"finish {st.key}: {exc.status}")

    def on_event(obj: dict, now: float) -> None:
        meta = obj["metadata"]
        st = r.states.get(f"{meta['namespace']}/{meta['name']}")
        if st is None or st.finished is not None:
            return
        status = obj.get("status") or {}
        st.last = "; ".join(
            f"{c.get('type')}={c.get('status')} ({c.get('reason')}: {c.get('message', '')[:120]})"
            for c in status.get("conditions") or []) + (
            f"; admission={status['admission'].get('clusterQueue')}"
            if status.get("admission") else "")
        if _cond(obj, "Finished"):
            st.finished = now
            if st.admitted:
                r.change(st.cq, st.request, -1, now)
                st.admitted = False
            r.last_finish = max(r.last_finish, now)
            if all(s.finished is not None for s in r.states.values()):
                r.done.set()
            return
        admitted = bool((obj.get("status") or {}).get("admission")) and _cond(obj, "QuotaReserved")
        evicted = _cond(obj, "Evicted")
        if admitted and not evicted and not st.admitted:
            st.admitted, st.admitted_at = True, now
            r.change(st.cq, st.request, +1, now)
            st.timer = asyncio.ensure_future(finish_later(st, st.runtime))
        elif st.admitted and (not admitted or evicted):
            if st.timer is not None:
                st.timer.cancel()
            st.evictions += 1
            st.admitted = False
            r.change(st.cq, st.request, -1, now)

    async def watcher() -> None:
        rv = None
        while not r.done.is_set():
            try:
                if rv is None:
                    lst = await co.list_cluster_custom_object(
                        GROUP, VERSION, "workloads", label_selector=f"{RUN_LABEL}={run_id}")
                    now = time.monotonic()
                    for obj in lst["items"]:
                        on_event(obj, now)
                    rv = lst["metadata"]["resourceVersion"]
                w = watch.Watch()
                async with w.stream(co.list_cluster_custom_object, GROUP, VERSION, "workloads",
                                    label_selector=f"{RUN_LABEL}={run_id}",
                                    resource_version=rv, timeout_seconds=60,
                                    allow_watch_bookmarks=True) as stream:
                    async for ev in stream:
                        obj = ev["object"]
                        rv = obj["metadata"]["resourceVersion"]
                        if ev["type"] in ("ADDED", "MODIFIED"):
                            on_event(obj, time.monotonic())
            except ApiException as exc:
                if exc.status == 410:
                    rv = None
                else:
                    r.errors.append(f"watch: {exc.status}")
                    await asyncio.sleep(1)

    async def create(s: Any) -> None:
        wl = s.workload
        ns = ns_map[wl.namespace]
        body = workload_object(s, ns, run_id)
        st = r.states[f"{ns}/{wl.name}"]
        async with sem:
            r.lags.append(time.monotonic() - (r.t0 + s.at_us / US))
            st.created = time.monotonic()
            try:
                r.requests += 1
                await co.create_namespaced_custom_object(GROUP, VERSION, ns, "workloads", body)
            except ApiException as exc:
                r.errors.append(f"create {st.key}: {exc.status}")

    wtask = asyncio.ensure_future(watcher())
    stask = asyncio.ensure_future(sampler.run())
    r.t0 = time.monotonic()
    creates = []
    for s in subs:
        delay = r.t0 + s.at_us / US - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        creates.append(asyncio.ensure_future(create(s)))
    await asyncio.gather(*creates)
    last_create = time.monotonic()
    while not r.done.is_set():
        now = time.monotonic()
        if now - last_create > args.timeout or now - max(r.last_finish, last_create) > args.stall:
            break
        await asyncio.sleep(0.5)
    completed = r.done.is_set()
    wtask.cancel()
    stask.cancel()
    after = apiserver_counts(args, kubeconfig)
    await api.close()
    out = summarize(r, trace, p, completed, sampler, before, after)
    cpu: dict[str, float | None] = {}
    for k, pid in procs.items():
        a, b = cpu_before.get(k), proc_cpu(pid)
        cpu[k] = None if a is None or b is None else round(b - a, 2)
    out["other_cpu_s"] = cpu  # same window as pykueue's cpu_s: creates to the end
    return out


def apiserver_counts(args: argparse.Namespace, kubeconfig: Path) -> dict[tuple[str, ...], float]:
    """kube-apiserver's ``apiserver_request_total`` summed by (verb, resource[/subresource]),
    and under ("seconds", verb, resource) the ``apiserver_request_duration_seconds_sum``: the
    time the API server spent serving those requests (server side)."""
    try:
        text = kubectl(args, kubeconfig, "get", "--raw", "/metrics")
    except (RuntimeError, subprocess.TimeoutExpired):
        return {}
    out: dict[tuple[str, ...], float] = {}
    pat = re.compile(r'^(apiserver_request_total|apiserver_request_duration_seconds_sum)'
                     r'\{([^}]*)\} ([0-9.e+]+)$')
    for line in text.splitlines():
        m = pat.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        k: tuple[str, ...] = (labels.get("verb", ""), labels.get("resource", "") +
                              (f"/{labels['subresource']}" if labels.get("subresource") else ""))
        if m.group(1) != "apiserver_request_total":
            k = ("seconds", *k)
        out[k] = out.get(k, 0.0) + float(m.group(3))
    return out


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[max(0, min(len(v) - 1, int(round(p / 100 * len(v))) - 1))]


def proc_cpu(pid: int) -> float | None:
    """CPU seconds (utime + stime) of a process, None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def others(args: argparse.Namespace) -> dict[str, int]:
    """The private lab's processes (pid files of hack/lab.py) and this harness."""
    out = {"harness": os.getpid()}
    pids = args.lab_state / "pids"
    if not args.kubeconfig and pids.is_dir():
        for f in sorted(pids.glob("*.pid")):
            try:
                out[f.stem] = int(f.read_text().strip())
            except (OSError, ValueError):
                continue
    return out


def summarize(r: Run, trace: Trace, prefix: str, completed: bool, sampler: ProcSampler,
              before: dict, after: dict) -> dict[str, Any]:
    classes: dict[str, dict[str, Any]] = {}
    waits: dict[str, list[float]] = {}
    for st in r.states.values():
        c = classes.setdefault(st.class_name, {"count": 0, "finished": 0, "evictions": 0})
        c["count"] += 1
        c["evictions"] += st.evictions
        c["finished"] += st.finished is not None
        if st.admitted_at is not None and st.created is not None:
            waits.setdefault(st.class_name, []).append(st.admitted_at - st.created)
    for name, c in classes.items():
        w = waits.get(name, [])
        c["avg_time_to_admission_s"] = round(sum(w) / len(w), 3) if w else None
        c["p50_time_to_admission_s"] = _pct(w, 50)
        c["p95_time_to_admission_s"] = _pct(w, 95)
    end = r.last_finish or time.monotonic()
    wall = end - r.t0
    nominal: dict[str, int] = {}
    used: dict[str, float] = {}
    for cq in trace.cluster_queues:
        for fr, q in cq.quotas.items():
            nominal[fr.resource] = nominal.get(fr.resource, 0) + q.nominal
        for res, v in r.integral.get(prefix + cq.name, {}).items():
            used[res] = used.get(res, 0.0) + v
    usage = {res: round(100 * used.get(res, 0.0) / wall / n, 2) for res, n in nominal.items()
             if n and wall > 0}
    cpu = sampler.samples[-1][1] if sampler.samples else 0.0
    diff = sorted(((after.get(k, 0) - before.get(k, 0), k) for k in after if len(k) == 2),
                  reverse=True)
    served = {k[1:]: after[k] - before.get(k, 0) for k in after if len(k) == 3}
    rss_mb = round(sampler.rss_peak_kb / 1024, 1)
    out = {
        "completed": completed,
        "workloads": len(r.states),
        "wall_s": round(wall, 2),
        "classes": dict(sorted(classes.items())),
        "usage_pct": usage,
        "pykueue": {"pid": sampler.pid, "cpu_s": round(cpu, 2),
                    "cpu_pct": round(100 * cpu / wall, 1) if wall > 0 else None,
                    "peak_rss_mb": rss_mb},
        "harness": {"create_lag_p50_s": _pct(r.lags, 50), "create_lag_p99_s": _pct(r.lags, 99),
                    "requests": r.requests, "errors": len(r.errors),
                    "first_errors": r.errors[:5]},
        "apiserver_requests": {f"{v} {res}": int(n) for n, (v, res) in diff[:12] if n > 0},
        # Server-side latency (apiserver_request_duration_seconds): mean ms per request and
        # total seconds, for the same top entries (watches excluded: they last the whole run).
        "apiserver_latency": {
            f"{v} {res}": {"mean_ms": round(1000 * served[(v, res)] / n, 2),
                           "total_s": round(served[(v, res)], 1)}
            for n, (v, res) in diff[:12] if n > 0 and v != "WATCH" and (v, res) in served},
        "unfinished": [{"workload": st.key, "class": st.class_name, "last": st.last}
                       for st in r.states.values() if st.finished is None][:10],
    }
    avg = {k: (classes.get(k) or {}).get("avg_time_to_admission_s") for k in
           ("small", "medium", "large")}
    out["targets"] = {**TARGETS, "met": {
        "wall": completed and wall <= TARGETS["wall_s"],
        **{k: v is not None and v <= TARGETS[k] for k, v in avg.items()},
        "usage": all(v >= TARGETS["usage_pct"] for v in usage.values()) and bool(usage),
        "rss": rss_mb <= TARGETS["rss_mb"],
    }}
    return out


def cleanup(args: argparse.Namespace, kubeconfig: Path, run_id: str) -> None:
    sel = f"{RUN_LABEL}={run_id}"
    for kind in ("namespaces", "localqueues.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io",
                 "resourceflavors.kueue.x-k8s.io"):
        subprocess.run([str(args.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "delete",
                        kind, "-A", "-l", sel, "--wait=false"], capture_output=True, timeout=300)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, default=ROOT / "bench" / "scenarios" / "baseline.yaml")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of each class's count")
    ap.add_argument("--kubeconfig", help="a running lab (default: start a private one)")
    ap.add_argument("--lab-state", type=Path, default=Path("/tmp/pykueue-bench-lab"))
    ap.add_argument("--port-base", type=int, default=16840)
    ap.add_argument("--bin-dir", type=Path, default=ROOT / ".k8sbin" / "current")
    ap.add_argument("--pykueue-pid", type=int, help="sample this pykueue instead of starting one")
    ap.add_argument("--pykueue-port", type=int, default=9643)
    ap.add_argument("--qps", type=float, default=200.0, help="pykueue's client QPS")
    ap.add_argument("--concurrency", type=int, default=32, help="harness requests in flight")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds after the last create")
    ap.add_argument("--stall", type=float, default=60.0,
                    help="give up when no Workload finished for this many seconds")
    ap.add_argument("--keep", action="store_true", help="keep the lab and the objects")
    args = ap.parse_args()
    (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
    trace = scaled(load_trace(args.trace), args.scale)
    kubeconfig, lab_started = start_lab(args)
    proc = None
    run_id = uuid.uuid4().hex[:6]
    try:
        if args.pykueue_pid:
            pid = args.pykueue_pid
        else:
            proc = start_pykueue(args, kubeconfig)
            pid = proc.pid
        result = asyncio.run(harness(args, kubeconfig, trace, run_id, ProcSampler(pid)))
        result.update({"trace": trace.name, "scale": args.scale, "run": run_id})
        print(json.dumps(result, indent=2))
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        if not args.keep:
            cleanup(args, kubeconfig, run_id)
            if lab_started:
                lab_cmd(args, "down")


if __name__ == "__main__":
    main()
