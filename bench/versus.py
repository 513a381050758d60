#!/usr/bin/env python3
"""pykueue side by side with real Kueue: Kueue's own scheduler-performance runner against each
controller on a fresh lab API server (issue 16, part 2).

    make kueue && make bench-versus
    .venv/bin/python bench/versus.py --runs minimalkueue,pykueue      # a subset
    .venv/bin/python bench/versus.py --generator G.yaml --timeout 30m # another generator config

The runs, sequential, each on its own private lab (hack/lab.py: etcd + kube-apiserver + ...,
state ``<state-root>/<run>``, ports from ``--port-base``, 10 apart per run; stopped and removed
after the run), the controller started before the runner and stopped after it:

* ``minimalkueue``: Kueue's ``test/performance/scheduler/minimalkueue`` (the core controllers and
  the scheduler, no webhooks, client QPS 50 / burst 100 hard-coded) as Kueue's CI runs it, but
  against the lab's API server instead of envtest's, with Kueue's CRDs
  (config/components/crd/bases);
* ``kueue``: the full manager ``cmd/kueue`` with Kueue's shipped configuration
  (config/components/manager/controller_manager_config.yaml: QPS 50, burst 100, leader election
  on) and its webhooks, out of cluster as hack/kueue_lab.py runs it (internal cert management
  off, webhooks on 127.0.0.1, integrations batch/job only, VisibilityOnDemand off, a private
  mount namespace for /etc/kueue/metrics/certs: needs root);
* ``kueue-qps1000``: the same with ``clientConnection: {qps: 1000, burst: 2000}``;
* ``kueue-noleader``: ``kueue`` with ``leaderElection.leaderElect: false`` (a labelled
  variant: at client QPS 50 Kueue's manager renews its Lease through the same rate limiter as
  its writes, and on the large generator it lost the Lease 99 s in, on a quiet machine);
* ``pykueue``: ``pykueue serve`` with its defaults (client QPS 50 / burst 100, leader election
  on) under its ServiceAccount, its webhooks and the kube-scheduler extender registered
  (``hack/lab.py pykueue-up``); ``pykueue-qps1000``: the same with client QPS 1000 / burst 2000.

Kueue's runner (``test/performance/scheduler/runner``, built by ``make kueue``) is pointed at the
lab's admin kubeconfig with ``--generatorConfig`` (default: Kueue's
test/performance/scheduler/configs/baseline/generator.yaml from the module cache: 5 cohorts x 6
ClusterQueues, 15,000 Workloads) and ``--qps 1000 --burst 2000`` (as Kueue's in-cluster target).
It creates the objects, plays the Workloads' owner (finishes each after its runtime, clears an
evicted one's admission) and records, from the Workloads' and ClusterQueues' watch events, the
summary Kueue's checker reads. Measured here per run:

* ``wall_s``: from the runner's start to its "Recorder done" (every Workload finished); the
  checker's ``maxWallMs`` is checked against it (Kueue checks minimalkueue's lifetime, which spans
  the same interval);
* per Workload class: the runner's average time to admission and evictions; the ClusterQueue
  usage as the checker computes it (cpuUsed / (nominal x elapsed));
* the controller's CPU seconds (utime + stime of its process tree, sampled from /proc every second,
  read at "Recorder done") and peak RSS (VmHWM);
* the machine's busy CPU seconds over the same window (``/proc/stat``: every process, the lab's
  etcd and kube-apiserver, the runner and the controller) and its share of the machine
  (busy / (wall x CPUs)): near 1.0 the run is bound by the machine, not by the controller,
  and no controller can finish sooner than (busy - its own CPU) / CPUs; the runner's own
  CPU seconds likewise, and the lab's etcd and kube-apiserver's: ``others_bound_s`` =
  (etcd + kube-apiserver + runner CPU) / CPUs is a floor on the wall of any controller that
  makes the same requests, on this machine;
* ``bounds`` (issue 33 item 3): the floors no controller at these settings can beat, in seconds:
  ``others_bound_s``, the runner's ``generation_s`` (its creates at its QPS), and
  ``write_bound_s`` = the watch's admissions / the controller's client QPS (one status write
  per admission is the least any Kueue-compatible controller writes, and its client rate
  limiter paces them: Kueue's ``clientConnection.qps``, pykueue's ``client.qps``); ``bound_s``
  the largest, ``bound_by`` which, ``wall_over_bound`` = wall / bound_s (goal <= 1.2);
* ``apiserver_request_total`` by verb (and by verb + resource) over the same window: every client's
  requests, the runner's included (the same ones in every run, but for evictions);
* the machine's load average at the start and end of each run (the machine is shared);
* from the Workload watch, always recorded (``<out>/<run>/workloads.jsonl``) and read by
  bench/workload_watch.py (``watch`` in the JSON): per class and in total, evictions and the
  **admitted seconds lost to eviction** (latest admission -> eviction, watch arrival times;
  ``lost_ltt`` by lastTransitionTime), admissions per minute, time to admission, and (with
  the generator's quotas) the quota idle while Workloads that fit were pending, per cohort
  (issue 33; bench/deep.py and ``make bench-deep`` for deep queues);
* Kueue's checker (``go test -c`` of test/performance/scheduler/checker) run on the summary with a
  cmdStats file written from those numbers and Kueue's baseline rangespec.yaml; and the same
  thresholds, pass/fail per threshold, printed in the table.

Prints the table, then one JSON document (also written to ``<out>/summary.json``); each run's
logs, the runner's summary.yaml and the CSVs stay under ``<out>/<run>/``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))

from kueue_lab import KUEUE_VERSION, KueueLab, bin_dir, module_dir  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from workload_watch import analyse as analyse_watch  # noqa: E402
from workload_watch import generator_quotas  # noqa: E402

RUNS = ("minimalkueue", "kueue", "kueue-qps1000", "kueue-noleader", "pykueue",
        "pykueue-qps1000")
DEFAULT_RUNS = ("minimalkueue", "kueue", "kueue-qps1000", "pykueue")
# Kueue's baseline rangespec (test/performance/scheduler/configs/baseline/rangespec.yaml).
THRESHOLDS = {"wall_s": 425.0, "usage_pct": 55.0, "large": 11.0, "medium": 90.0, "small": 260.0}


# ---- processes -------------------------------------------------------------------------------

def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            ppid = int((p / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(p.name))
    out, todo = [], [pid]
    while todo:
        q = todo.pop()
        out.append(q)
        todo.extend(children.get(q, []))
    return out


def machine_busy_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot: /proc/stat's first line, every field
    but idle and iowait (guest time is already counted in user)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    jiffies = [int(x) for x in fields[:8]]
    busy = sum(jiffies) - jiffies[3] - jiffies[4]
    return busy / os.sysconf("SC_CLK_TCK")


class Sampler(threading.Thread):
    """CPU seconds (utime + stime) and peak RSS (VmHWM) of a process tree, every second."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")
        self.cpu: dict[int, float] = {}
        self.hwm_kb: dict[int, int] = {}
        self.stop = threading.Event()
        self.cpu0 = self.total_cpu()

    def sample(self) -> None:
        for p in tree_pids(self.pid):
            try:
                f = Path(f"/proc/{p}/stat").read_text().rsplit(") ", 1)[1].split()
                self.cpu[p] = (int(f[11]) + int(f[12])) / self.tick
                for line in Path(f"/proc/{p}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.hwm_kb[p] = max(self.hwm_kb.get(p, 0), int(line.split()[1]))
            except (OSError, IndexError, ValueError):
                continue

    def total_cpu(self) -> float:
        self.sample()
        return sum(self.cpu.values())

    def peak_rss_mb(self) -> float:
        return round(sum(self.hwm_kb.values()) / 1024, 1)

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.sample()


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class Tracer(threading.Thread):
    """One watch (``kubectl get --raw <path>``) copied to ``out``, each line prefixed with its
    arrival time; resumed from the last resourceVersion when the server ends it (it does,
    e.g. when a CRD is updated)."""

    def __init__(self, kubectl: list[str], path: str, out: Path) -> None:
        super().__init__(daemon=True)
        self.kubectl, self.path, self.f = kubectl, path, out.open("w")
        self.proc: subprocess.Popen[str] | None = None
        self.done = threading.Event()
        self.start()

    def run(self) -> None:
        rv = ""
        while not self.done.is_set():
            url = self.path + (f"&resourceVersion={rv}" if rv else "")
            self.proc = subprocess.Popen([*self.kubectl, url], stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                         text=True, start_new_session=True)
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.f.write(f"{time.time():.3f} {line}")
                m = re.search(r'"resourceVersion":"(\d+)"', line)
                if m and '"type":"ERROR"' not in line:
                    rv = max(rv, m.group(1), key=lambda v: int(v or 0))
            self.proc.wait()
            time.sleep(0.2)

    def close(self) -> None:
        self.done.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
        self.join(10)
        self.f.close()


# ---- one run ---------------------------------------------------------------------------------

def requests_since(now: dict[tuple[str, str], float],
                   before: dict[tuple[str, str], float]) -> dict[str, int]:
    """``{"VERB resource": requests}`` made between two ``apiserver_counts`` readings, the
    kinds with none left out, sorted by verb and resource."""
    return {f"{v} {res}": int(n - before.get((v, res), 0))
            for (v, res), n in sorted(now.items()) if int(n - before.get((v, res), 0)) > 0}


class VersusRun:
    def __init__(self, args: argparse.Namespace, name: str, index: int, kdir: Path,
                 kbin: Path) -> None:
        self.args, self.name, self.kdir, self.kbin = args, name, kdir, kbin
        self.port_base = args.port_base + 10 * index
        self.state = args.state_root / name
        self.out = args.out / name
        self.bin_dir = args.bin_dir
        self.kubeconfig = self.state / "kubeconfig"
        self.kl = KueueLab(self.state, self.port_base, self.bin_dir)
        self.env = self.kl.env  # one environment for the lab, the controller and the runner
        self.env["PYKUEUE_PORT"] = str(self.kl.webhook_port)
        self.lab, self.kubectl = self.kl.lab, self.kl.kubectl

    def log(self, msg: str) -> None:
        print(f"versus [{time.strftime('%H:%M:%S')}] {self.name}: {msg}", file=sys.stderr,
              flush=True)

    # -- the lab and its CRDs

    def lab_up(self) -> None:
        self.lab("down", check=False)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log(f"lab up (state {self.state}, ports {self.port_base}..{self.port_base + 7})")
        self.lab("up")
        if self.name.startswith("pykueue"):
            return
        self.kl.use_kueue_crds(self.kdir)

    # -- the controllers

    def start_controller(self) -> subprocess.Popen[bytes] | int:
        if self.name == "minimalkueue":
            return self.popen([str(self.kbin / "minimalkueue"), "--kubeconfig",
                               str(self.kubeconfig)], "minimalkueue")
        if self.name.startswith("kueue"):
            return self.kl.start_manager(self.kdir, self.kbin, self.out,
                                         qps=1000 if self.name.endswith("qps1000") else None,
                                         leader_elect=not self.name.endswith("noleader"))
        # Kueue v0.17.1 runs without waitForPodsReady (no section in its shipped
        # configuration); pykueue's default is on (Kueue v0.19's): off here, so both do alike.
        extra = {"PYKUEUE_WAIT_FOR_PODS_READY__ENABLE": "false"}
        if self.name.endswith("qps1000"):
            extra.update({"PYKUEUE_CLIENT__QPS": "1000", "PYKUEUE_CLIENT__BURST": "2000"})
        self.env.update(extra)
        self.lab("pykueue-up")
        pid = int((self.state / "pids" / "pykueue.pid").read_text().strip())
        shutil.copy(ROOT / "certs" / "out" / "ca.crt", self.out / "pykueue-ca.crt")
        return pid

    def popen(self, cmd: list[str], name: str) -> subprocess.Popen[bytes]:
        log = open(self.out / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=self.out, env=self.env)

    # -- measurements

    def start_trace(self) -> list[Tracer]:
        """Always: every Workload change into ``workloads.jsonl`` (one watch, copied as it
        comes: the lost-seconds and deep-queue figures of bench/workload_watch.py, and
        bench/evictions.py); ``--trace``: also every Event (created or patched) into
        ``events.jsonl`` (bench/writes.py). Watch events one a line, each prefixed with the
        Unix time it arrived; the same watches for every controller."""
        kubectl = [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig),
                   "get", "--raw"]
        watches = [("workloads", "/apis/kueue.x-k8s.io/v1beta2/workloads?watch=true")]
        if self.args.trace:
            watches.append(("events", "/api/v1/events?watch=true"))
        return [Tracer(kubectl, path, self.out / f"{name}.jsonl") for name, path in watches]

    def watch_figures(self, tracers: list[Tracer]) -> dict[str, Any]:
        """bench/workload_watch.py on this run's Workload watch (closed first)."""
        path = self.out / "workloads.jsonl"
        # the watch may trail the API server under load: until it has been quiet for 2 s
        deadline, size, quiet = time.monotonic() + 60, -1, 0
        while path.exists() and time.monotonic() < deadline and quiet < 4:
            now = path.stat().st_size
            quiet, size = (quiet + 1 if now == size else 0), now
            time.sleep(0.5)
        for t in tracers:
            t.close()
        if not path.exists():
            return {}
        try:
            quotas = generator_quotas(self.args.generator)
        except (OSError, KeyError, TypeError, ValueError):
            quotas = None
        return analyse_watch(path, quotas)

    def apiserver_counts(self) -> dict[tuple[str, str], float]:
        r = self.kubectl("get", "--raw", "/metrics", check=False, timeout=60)
        out: dict[tuple[str, str], float] = {}
        pat = re.compile(r'^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$')
        for line in r.stdout.splitlines():
            m = pat.match(line)
            if not m:
                continue
            lb = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            res = lb.get("resource", "") + (f"/{lb['subresource']}" if lb.get("subresource")
                                            else "")
            k = (lb.get("verb", ""), res)
            out[k] = out.get(k, 0.0) + float(m.group(2))
        return out

    def record_counts(self, t: float, before: dict[tuple[str, str], float]) -> None:
        """One line of ``requests.jsonl``: ``{"t": seconds into the run, "requests":
        {"VERB resource": count since the run started}}`` (``--requests-every``)."""
        counts = requests_since(self.apiserver_counts(), before)
        with (self.out / "requests.jsonl").open("a") as f:
            f.write(json.dumps({"t": round(t, 1), "requests": counts}) + "\n")

    def run(self) -> dict[str, Any]:
        t_setup = time.monotonic()
        result: dict[str, Any] = {"run": self.name, "load_before": loadavg()}
        controller: subprocess.Popen[bytes] | int | None = None
        runner: subprocess.Popen[bytes] | None = None
        tracers: list[Tracer] = []
        sampler: Sampler | None = None
        try:
            self.lab_up()
            self.log("starting the controller")
            controller = self.start_controller()
            pid = controller if isinstance(controller, int) else controller.pid
            time.sleep(3)  # leader election, caches
            sampler = Sampler(pid)
            sampler.start()
            tracers = self.start_trace()
            before = self.apiserver_counts()
            cpu0 = sampler.total_cpu()
            busy0 = machine_busy_cpu()
            result["setup_s"] = round(time.monotonic() - t_setup, 1)
            self.log(f"runner starts (load {loadavg()})")
            runner_out = self.out / "runner"
            runner_out.mkdir(parents=True, exist_ok=True)
            self.env.update({"PROJECT_DIR": f"{self.kdir}/", "KUBECONFIG": str(self.kubeconfig)})
            t0 = time.monotonic()
            runner = self.popen([str(self.kbin / "runner"), "--o", str(runner_out),
                                 "--generatorConfig", str(self.args.generator),
                                 "--qps", str(self.args.runner_qps),
                                 "--burst", str(2 * self.args.runner_qps),
                                 "--timeout", self.args.timeout, "--zap-log-level", "info"],
                                "runner")
            runner_sampler = Sampler(runner.pid)
            runner_sampler.start()
            server = self.server_samplers()
            log = self.out / "runner.log"
            done_at = gen_at = None
            after: dict[tuple[str, str], float] = {}
            cpu1 = busy1 = runner_cpu = 0.0
            server_cpu: dict[str, float] = {}
            every = self.args.requests_every
            next_counts = time.monotonic() + every
            while runner.poll() is None:
                time.sleep(0.5)
                if every > 0 and time.monotonic() >= next_counts:
                    next_counts += every
                    self.record_counts(time.monotonic() - t0, before)
                text = log.read_text(errors="replace") if log.exists() else ""
                if gen_at is None and "Generator done" in text:
                    gen_at = time.monotonic() - t0
                if done_at is None and "Recorder done" in text:
                    done_at = time.monotonic() - t0
                    cpu1 = sampler.total_cpu()
                    busy1, runner_cpu = machine_busy_cpu(), runner_sampler.total_cpu()
                    server_cpu = {n: sm.total_cpu() - sm.cpu0 for n, sm in server.items()}
                    after = self.apiserver_counts()
                    self.log(f"recorder done after {done_at:.0f}s; runner cleans up")
                if done_at is None and self.controller_gone(controller):
                    # e.g. Kueue's manager exits when it loses its Lease: the runner would
                    # wait for its recording timeout; a run without its controller is void.
                    result["error"] = (f"the controller exited {time.monotonic() - t0:.0f}s "
                                       "into the run (see its log)")
                    self.log(result["error"])
                    stop_process(runner, signal.SIGINT)
                    break
                if time.monotonic() - t0 > self.args.hard_timeout:
                    self.log("hard timeout: stopping the runner")
                    stop_process(runner, signal.SIGINT)
            if done_at is None:
                done_at = time.monotonic() - t0
                cpu1 = sampler.total_cpu()
                busy1, runner_cpu = machine_busy_cpu(), runner_sampler.total_cpu()
                server_cpu = {n: sm.total_cpu() - sm.cpu0 for n, sm in server.items()}
                after = self.apiserver_counts()
            runner_sampler.stop.set()
            for sm in server.values():
                sm.stop.set()
            result["runner_rc"] = runner.returncode
            result["wall_s"] = round(done_at, 1)
            result["generation_s"] = round(gen_at, 1) if gen_at else None
            result["controller"] = {"cpu_s": round(cpu1 - cpu0, 1),
                                    "peak_rss_mb": sampler.peak_rss_mb()}
            busy = busy1 - busy0
            result["machine"] = {
                "busy_cpu_s": round(busy, 1),
                "busy_share": round(busy / (done_at * (os.cpu_count() or 1)), 2),
                "runner_cpu_s": round(runner_cpu - runner_sampler.cpu0, 1),
                **{f"{n}_cpu_s": round(v, 1) for n, v in server_cpu.items()},
                **{f"{n}_peak_rss_mb": sm.peak_rss_mb() for n, sm in server.items()},
                # No controller could end this run sooner than the API server's, etcd's and
                # the runner's own work spread over every CPU of the machine.
                "others_bound_s": round((sum(server_cpu.values()) + runner_cpu
                                         - runner_sampler.cpu0) / (os.cpu_count() or 1), 1)}
            result["load_after"] = loadavg()
            diff = {k: int(after.get(k, 0) - before.get(k, 0)) for k in after}
            verbs: dict[str, int] = {}
            for (v, _res), n in diff.items():
                if n > 0:
                    verbs[v] = verbs.get(v, 0) + n
            result["api_requests_by_verb"] = dict(sorted(verbs.items(), key=lambda kv: -kv[1]))
            top = sorted(((n, f"{v} {res}") for (v, res), n in diff.items() if n > 0),
                         reverse=True)[:12]
            result["api_requests_top"] = {k: n for n, k in top}
            result["api_requests_by_resource"] = requests_since(after, before)
            result.update(self.read_summary(runner_out / "summary.yaml"))
            result["watch"] = self.watch_figures(tracers)
            result["bounds"] = bounds_of(result)
            result["checker"] = (self.checker(runner_out, result) if "error" not in result
                                 else {"ran": False})
        except Exception as exc:  # noqa: BLE001 - one failed run must not hide the others
            result["error"] = f"{type(exc).__name__}: {exc}"
            self.log(f"FAILED: {result['error']}")
        finally:
            if sampler is not None:
                sampler.stop.set()
            for t in tracers:
                t.close()
            if runner is not None:
                stop_process(runner, signal.SIGINT)
            if isinstance(controller, subprocess.Popen):
                stop_process(controller)
            elif isinstance(controller, int):
                self.lab("pykueue-down", check=False)
            if not self.args.keep:
                self.lab("down", check=False)
        self.log(f"done in {time.monotonic() - t_setup:.0f}s")
        return result

    def server_samplers(self) -> dict[str, Sampler]:
        """CPU samplers of the lab's etcd and kube-apiserver (their pid files), started."""
        out: dict[str, Sampler] = {}
        for name in ("etcd", "kube-apiserver"):
            try:
                pid = int((self.state / "pids" / f"{name}.pid").read_text().strip())
            except (OSError, ValueError):
                continue
            out[name.replace("-", "_")] = sm = Sampler(pid)
            sm.start()
        return out

    @staticmethod
    def controller_gone(controller: subprocess.Popen[bytes] | int) -> bool:
        if isinstance(controller, subprocess.Popen):
            return controller.poll() is not None
        try:
            stat = Path(f"/proc/{controller}/stat").read_text()
        except OSError:
            return True
        return stat.split(") ", 1)[-1].startswith("Z")

    def read_summary(self, path: Path) -> dict[str, Any]:
        if not path.exists():
            return {"summary": None}
        s = yaml.safe_load(path.read_text()) or {}
        classes = {}
        for c, w in sorted((s.get("workloadClasses") or {}).items()):
            classes[c] = {"count": w.get("count"),
                          "avg_time_to_admission_s": round(w.get("averageTimeToAdmissionMs", 0)
                                                           / 1000, 2),
                          "avg_time_to_finish_s": round(w.get("averageTimeToFinishMs", 0) / 1000,
                                                        2),
                          "evictions": w.get("totalEvictions", 0)}
        usage = {}
        for c, q in (s.get("clusterQueueClasses") or {}).items():
            from datetime import datetime

            def ts(v: Any) -> float:
                return (v if isinstance(v, datetime) else
                        datetime.fromisoformat(str(v).replace("Z", "+00:00"))).timestamp()

            elapsed_ms = (ts(q["lastEventTime"]) - ts(q["firstEventTime"])) * 1000
            nominal = q.get("nominalQuota") or 0
            usage[c] = (round(q.get("cpuUsed", 0) * 100 / (nominal * elapsed_ms), 2)
                        if nominal and elapsed_ms else None)
        return {"classes": classes, "usage_pct": usage,
                "evictions": sum(c["evictions"] or 0 for c in classes.values()),
                "dropped_workload_events": s.get("droppedWorkloadEvents")}

    def checker(self, runner_out: Path, result: dict[str, Any]) -> dict[str, Any]:
        """Kueue's checker on the runner's summary, with a cmdStats file from our numbers."""
        rng = self.args.rangespec
        summary = runner_out / "summary.yaml"
        if not summary.exists() or not rng.exists():
            return {"ran": False}
        cpu_ms = int(result["controller"]["cpu_s"] * 1000)
        stats = {"wallMs": int(result["wall_s"] * 1000), "userMs": cpu_ms, "sysMs": 0,
                 "maxrss": int(result["controller"]["peak_rss_mb"] * 1024)}
        stats_file = runner_out / "controller.stats.yaml"
        stats_file.write_text(yaml.safe_dump(stats))
        r = subprocess.run([str(self.kbin / "checker.test"), "-test.v", "--summary", str(summary),
                            "--cmdStats", str(stats_file), "--range", str(rng)],
                           env={**os.environ, "PROJECT_DIR": f"{self.kdir}/"}, text=True,
                           capture_output=True, timeout=120)
        (self.out / "checker.log").write_text(r.stdout + r.stderr)
        fails = [line.strip() for line in r.stdout.splitlines()
                 if "is greater than" in line or "is less then" in line or "is more then" in line]
        return {"ran": True, "passed": r.returncode == 0, "failures": fails}


