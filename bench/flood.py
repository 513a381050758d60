#!/usr/bin/env python3
"""One tenant's flood against another team's Job, through the webhook, on a private lab.

    .venv/bin/python bench/flood.py                          # 3,000 Jobs, 16 at a time
    .venv/bin/python bench/flood.py --jobs 600               # a shorter run
    .venv/bin/python bench/flood.py --source /tmp/before     # the `app` of another checkout
    .venv/bin/python bench/flood.py --reclaim --jobs 1200    # the probe reclaims by preemption

What it does (loopback only: the lab's kube-apiserver and pykueue on 127.0.0.1):

1. a private lab (hack/lab.py, state ``--lab-state``, ports from ``--port-base``; pykueue's
   webhook and extender on port base + 5) with pykueue started as ``make pykueue-up`` starts it
   (its ServiceAccount, webhooks and kube-scheduler extender registered, default client QPS 50 /
   burst 100); ``--source DIR`` puts DIR first on pykueue's PYTHONPATH (an older checkout from
   ``git archive``, for the before figures). The lab is stopped and removed at the end unless
   ``--keep``;
2. one ResourceFlavor on the lab's A100 node, ClusterQueues ``team-a-cq`` and ``team-b-cq`` of 4
   GPUs each in one cohort (no borrowing, so team-b's probe always fits its nominal quota) and a
   LocalQueue in each of the namespaces ``team-a`` and ``team-b``;
3. an idle probe: a 2-GPU team-b Job (2 pods, parallelism 2, kept running) with nothing else
   queued;
4. the flood: ``--jobs`` one-GPU team-a Jobs created ``--parallel`` at a time (each pod
   succeeds 3 s after it starts, kwok's stage for Job pods, so team-a's 4 GPUs keep turning
   over); meanwhile a probe starts every ``--probe-every`` seconds (the next one once the
   previous was measured and deleted), and one more after the last create;
5. per probe, from the bench's watches of team-b's Workloads and Jobs: create -> Workload
   exists -> admitted (Admitted=True) -> unsuspended (``spec.suspend`` false), seconds, or
   null when not seen within ``--probe-timeout``; each probe is deleted (its Workload gone)
   before the next starts;
6. pykueue's CPU seconds and RSS (VmRSS peak and VmHWM) from /proc over the flood, the time the
   creates took, and when team-a's last Workload appeared (all of them created by pykueue).

``--reclaim``: the probe needs preemption. team-a's ClusterQueue may borrow (no
``borrowingLimit``), team-b's has ``preemption.reclaimWithinCohort: Any`` (Kueue v1beta2);
before the idle probe team-a runs 8 one-GPU Jobs (its 4 GPUs and team-b's idle 4), and
team-a's flood Jobs keep running too, so team-a borrows team-b's quota whenever a probe
starts (the bench waits, at most ``--probe-timeout``, until team-a holds 8 GPUs again). Each
probe then reclaims 2 GPUs: per probe also the seconds to its victims' eviction
(Evicted=True on team-a Workloads), their Jobs stopped (``spec.suspend`` true), their pods
gone (deleted or terminal), their Jobs' ``status.active`` 0 (kube-controller-manager's Job
controller) and their quota released (no ``status.admission``), the last victim's each.

Prints one JSON document (also written to ``bench/out/flood/<label>.json``) with ``probes``
(idle first), their p50 / max per step, and the goal: every flood probe admitted within 5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "flood"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
A100 = "NVIDIA-A100-SXM4-80GB"
GOAL_ADMITTED_S = 5.0
RECLAIM_HOLD = 8  # --reclaim: team-a's GPUs in use when a probe starts (its 4 and team-b's 4)
RECLAIM_STEPS = ("evicted", "stopped", "pods_gone", "job_inactive", "released")


# ---- the lab ---------------------------------------------------------------------------------

class Lab:
    """A private lab (hack/lab.py) with pykueue up; kubectl on its admin kubeconfig."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.state, self.port_base, self.bin_dir = args.lab_state, args.port_base, args.bin_dir
        self.kubeconfig = self.state / "kubeconfig"
        self.server = f"https://127.0.0.1:{self.port_base + 3}"
        self.env = {**os.environ, "LAB_STATE_DIR": str(self.state),
                    "LAB_PORT_BASE": str(self.port_base), "LAB_BIN_DIR": str(self.bin_dir),
                    "PYKUEUE_PORT": str(self.port_base + 5)}
        if args.source is not None:
            self.env["PYTHONPATH"] = str(args.source.resolve())

    def lab(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([sys.executable, str(ROOT / "hack" / "lab.py"), *cmd], env=self.env,
                           text=True, capture_output=True, timeout=900, cwd=ROOT)
        if check and r.returncode != 0:
            raise RuntimeError(f"lab {' '.join(cmd)}: {r.stdout}\n{r.stderr}")
        return r

    def kubectl(self, *cmd: str, input: str | None = None) -> str:
        r = subprocess.run([str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig),
                            *cmd], input=input, text=True, capture_output=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(cmd)}: {r.stderr.strip()}")
        return r.stdout

    def pykueue_pid(self) -> int:
        return int((self.state / "pids" / "pykueue.pid").read_text().strip())

    def ssl_context(self) -> ssl.SSLContext:
        pki = self.state / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return ctx


