"""Support for the reconciler's integration tests: a private lab, pykueue runners, helpers.

The reconciler tests restart kube-apiserver and run their own pykueue writers, so they use a
lab instance of their own (state in a temp folder, ports ``RECONCILER_LAB_PORT_BASE``, default
16740) instead of the shared ``lab``; it is stopped at the end of the session unless
``LAB_KEEP`` is set. Everything here talks to a real API server; nothing is mocked.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.config import (
    ClientSettings,
    LeaderElectionSettings,
    SchedulingSettings,
    Settings,
)
from tests.labfixture import ROOT, LabHandle, start_lab, wait_for

PORT_BASE = int(os.environ.get("RECONCILER_LAB_PORT_BASE", "16740"))
STATE = Path(os.environ.get("RECONCILER_LAB_STATE",
                            Path(tempfile.gettempdir()) / "pykueue-reconciler-lab"))


@pytest.fixture(scope="session", name="rlab")
def rlab_fixture() -> Iterator[LabHandle]:
    """A lab only the reconciler tests use (see the module doc)."""
    bins = Path(os.environ.get("LAB_BIN_DIR", ROOT / ".k8sbin" / "current"))
    try:
        handle, started = start_lab(STATE, PORT_BASE, bins)
    except RuntimeError:
        # `lab up` may stop at its CRD step (a kustomization.yaml in manifests/crds); the
        # processes run: finish the job here.
        handle, started = LabHandle(state=STATE, port_base=PORT_BASE, bin_dir=bins), True
        if handle.lab_cmd("status", check=False).returncode != 0:
            raise
    handle.kubectl("apply", "--server-side", "--force-conflicts", "-k",
                   str(ROOT / "manifests" / "crds"))
    handle.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    handle.kubectl("wait", "--for=condition=Ready", "--timeout=60s", "node", "--all")
    wait_for(lambda: handle.kubectl("get", "sa", "default", check=False).returncode == 0,
             60, "default ServiceAccount")
    try:
        yield handle
    finally:
        if started and not os.environ.get("LAB_KEEP"):
            handle.lab_cmd("down", check=False)


_SA_KUBECONFIGS: dict[Path, Path] = {}


def sa_kubeconfig(lab: LabHandle) -> Path:
    """pykueue's ServiceAccount kubeconfig for ``lab`` (RBAC applied once per lab)."""
    if lab.state not in _SA_KUBECONFIGS or not _SA_KUBECONFIGS[lab.state].exists():
        _SA_KUBECONFIGS[lab.state] = lab.sa_kubeconfig()
    return _SA_KUBECONFIGS[lab.state]


# The in-process Managers of these tests share one Lease, as replicas of a Deployment would;
# short timings so that a Manager started after one that died takes over within seconds.
TEST_LEASE = LeaderElectionSettings(enabled=True, namespace="pykueue-system",
                                    lease_name="pykueue-test-manager", lease_duration_seconds=4,
                                    renew_deadline_seconds=3, retry_period_seconds=1)


def settings_for(lab: LabHandle, **scheduling: Any) -> Settings:
    """Settings of an in-process Manager against ``lab``, authenticated as pykueue's own
    ServiceAccount bound to manifests/rbac (issue 10: a missing permission fails these tests),
    with leader election on, as pykueue runs by default (``TEST_LEASE``)."""
    return Settings(
        client=ClientSettings(kubeconfig=sa_kubeconfig(lab), qps=200, burst=400),
        scheduling=SchedulingSettings(**{"status_flush_seconds": 0.2, **scheduling}),
        leader_election=TEST_LEASE,
    )