# ---- the table -------------------------------------------------------------------------------

def thresholds_of(rangespec: Path | None) -> dict[str, float]:
    """The checker's thresholds from a Kueue rangespec.yaml (``cmd.maxWallMs``,
    ``clusterQueueClassesMinUsage.cq``, ``wlClassesMaxAvgTimeToAdmissionMs``) in seconds and
    percent; Kueue's baseline ones (``THRESHOLDS``) for what it does not say."""
    out = dict(THRESHOLDS)
    if rangespec is None or not rangespec.exists():
        return out
    spec = yaml.safe_load(rangespec.read_text()) or {}
    wall = (spec.get("cmd") or {}).get("maxWallMs")
    if wall is not None:
        out["wall_s"] = float(wall) / 1000
    usage = (spec.get("clusterQueueClassesMinUsage") or {}).get("cq")
    if usage is not None:
        out["usage_pct"] = float(usage)
    for c, ms in (spec.get("wlClassesMaxAvgTimeToAdmissionMs") or {}).items():
        out[c] = float(ms) / 1000
    return out


def verdicts(r: dict[str, Any], limits: dict[str, float] | None = None) -> dict[str, bool | None]:
    """Pass/fail per threshold of ``limits`` (default: Kueue's baseline ``THRESHOLDS``)."""
    t = limits or THRESHOLDS
    cls = r.get("classes") or {}
    usage = (r.get("usage_pct") or {}).get("cq")
    out: dict[str, bool | None] = {
        "wall": r.get("wall_s") is not None and r["wall_s"] <= t["wall_s"],
        "usage": None if usage is None else usage >= t["usage_pct"]}
    for c in ("large", "medium", "small"):
        v = (cls.get(c) or {}).get("avg_time_to_admission_s")
        out[c] = None if v is None else v <= t[c]
    return out