def queue_objects(reclaim: bool = False) -> list[dict[str, Any]]:
    """The flavor, two ClusterQueues of 4 GPUs in one cohort, namespaces and LocalQueues.
    ``reclaim``: team-a may borrow team-b's quota and team-b reclaims it by preemption."""
    kq = f"{GROUP}/{VERSION}"
    out: list[dict[str, Any]] = [{
        "apiVersion": kq, "kind": "ResourceFlavor", "metadata": {"name": "a100-flavor"},
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": A100},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                  "effect": "NoSchedule"}]}}]
    for team in ("team-a", "team-b"):
        gpus: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": 4}
        if not (reclaim and team == "team-a"):
            gpus["borrowingLimit"] = 0
        spec: dict[str, Any] = {
            "namespaceSelector": {}, "cohortName": "flood", "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "a100-flavor", "resources": [gpus]}]}]}
        if reclaim and team == "team-b":
            spec["preemption"] = {"reclaimWithinCohort": "Any"}
        out += [
            {"apiVersion": kq, "kind": "ClusterQueue", "metadata": {"name": f"{team}-cq"},
             "spec": spec},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}},
            {"apiVersion": kq, "kind": "LocalQueue",
             "metadata": {"name": "lq", "namespace": team},
             "spec": {"clusterQueue": f"{team}-cq"}},
        ]
    return out


def job(ns: str, name: str, gpus_per_pod: int, pods: int, *, keep_running: bool) -> dict:
    annotations = {"lab.pykueue.dev/run-duration": "1h"} if keep_running else {}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_LABEL: "lq"}},
        "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                 "template": {"metadata": {"annotations": annotations}, "spec": {
                     "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": {
                                         "nvidia.com/gpu": str(gpus_per_pod)}}}]}}},
    }


# ---- measuring -------------------------------------------------------------------------------