class ManagerThread:
    """An in-process ``Manager`` on its own event loop in a thread, so tests can block on
    kubectl without stalling the reconciler. ``m``: the Manager (read its counters only)."""

    def __init__(self, settings: Settings, client_factory: Any = None, **kwargs: Any) -> None:
        from app.controllers.manager import Manager

        self.settings = settings
        self.kwargs = kwargs
        self.client_factory = client_factory
        self.m = Manager(settings, **kwargs)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def on_loop(self, fn: Any) -> Any:
        """Run ``fn(manager)`` on the Manager's loop (its state is not thread-safe)."""
        async def run() -> Any:
            return fn(self.m)

        return self.call(run())

    def start(self, ready_timeout: float = 60) -> ManagerThread:
        from app.controllers.manager import Manager

        self.thread.start()
        if self.client_factory is not None:
            # The client's HTTP session must be made on the Manager's own event loop.
            client = self.call(self.client_factory())
            self.m = Manager(self.settings, client=client, **self.kwargs)
        self.call(self.m.start())
        self.call(self.m.wait_ready(ready_timeout), ready_timeout + 5)
        if self.settings.leader_election.enabled:
            wait_for(lambda: self.on_loop(lambda m: m.is_leader), ready_timeout,
                     "the Manager leads (Lease taken)")
        return self

    def stop(self) -> None:
        async def cancel_rest() -> None:
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        try:
            self.call(self.m.stop())
            if self.client_factory is not None and self.m.ctx is not None:
                self.call(self.m.ctx.client.close())
        finally:
            try:
                self.call(cancel_rest(), 15)
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.thread.join(10)
                if not self.loop.is_running():
                    self.loop.close()


@pytest.fixture(name="manager")
def manager_fixture(rlab: LabHandle) -> Iterator[ManagerThread]:
    """A running in-process reconciler (leader, synced) against the private lab."""
    mt = ManagerThread(settings_for(rlab)).start()
    try:
        yield mt
    finally:
        mt.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def job_manifest(name: str, ns: str, queue: str, *, parallelism: int = 1, cpu: str = "1",
                 memory: str | None = None, gpu: int = 0, duration: str = "30s",
                 suspend: bool = True, tolerations: list[dict] | None = None,
                 node_selector: dict | None = None, priority_class: str | None = None,
                 labels: dict | None = None) -> dict:
    """A batch/v1 Job labelled for ``queue``; created suspended, as the webhook would."""
    requests: dict[str, str] = {"cpu": cpu}
    if memory:
        requests["memory"] = memory
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    container = {"name": "main", "image": "busybox", "command": ["true"],
                 "resources": {"requests": requests,
                               **({"limits": {"nvidia.com/gpu": str(gpu)}} if gpu else {})}}
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if tolerations is not None:
        pod_spec["tolerations"] = tolerations
    if node_selector is not None:
        pod_spec["nodeSelector"] = node_selector
    meta_labels = {"kueue.x-k8s.io/queue-name": queue, **(labels or {})}
    if priority_class:
        meta_labels["kueue.x-k8s.io/priority-class"] = priority_class
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": meta_labels},
        "spec": {"suspend": suspend, "parallelism": parallelism, "completions": parallelism,
                 "backoffLimit": 0,
                 "template": {"metadata": {"annotations": {
                     "lab.pykueue.dev/run-duration": duration}}, "spec": pod_spec}},
    }


def apply(lab: LabHandle, *objs: dict) -> None:
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def workloads(lab: LabHandle, ns: str) -> list[dict]:
    return lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]


def workload_of(lab: LabHandle, ns: str, job: str) -> dict | None:
    for wl in workloads(lab, ns):
        for ref in wl["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "Job" and ref.get("name") == job:
                return wl
    return None


def cond(obj: dict, ctype: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c.get("type") == ctype), None)


def is_admitted(wl: dict | None) -> bool:
    c = cond(wl or {}, "Admitted")
    return bool(wl and (wl.get("status") or {}).get("admission") and c and c["status"] == "True")


def job_obj(lab: LabHandle, ns: str, name: str) -> dict:
    return lab.get("job", name, "-n", ns)