def client_qps(run: str) -> int:
    """The controller's client QPS in run ``run``: 1000 for the ``-qps1000`` variants, else 50
    (Kueue's default ``clientConnection.qps``, minimalkueue's hard-coded one, pykueue's
    ``client.qps``)."""
    return 1000 if run.endswith("qps1000") else 50


def bounds_of(r: dict[str, Any]) -> dict[str, Any]:
    """Floors on run ``r``'s wall (seconds; see the module docstring): ``others_bound_s``,
    ``generation_s``, ``write_bound_s``, the largest as ``bound_s`` with its name in
    ``bound_by``, and ``wall_over_bound``. A floor that was not measured is left out; {} when
    none was or the run has no wall."""
    qps = client_qps(str(r.get("run", "")))
    admissions = (r.get("watch") or {}).get("admissions")
    floors = {
        "others_bound_s": (r.get("machine") or {}).get("others_bound_s"),
        "generation_s": r.get("generation_s"),
        "write_bound_s": round(admissions / qps, 1) if admissions else None,
    }
    floors = {k: v for k, v in floors.items() if v}
    wall = r.get("wall_s")
    if not floors or not wall:
        return {}
    by = max(floors, key=lambda k: floors[k])
    return {**floors, "client_qps": qps, "bound_s": floors[by], "bound_by": by,
            "wall_over_bound": round(wall / floors[by], 2)}