def _true(obj: dict, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


class Probes:
    """What the bench's watches saw: per team-b Job the times (monotonic) its Workload
    appeared, was admitted, and the Job was unsuspended; team-a's Workload count."""

    def __init__(self) -> None:
        self.created: dict[str, float] = {}
        self.workload: dict[str, float] = {}
        self.admitted: dict[str, float] = {}
        self.unsuspended: dict[str, float] = {}
        self.workload_gone: dict[str, float] = {}
        self.team_a_workloads: set[str] = set()
        self.team_a_last_workload = 0.0
        # --reclaim: team-a's Workloads holding quota, and per team-a Workload / Job the
        # times of the last eviction, quota release, stop and pods gone.
        self.team_a_holding: set[str] = set()
        self.evictions: list[tuple[float, str]] = []
        self.evicted_now: set[str] = set()
        self.released: dict[str, float] = {}
        self.job_of: dict[str, str] = {}
        self.stopped: dict[str, float] = {}
        self.inactive: dict[str, float] = {}  # suspended and status.active 0 (the Job controller)
        self.pods: dict[str, set[str]] = {}
        self.pods_gone: dict[str, float] = {}
        self.changed = asyncio.Event()

    def on_workload(self, etype: str, obj: dict, now: float) -> None:
        meta = obj["metadata"]
        if meta.get("namespace") == "team-a":
            name = meta["name"]
            if etype == "ADDED" and name not in self.team_a_workloads:
                self.team_a_workloads.add(name)
                self.team_a_last_workload = now
            self._team_a(etype, name, obj, now)
            return
        if meta.get("namespace") != "team-b":
            return
        owner = next((o["name"] for o in meta.get("ownerReferences") or []
                      if o.get("kind") == "Job"), None)
        if owner is None:
            return
        if etype == "DELETED":
            self.workload_gone.setdefault(owner, now)
        else:
            self.workload.setdefault(owner, now)
            if _true(obj, "Admitted"):
                self.admitted.setdefault(owner, now)
        self.changed.set()

    def _team_a(self, etype: str, name: str, obj: dict, now: float) -> None:
        holds = etype != "DELETED" and bool((obj.get("status") or {}).get("admission")) \
            and not _true(obj, "Finished")
        if holds:
            self.team_a_holding.add(name)
        elif name in self.team_a_holding:
            self.team_a_holding.discard(name)
            self.released[name] = now
        if _true(obj, "Evicted") and holds:
            if name not in self.evicted_now:
                self.evicted_now.add(name)
                self.evictions.append((now, name))
        else:
            self.evicted_now.discard(name)
        job = next((o["name"] for o in obj["metadata"].get("ownerReferences") or []
                    if o.get("kind") == "Job"), None)
        if job is not None:
            self.job_of[name] = job

    def on_team_a_job(self, etype: str, obj: dict, now: float) -> None:
        name = obj["metadata"]["name"]
        if etype != "DELETED" and (obj.get("spec") or {}).get("suspend") is True:
            self.stopped.setdefault(name, now)
            if not (obj.get("status") or {}).get("active"):
                self.inactive.setdefault(name, now)
        else:
            self.stopped.pop(name, None)
            self.inactive.pop(name, None)

    def on_team_a_pod(self, etype: str, obj: dict, now: float) -> None:
        job = (obj["metadata"].get("labels") or {}).get("job-name")
        if job is None:
            return
        live = self.pods.setdefault(job, set())
        phase = (obj.get("status") or {}).get("phase")
        if etype == "DELETED" or phase in ("Succeeded", "Failed") \
                or obj["metadata"].get("deletionTimestamp"):
            if obj["metadata"]["name"] in live:
                live.discard(obj["metadata"]["name"])
                if not live:
                    self.pods_gone[job] = now
        else:
            live.add(obj["metadata"]["name"])
            self.pods_gone.pop(job, None)

    def victims(self, since: float) -> dict[str, Any]:
        """The team-a Workloads evicted from ``since`` on, and the seconds from ``since`` to
        the last one's eviction, Job stop, pods gone and quota release (None when a step
        was not seen for every victim, or there was no victim). A victim whose Job had not
        started yet (suspended, no pod) counts as stopped and without pods at its eviction."""
        steps: dict[str, list[float | None]] = {
            "evicted_s": [], "stopped_s": [], "pods_gone_s": [], "job_inactive_s": [],
            "released_s": []}
        for at, wl in self.evictions:
            if at < since:
                continue
            job = self.job_of.get(wl, "")
            stopped = self.stopped.get(job)
            gone = None if self.pods.get(job) else self.pods_gone.get(job, at)
            steps["evicted_s"].append(at)
            steps["stopped_s"].append(None if stopped is None else max(stopped, at))
            steps["pods_gone_s"].append(None if gone is None else max(gone, at))
            inactive = self.inactive.get(job)
            steps["job_inactive_s"].append(None if inactive is None else max(inactive, at))
            steps["released_s"].append(self.released.get(wl))

        def last(times: list[float | None]) -> float | None:
            if not times or any(t is None for t in times):
                return None
            return round(max(t for t in times if t is not None) - since, 3)
        return {"victims": len(steps["evicted_s"]),
                **{step: last(times) for step, times in steps.items()}}

    def on_job(self, etype: str, obj: dict, now: float) -> None:
        name = obj["metadata"]["name"]
        if etype != "DELETED" and (obj.get("spec") or {}).get("suspend") is False \
                and name in self.created:
            self.unsuspended.setdefault(name, now)
            self.changed.set()

    def result(self, name: str, at: float) -> dict[str, Any]:
        t0 = self.created[name]

        def since(d: dict[str, float]) -> float | None:
            return round(d[name] - t0, 3) if name in d else None
        return {"job": name, "at_s": round(at, 1), "workload_s": since(self.workload),
                "admitted_s": since(self.admitted), "unsuspended_s": since(self.unsuspended)}


async def watch(session: aiohttp.ClientSession, server: str, path: str,
                handle: Any, stop: asyncio.Event) -> None:
    """List + watch ``path``, calling ``handle(type, object, monotonic time)``; re-watches
    from the last resourceVersion (relists on 410) until ``stop``."""
    rv = ""
    while not stop.is_set():
        try:
            if not rv:
                async with session.get(server + path) as r:
                    body = await r.json()
                now = time.monotonic()
                for obj in body.get("items") or []:
                    handle("ADDED", obj, now)
                rv = body["metadata"]["resourceVersion"]
            url = f"{server}{path}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}" \
                  "&timeoutSeconds=300"
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=None,
                                                                      sock_read=None)) as r:
                async for line in r.content:
                    ev = json.loads(line)
                    if ev["type"] == "ERROR":
                        rv = "" if ev["object"].get("code") == 410 else rv
                        break
                    rv = ev["object"]["metadata"].get("resourceVersion", rv)
                    if ev["type"] != "BOOKMARK":
                        handle(ev["type"], ev["object"], time.monotonic())
        except (TimeoutError, aiohttp.ClientError, json.JSONDecodeError):
            await asyncio.sleep(0.5)