def job_complete(lab: LabHandle, ns: str, name: str) -> bool:
    return cond(job_obj(lab, ns, name), "Complete") is not None


def namespace(lab: LabHandle, prefix: str = "rec") -> str:
    ns = unique(prefix)
    lab.create_namespace(ns)
    return ns


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[-1].startswith("Z")
    except OSError:
        return True


def restart_apiserver(lab: LabHandle, down_seconds: float = 2.0, *, kill9: bool = False) -> None:
    """Stop kube-apiserver (SIGTERM, SIGKILL after 5 s: its graceful shutdown can hang on
    open watches; ``kill9``: SIGKILL at once), stay down ``down_seconds``, and start it again
    with ``lab up``."""
    pid = int((lab.state / "pids" / "kube-apiserver.pid").read_text())
    signals = ((signal.SIGKILL, 10.0),) if kill9 else ((signal.SIGTERM, 5.0),
                                                        (signal.SIGKILL, 10.0))
    for sig, wait in signals:
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not _gone(pid):
            time.sleep(0.1)
        if _gone(pid):
            break
    assert _gone(pid), "kube-apiserver did not stop"
    time.sleep(down_seconds)
    r = lab.lab_cmd("up", check=False)
    # `up` may fail at its CRD step (see rlab) after the processes are back: check them.
    assert lab.lab_cmd("status", check=False).returncode == 0, r.stdout + r.stderr
    wait_for(lambda: lab.kubectl("get", "--raw", "/readyz", check=False).returncode == 0,
             60, "kube-apiserver ready")


class Pykueue:
    """``pykueue serve`` as a subprocess against ``lab`` (its own HTTPS port and certs)."""

    def __init__(self, lab: LabHandle, certs: Path, port: int, *, leader_election: bool = True,
                 lease_name: str = "pykueue-leader", extra_env: dict[str, str] | None = None,
                 log: Path | None = None) -> None:
        self.lab = lab
        self.port = port
        self.log = log or Path(tempfile.gettempdir()) / f"pykueue-{port}.log"
        env = dict(os.environ)
        env.update({
            "PYKUEUE_CLIENT__KUBECONFIG": str(sa_kubeconfig(lab)),
            "PYKUEUE_CLIENT__QPS": "200", "PYKUEUE_CLIENT__BURST": "400",
            "PYKUEUE_SERVER__PORT": str(port),
            "PYKUEUE_SERVER__CERT_FILE": str(certs / "tls.crt"),
            "PYKUEUE_SERVER__KEY_FILE": str(certs / "tls.key"),
            "PYKUEUE_SERVER__CA_FILE": str(certs / "ca.crt"),
            "PYKUEUE_SCHEDULING__STATUS_FLUSH_SECONDS": "0.2",
            # No visibility listener (its default port 8082 is one per machine: a second
            # replica, or a process left by a failed test, could not start beside it).
            "PYKUEUE_VISIBILITY__PORT": "0",
            "PYKUEUE_LEADER_ELECTION__ENABLED": "true" if leader_election else "false",
            "PYKUEUE_LEADER_ELECTION__LEASE_NAME": lease_name,
            "PYKUEUE_LEADER_ELECTION__NAMESPACE": "pykueue-system",
            "PYKUEUE_LEADER_ELECTION__LEASE_DURATION_SECONDS": "4",
            "PYKUEUE_LEADER_ELECTION__RENEW_DEADLINE_SECONDS": "3",
            "PYKUEUE_LEADER_ELECTION__RETRY_PERIOD_SECONDS": "1",
            **(extra_env or {}),
        })
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Pykueue:
        logf = open(self.log, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "pykueue"), "serve", "--log-level", "info"],
            env=self.env, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )
        return self

    def ready(self) -> bool:
        import ssl
        import urllib.request

        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/readyz", context=ctx,
                                        timeout=2) as r:  # noqa: S310
                return r.status == 200
        except Exception:  # noqa: BLE001
            return False

    def wait_ready(self, timeout: float = 60) -> None:
        wait_for(self.ready, timeout, f"pykueue on :{self.port} ready")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def make_certs(dest: Path) -> Path:
    """Generate a CA and serving certificate into ``dest`` (certs.generate)."""
    subprocess.run([sys.executable, "-m", "certs.generate", "--out", str(dest)], cwd=ROOT,
                   check=True, capture_output=True, timeout=120)
    return dest