def table(results: list[dict[str, Any]], limits: dict[str, float] | None = None,
          rangespec: str = "baseline rangespec") -> str:
    def f(v: Any, nd: int = 1) -> str:
        if v is None:
            return "-"
        return f"{v:.{nd}f}" if isinstance(v, float) else str(v)

    def mark(ok: bool | None) -> str:
        return "-" if ok is None else ("pass" if ok else "FAIL")

    head = ["run", "wall s", "adm small s", "adm medium s", "adm large s", "usage %", "evict",
            "lost s",
            "ctrl CPU s", "peak RSS MB", "busy CPU s (share)", "runner CPU s", "API req",
            "load 1m start/end", "thresholds"]
    rows = [head]
    for r in results:
        if "error" in r:
            rows.append([r["run"], f"error: {r['error'][:80]}"] + [""] * (len(head) - 2))
            continue
        cls = r.get("classes") or {}
        v = verdicts(r, limits)
        rows.append([
            r["run"], f(r.get("wall_s")),
            *(f((cls.get(c) or {}).get("avg_time_to_admission_s"), 2)
              for c in ("small", "medium", "large")),
            f((r.get("usage_pct") or {}).get("cq"), 1), f(r.get("evictions")),
            f(((((r.get("watch") or {}).get("lost") or {}).get("total")) or {}).get("lost_s")),
            f((r.get("controller") or {}).get("cpu_s")),
            f((r.get("controller") or {}).get("peak_rss_mb")),
            (f"{m['busy_cpu_s']:.0f} ({m['busy_share']:.2f})"
             if (m := r.get("machine")) else "-"),
            f((r.get("machine") or {}).get("runner_cpu_s")),
            str(sum((r.get("api_requests_by_verb") or {}).values())),
            f"{r.get('load_before', '').split(' ')[0]}/{r.get('load_after', '-').split(' ')[0]}",
            " ".join(f"{k}:{mark(ok)}" for k, ok in v.items()),
        ])
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("API requests by verb (every client, the runner's included; "
                 "'Recorder done' window):")
    for r in results:
        if r.get("api_requests_by_verb"):
            lines.append(f"  {r['run']}: " + ", ".join(
                f"{k} {n}" for k, n in r["api_requests_by_verb"].items()))
    lines.extend(watch_table(results))
    bounded = [r for r in results if r.get("bounds")]
    if bounded:
        lines.append("")
        lines.append("Floors on the wall (others_bound: API server + etcd + runner CPU / CPUs; "
                     "generation: the runner's creates; write_bound: admissions / client QPS):")
        for r in bounded:
            b = r["bounds"]
            floors = ", ".join(f"{k.removesuffix('_s')} {b[k]:.1f} s" for k in
                               ("others_bound_s", "generation_s", "write_bound_s") if k in b)
            lines.append(f"  {r['run']}: {floors}; wall {r['wall_s']:.1f} s = "
                         f"{b['wall_over_bound']:.2f}x {b['bound_by'].removesuffix('_s')} "
                         f"(client QPS {b['client_qps']})")
    ratios = ratios_of(results)
    if ratios:
        lines.append("")
        lines.append("Ratios pykueue / Kueue (same settings):")
        for k, v in ratios.items():
            lines.append(f"  {k}: " + ", ".join(f"{m} {x}" for m, x in v.items()))
    lines.append("")
    lines.append(f"Kueue's checker (checker.test on the runner's summary, {rangespec}):")
    for r in results:
        c = r.get("checker") or {}
        if c.get("ran"):
            lines.append(f"  {r['run']}: {'PASS' if c['passed'] else 'FAIL'}"
                         + (f" ({'; '.join(c['failures'])})" if c.get("failures") else ""))
    return "\n".join(lines)