class Sampler:
    """pykueue's CPU seconds (utime + stime) and RSS from /proc, every ``every`` seconds."""

    def __init__(self, pid: int, every: float = 0.5) -> None:
        self.pid, self.every = pid, every
        self.tick = os.sysconf("SC_CLK_TCK")
        self.rss_peak_kb = 0
        self.hwm_kb = 0
        self.cpu0 = self.cpu()

    def cpu(self) -> float:
        f = Path(f"/proc/{self.pid}/stat").read_text().rsplit(") ", 1)[1].split()
        return (int(f[11]) + int(f[12])) / self.tick

    def sample(self) -> None:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                self.rss_peak_kb = max(self.rss_peak_kb, int(line.split()[1]))
            elif line.startswith("VmHWM:"):
                self.hwm_kb = int(line.split()[1])

    async def run(self) -> None:
        while True:
            try:
                self.sample()
            except OSError:
                return
            await asyncio.sleep(self.every)


def _stats(values: list[float | None]) -> dict[str, float | int | None]:
    seen = sorted(v for v in values if v is not None)
    if not seen:
        return {"p50": None, "max": None, "missing": len(values)}
    return {"p50": round(seen[len(seen) // 2], 3), "max": round(seen[-1], 3),
            "missing": len(values) - len(seen)}


# ---- the run ---------------------------------------------------------------------------------

async def harness(args: argparse.Namespace, lab: Lab) -> dict[str, Any]:
    conn = aiohttp.TCPConnector(ssl=lab.ssl_context(), limit=args.parallel + 8)
    session = aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=60))
    server = lab.server
    seen = Probes()
    stop = asyncio.Event()
    watches = [asyncio.create_task(watch(session, server, f"/apis/{GROUP}/{VERSION}/workloads",
                                         seen.on_workload, stop)),
               asyncio.create_task(watch(session, server, "/apis/batch/v1/namespaces/team-b/jobs",
                                         seen.on_job, stop))]
    if args.reclaim:
        watches += [
            asyncio.create_task(watch(session, server, "/apis/batch/v1/namespaces/team-a/jobs",
                                      seen.on_team_a_job, stop)),
            asyncio.create_task(watch(session, server, "/api/v1/namespaces/team-a/pods",
                                      seen.on_team_a_pod, stop))]
    errors: list[str] = []

    async def create(body: dict) -> None:
        ns = body["metadata"]["namespace"]
        async with session.post(f"{server}/apis/batch/v1/namespaces/{ns}/jobs",
                                json=body) as r:
            if r.status >= 300:
                errors.append(f"create {body['metadata']['name']}: {r.status} "
                              f"{(await r.text())[:200]}")

    async def borrowed() -> float | None:
        """--reclaim: wait (at most --probe-timeout) until team-a holds all 8 GPUs, so the
        probe must reclaim; seconds waited, None when it never did."""
        t = time.monotonic()
        while len(seen.team_a_holding) < RECLAIM_HOLD:
            if time.monotonic() - t > args.probe_timeout:
                return None
            await asyncio.sleep(0.1)
        return round(time.monotonic() - t, 1)

    async def probe(name: str, at: float) -> dict[str, Any]:
        waited = await borrowed() if args.reclaim else None
        seen.created[name] = time.monotonic()
        await create(job("team-b", name, 1, 2, keep_running=True))
        deadline = seen.created[name] + args.probe_timeout
        while name not in seen.unsuspended and time.monotonic() < deadline:
            seen.changed.clear()
            try:
                await asyncio.wait_for(seen.changed.wait(), deadline - time.monotonic())
            except TimeoutError:
                break
        out = seen.result(name, at)
        if args.reclaim:
            out.update(seen.victims(seen.created[name]), borrowed_wait_s=waited)
        async with session.delete(f"{server}/apis/batch/v1/namespaces/team-b/jobs/{name}"
                                  "?propagationPolicy=Background"):
            pass
        gone = time.monotonic() + args.probe_timeout
        while name in seen.workload and name not in seen.workload_gone \
                and time.monotonic() < gone:
            await asyncio.sleep(0.2)
        return out

    await asyncio.sleep(2)  # the watches have listed
    if args.reclaim:  # team-a borrows team-b's idle quota with running Jobs
        await asyncio.gather(*(create(job("team-a", f"hold-{i}", 1, 1, keep_running=True))
                               for i in range(RECLAIM_HOLD)))
    idle = await probe("probe-idle", 0.0)
    sampler = Sampler(lab.pykueue_pid())
    sampling = asyncio.create_task(sampler.run())
    t0 = time.monotonic()
    names = iter(range(args.jobs))
    creates_done = asyncio.Event()

    async def creator() -> None:
        for i in names:
            await create(job("team-a", f"flood-{i:05d}", 1, 1,
                             keep_running=args.reclaim))

    async def flood() -> None:
        await asyncio.gather(*(creator() for _ in range(args.parallel)))
        creates_done.set()

    flooding = asyncio.create_task(flood())
    probes: list[dict[str, Any]] = []
    n = 0
    while not creates_done.is_set():
        try:
            await asyncio.wait_for(creates_done.wait(), args.probe_every)
            break
        except TimeoutError:
            pass
        n += 1
        probes.append(await probe(f"probe-{n:02d}", time.monotonic() - t0))
    await flooding
    creates_s = time.monotonic() - t0
    n += 1
    probes.append(await probe(f"probe-{n:02d}-after", time.monotonic() - t0))
    # Every team-a Workload created by pykueue (bounded: --drain-timeout).
    drain = time.monotonic() + args.drain_timeout
    while len(seen.team_a_workloads) < args.jobs and time.monotonic() < drain:
        await asyncio.sleep(0.5)
    cpu_s = sampler.cpu() - sampler.cpu0
    wall = time.monotonic() - t0
    sampler.sample()
    stop.set()
    for t in (*watches, sampling):
        t.cancel()
    await asyncio.gather(*watches, sampling, return_exceptions=True)
    await session.close()
    return {
        "idle": idle, "probes": probes,
        "flood_probes": {step: _stats([p[f"{step}_s"] for p in probes])
                         for step in ("workload", *(RECLAIM_STEPS if args.reclaim else ()),
                                      "admitted", "unsuspended")},
        "reclaim": args.reclaim,
        "goal_admitted_within_s": GOAL_ADMITTED_S,
        "goal_met": all(p["admitted_s"] is not None and p["admitted_s"] <= GOAL_ADMITTED_S
                        for p in probes),
        "flood": {"jobs": args.jobs, "parallel": args.parallel, "creates_s": round(creates_s, 1),
                  "team_a_workloads": len(seen.team_a_workloads),
                  "last_team_a_workload_s": round(seen.team_a_last_workload - t0, 1)
                  if seen.team_a_workloads else None,
                  "errors": errors[:10], "error_count": len(errors)},
        "pykueue": {"cpu_s": round(cpu_s, 1), "wall_s": round(wall, 1),
                    "cpu_pct": round(100 * cpu_s / wall, 1) if wall else None,
                    "peak_rss_mb": round(max(sampler.rss_peak_kb, sampler.hwm_kb) / 1024, 1)},
        "loadavg_end": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=3000, help="team-a's one-GPU Jobs (<= 10000)")
    ap.add_argument("--parallel", type=int, default=16, help="creates in flight (<= 64)")
    ap.add_argument("--probe-every", type=float, default=10.0)
    ap.add_argument("--probe-timeout", type=float, default=180.0)
    ap.add_argument("--drain-timeout", type=float, default=300.0,
                    help="seconds to wait after the creates for team-a's Workloads")
    ap.add_argument("--lab-state", type=Path, default=OUT / "lab")
    ap.add_argument("--port-base", type=int, default=16940,
                    help="the private lab's ports (not your lab's: it is taken down at the end)")
    ap.add_argument("--bin-dir", type=Path, default=ROOT / ".k8sbin" / "current")
    ap.add_argument("--source", type=Path, help="run pykueue's `app` from this directory")
    ap.add_argument("--label", default=None, help="name of the JSON file under bench/out/flood")
    ap.add_argument("--keep", action="store_true", help="keep the lab running")
    ap.add_argument("--reclaim", action="store_true",
                    help="team-a borrows team-b's quota; each probe reclaims it by preemption")
    args = ap.parse_args()
    if not 0 < args.jobs <= 10000 or not 0 < args.parallel <= 64:
        ap.error("--jobs must be in 1..10000 and --parallel in 1..64")
    OUT.mkdir(parents=True, exist_ok=True)
    lab = Lab(args)
    lab.lab("down", check=False)
    try:
        lab.lab("up")
        lab.lab("pykueue-up")
        lab.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": queue_objects(args.reclaim)}))
        lab.kubectl("wait", "--for=condition=Active", "--timeout=60s", "clusterqueue/team-a-cq",
                    "clusterqueue/team-b-cq")
        result = asyncio.run(harness(args, lab))
        result["source"] = str(args.source) if args.source else "this checkout"
        label = args.label or ("before" if args.source else "after") + \
            ("-reclaim" if args.reclaim else "")
        (OUT / f"{label}.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    finally:
        if not args.keep:
            lab.lab("down", check=False)


if __name__ == "__main__":
    main()