async def async_wait(cond: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    """``wait_for`` for coroutines/in-process state, yielding to the event loop."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def usage_of(wls: list[dict]) -> dict[str, dict[str, int]]:
    """Reserved usage per ClusterQueue per "flavor/resource" (exact ints) of unfinished
    Workloads holding ``status.admission``."""
    from app.core.quantity import parse_quantity

    out: dict[str, dict[str, int]] = {}
    for wl in wls:
        adm = (wl.get("status") or {}).get("admission")
        fin = cond(wl, "Finished")
        if not adm or (fin and fin["status"] == "True"):
            continue
        per = out.setdefault(adm["clusterQueue"], {})
        for psa in adm.get("podSetAssignments") or []:
            for res, q in (psa.get("resourceUsage") or {}).items():
                k = f"{(psa.get('flavors') or {}).get(res)}/{res}"
                per[k] = per.get(k, 0) + parse_quantity(q, res)
    return out


class UsageSampler:
    """Samples every Workload's admission through the API every ``interval`` seconds (a
    thread with the official ``kubernetes`` client) and records any moment where a
    ClusterQueue's reserved usage exceeded ``limits[cq][flavor/resource]`` or a cohort's
    total exceeded ``cohort_limits[flavor/resource]`` (the sum over ``cohort_members``)."""

    def __init__(self, lab: LabHandle, limits: dict[str, dict[str, int]], *,
                 cohort_members: tuple[str, ...] = (), cohort_limits: dict[str, int] | None = None,
                 interval: float = 0.1) -> None:
        from kubernetes import client, config

        self.api = client.CustomObjectsApi(
            config.new_client_from_config(config_file=str(lab.kubeconfig)))
        self.limits = limits
        self.cohort_members = cohort_members
        self.cohort_limits = cohort_limits or {}
        self.interval = interval
        self.samples = 0
        self.violations: list[str] = []
        self.max_seen: dict[str, dict[str, int]] = {}
        self.admitted_keys: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                wls = self.api.list_cluster_custom_object(
                    "kueue.x-k8s.io", "v1beta2", "workloads")["items"]
            except Exception:  # noqa: BLE001 - e.g. kube-apiserver being restarted
                time.sleep(self.interval)
                continue
            self.check(wls)
            time.sleep(self.interval)

    def check(self, wls: list[dict]) -> None:
        self.samples += 1
        usage = usage_of(wls)
        for wl in wls:
            if (wl.get("status") or {}).get("admission"):
                self.admitted_keys.add(f"{wl['metadata']['namespace']}/{wl['metadata']['name']}")
        for cq, per in usage.items():
            seen = self.max_seen.setdefault(cq, {})
            for k, v in per.items():
                seen[k] = max(seen.get(k, 0), v)
                limit = self.limits.get(cq, {}).get(k)
                if limit is not None and v > limit:
                    self.violations.append(f"{cq} {k}: {v} > {limit}")
        for k, limit in self.cohort_limits.items():
            total = sum(usage.get(cq, {}).get(k, 0) for cq in self.cohort_members)
            if total > limit:
                self.violations.append(f"cohort {k}: {total} > {limit}")

    def __enter__(self) -> UsageSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


FLAVOR = "rec-default"


def make_queue(lab: LabHandle, cq: str, namespaces: tuple[str, ...], *, cpu: str = "4",
               memory: str | None = None, cohort: str | None = None,
               borrowing_limit: str | None = None, lending_limit: str | None = None,
               preemption: dict | None = None, lq: str = "lq",
               extra: dict | None = None) -> None:
    """A ResourceFlavor ``rec-default`` (no labels), ClusterQueue ``cq`` covering cpu (and
    memory) on it (``extra``: more of its spec), and LocalQueue ``lq`` in each namespace."""
    res: list[dict] = [{"name": "cpu", "nominalQuota": cpu}]
    if memory:
        res.append({"name": "memory", "nominalQuota": memory})
    for r in res:
        if borrowing_limit is not None and r["name"] == "cpu":
            r["borrowingLimit"] = borrowing_limit
        if lending_limit is not None and r["name"] == "cpu":
            r["lendingLimit"] = lending_limit
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": [r["name"] for r in res],
                            "flavors": [{"name": FLAVOR, "resources": res}]}],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    spec.update(extra or {})
    objs: list[dict] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": FLAVOR}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": cq}, "spec": spec},
    ]
    objs += [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
              "metadata": {"name": lq, "namespace": ns}, "spec": {"clusterQueue": cq}}
             for ns in namespaces]
    apply(lab, *objs)


def workload_manifest(name: str, ns: str, queue: str, *, cpu: str = "1",
                      memory: str | None = None, count: int = 1, priority: int | None = None
                      ) -> dict:
    """A Workload created directly (no Job), as a benchmark harness creates them."""
    requests = {"cpu": cpu, **({"memory": memory} if memory else {})}
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [{"name": "main", "count": count, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox",
                            "resources": {"requests": requests}}]}}}],
    }
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def wl(lab: LabHandle, ns: str, name: str) -> dict:
    return lab.get("workloads.kueue.x-k8s.io", name, "-n", ns)


def finish_workload(lab: LabHandle, ns: str, name: str) -> None:
    """What the creator of a Job-less Workload does when it is done: Finished=True."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    current = wl(lab, ns, name)
    conds = [c for c in (current.get("status") or {}).get("conditions") or []
             if c["type"] != "Finished"]
    conds.append({"type": "Finished", "status": "True", "reason": "Succeeded",
                  "message": "done by the test", "lastTransitionTime": stamp})
    lab.kubectl("patch", "workloads.kueue.x-k8s.io", name, "-n", ns, "--subresource=status",
                "--type=merge", "-p", json.dumps({"status": {"conditions": conds}}))