def watch_table(results: list[dict[str, Any]]) -> list[str]:
    """The Workload watch's figures (bench/workload_watch.py): evictions and admitted seconds
    lost per class, then admissions per minute, time to admission and idle quota."""
    runs = [r for r in results if (r.get("watch") or {}).get("lost")]
    if not runs:
        return []
    lines = ["", "Evictions / admitted seconds lost to eviction, per class (watch arrival "
             "times; [by lastTransitionTime, 1 s resolution]):"]
    classes = sorted({c for r in runs for c in r["watch"]["lost"]} - {"total"}) + ["total"]
    for r in runs:
        w = r["watch"]
        cells = []
        for c in classes:
            a, b = w["lost"].get(c), (w.get("lost_ltt") or {}).get(c)
            if a is None:
                continue
            cells.append(f"{c} {a['evictions']} / {a['lost_s']:.1f} s"
                         + (f" [{b['lost_s']:.0f} s]" if b else "")
                         + (f" ({a['after_finish']} of finished ones)" if a["after_finish"]
                            else "")
                         + (f" ({a['unmatched']} unmatched)" if a["unmatched"] else ""))
        lines.append(f"  {r['run']}: " + "; ".join(cells))
    lines.append("")
    lines.append("Admissions (re-admissions included) and time to admission (first seen to "
                 "latest admission), idle quota while Workloads that fit were pending:")
    for r in runs:
        w = r["watch"]
        tta = "; ".join(f"{c} avg {v['avg']} p50 {v['p50']} p95 {v['p95']} max {v['max']} s"
                        for c, v in (w.get("time_to_admission_s") or {}).items())
        idle = ""
        if w.get("idle_pct_while_pending") is not None:
            idle = (f"; usage while pending {w['usage_pct_while_pending']}% of nominal, "
                    f"idle while a fitting one pended {w['idle_pct_while_pending']}%; per "
                    "cohort peak pending / admissions per min while pending / idle CPU-s "
                    "while a fitting one pended (over s) " + ", ".join(
                        f"{c['peak_pending']} / {c['admissions_per_min_while_pending']} / "
                        f"{c['idle_cpu_s_while_fit_pending']} ({c['fit_pending_idle_s']} s)"
                        for c in w["cohorts"].values()))
        ra = w.get("readmission_ms")
        if ra:
            idle += (f"; finish to the next admission in its ClusterQueue while one pended "
                     f"p50 {ra['p50']} p90 {ra['p90']} mean {ra['mean']} ms ({ra['count']})")
        lines.append(f"  {r['run']}: {w['admissions']} admissions in "
                     f"{w['admission_window_s']} s = {w['admissions_per_min']}/min; {tta}{idle}")
    return lines