def reset_samples(lab: LabHandle, sample: str) -> None:
    """Fresh sample queues (``manifests/samples/<sample>``): no Jobs or Workloads left in the
    team namespaces, the ClusterQueues re-created from the sample manifests."""
    teams = ("research", "inference")
    for ns in teams:
        lab.kubectl("delete", "jobs", "--all", "-n", ns, "--wait=true", check=False)
    wait_for(lambda: not [w for w in lab.get("workloads.kueue.x-k8s.io", "-A")["items"]
                          if w["metadata"]["namespace"] in teams], 60, "old Workloads gone")
    # The running reconciler lifts the resource-in-use finalizer once no Workload is admitted;
    # wait for that with a bound instead of kubectl's unbounded wait.
    lab.kubectl("delete", "clusterqueue", "research-cq", "inference-cq", "--ignore-not-found",
                "--wait=false")
    wait_for(lambda: not [c for c in lab.get("clusterqueues")["items"]
                          if c["metadata"]["name"] in ("research-cq", "inference-cq")],
             60, "sample ClusterQueues deleted")
    lab.kubectl("apply", "-k", str(ROOT / "manifests" / "samples" / sample))


def job_pods(lab: LabHandle, ns: str, job: str) -> list[dict]:
    """The pods of Job ``ns/job`` (label ``batch.kubernetes.io/job-name``)."""
    return lab.get("pods", "-n", ns, "-l", f"batch.kubernetes.io/job-name={job}")["items"]