def ratios_of(results: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    by = {r["run"]: r for r in results if "wall_s" in r and "error" not in r}
    out = {}
    for p, k in (("pykueue", "kueue"), ("pykueue", "minimalkueue"),
                 ("pykueue-qps1000", "kueue-qps1000")):
        if p not in by or k not in by:
            continue
        a, b = by[p], by[k]

        def ratio(x: float | None, y: float | None) -> float | None:
            return round(x / y, 2) if x is not None and y else None

        ca, cb = a.get("classes") or {}, b.get("classes") or {}
        out[f"{p}/{k}"] = {
            "wall": ratio(a.get("wall_s"), b.get("wall_s")),
            **{f"adm_{c}": ratio((ca.get(c) or {}).get("avg_time_to_admission_s"),
                                 (cb.get(c) or {}).get("avg_time_to_admission_s"))
               for c in ("small", "medium", "large")},
            "evictions": ratio(a.get("evictions"), b.get("evictions")),
            "lost_s": ratio(*(((((x.get("watch") or {}).get("lost") or {}).get("total"))
                               or {}).get("lost_s") for x in (a, b))),
            "cpu": ratio((a.get("controller") or {}).get("cpu_s"),
                         (b.get("controller") or {}).get("cpu_s")),
            "rss": ratio((a.get("controller") or {}).get("peak_rss_mb"),
                         (b.get("controller") or {}).get("peak_rss_mb")),
            "api_requests": ratio(sum((a.get("api_requests_by_verb") or {}).values()),
                                  sum((b.get("api_requests_by_verb") or {}).values())),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default=",".join(DEFAULT_RUNS),
                    help=f"comma-separated, in order, from {', '.join(RUNS)}")
    ap.add_argument("--generator", type=Path, help="the runner's generator config "
                    "(default: Kueue's baseline generator.yaml)")
    ap.add_argument("--rangespec", type=Path, help="the checker's thresholds "
                    "(default: Kueue's baseline rangespec.yaml)")
    ap.add_argument("--runner-qps", type=int, default=1000,
                    help="the runner's client QPS (burst twice that); 1000 as Kueue's CI. On "
                         "a 2-core lab the large generator's creation burst at 1000 can time "
                         "out in etcd and abort the runner: the run then reports no classes")
    ap.add_argument("--timeout", default="40m", help="the runner's --timeout (recording; "
                    "Kueue's in-cluster target uses 15m, too short on a loaded 2-core machine)")
    ap.add_argument("--hard-timeout", type=float, default=3000.0,
                    help="seconds after which the runner is interrupted")
    ap.add_argument("--port-base", type=int, default=int(os.environ.get("VERSUS_PORT_BASE",
                                                                        20440)),
                    help="first run's lab ports (each run +10)")
    ap.add_argument("--state-root", type=Path, default=Path("/tmp/pykueue-versus"))
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "versus")
    ap.add_argument("--bin-dir", type=Path, default=ROOT / ".k8sbin" / "current")
    ap.add_argument("--keep", action="store_true", help="keep each lab (debugging)")
    ap.add_argument("--requests-every", type=float, default=0.0, metavar="S",
                    help="every S seconds of the run, append the API server's request counts "
                         "since the start (apiserver_request_total by verb and resource) to "
                         "<out>/<run>/requests.jsonl: where the write budget goes, minute by "
                         "minute (0: off)")
    ap.add_argument("--trace", action="store_true", help="record every Workload change and "
                    "Event of each run under <out>/<run>/ (bench/evictions.py, bench/writes.py)")
    args = ap.parse_args()
    # Stopped with SIGTERM or SIGINT (also when started in the background), each run's
    # `finally` still stops its runner, its controller and its lab.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    for r in runs:
        if r not in RUNS:
            raise SystemExit(f"versus: unknown run {r!r}; choose from {', '.join(RUNS)}")
    kdir, kbin = module_dir(), bin_dir()
    base = kdir / "test" / "performance" / "scheduler" / "configs" / "baseline"
    args.generator = (args.generator or base / "generator.yaml").resolve()
    args.rangespec = (args.rangespec or base / "rangespec.yaml").resolve()
    args.bin_dir = args.bin_dir.resolve()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"versus: Kueue {KUEUE_VERSION} from {kdir}; binaries {kbin}; runs {', '.join(runs)}; "
          f"load {loadavg()} on {os.cpu_count()} CPUs", file=sys.stderr, flush=True)
    results = []
    for i, name in enumerate(runs):
        results.append(VersusRun(args, name, i, kdir, kbin).run())
        (args.out / "summary.json").write_text(json.dumps(results, indent=2) + "\n")
    limits = thresholds_of(args.rangespec)
    summary = {"kueue_version": KUEUE_VERSION, "generator": str(args.generator),
               "thresholds": limits, "cpus": os.cpu_count(), "runs": results,
               "verdicts": {r["run"]: verdicts(r, limits) for r in results
                            if "wall_s" in r and "error" not in r},
               "ratios": ratios_of(results)}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(table(results, limits, args.rangespec.name))
    print()
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
