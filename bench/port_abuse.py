#!/usr/bin/env python3
"""Anonymous port abuse against the lab's `pykueue serve`, with admission measured meanwhile
(breaker8); JSON on stdout.

    .venv/bin/python hack/lab.py up && .venv/bin/python hack/lab.py pykueue-up
    .venv/bin/python bench/port_abuse.py                 # both attacks
    .venv/bin/python bench/port_abuse.py --only reviews  # one of them

Env as for hack/lab.py (LAB_STATE_DIR, LAB_PORT_BASE, PYKUEUE_PORT). The bench creates its own
ResourceFlavor, ClusterQueue and LocalQueue (``port-abuse``, CPU only) and, meanwhile, a Job
of 1 CPU every ~2 s whose time from creation to unsuspension is reported (seconds), with how
long its creation took (the Job webhooks' latency).

- ``hold``: ``--connections`` (100) HTTPS connections each POST an 8 MiB body to
  ``/mutate-batch-v1-job`` one byte short and wait 8 s. Reports the server's RSS before and its
  peak (MiB, ``/proc/<pid>/status`` of the lab's pykueue) and the answer codes.
- ``reviews``: ``--threads`` (30) clients loop AdmissionReviews of a Job with 100,000 small
  containers (6 MB) for ``--seconds`` (60). Reports the answer codes and the longest gap
  between renewals of the leader's Lease (read every 0.25 s; renew deadline 10 s).

The lab's pykueue answers its webhook routes only to kube-apiserver's client certificate
(``webhook.client_names``): the bench presents that certificate (the lab's
``webhook-client``), so it measures what a caller that gets past that check (or any caller of
a deployment without the setting) can do; without it every POST is a 403 before its body
is read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hack.lab import PYKUEUE_PORT, from_args  # noqa: E402

NAME = "port-abuse"
WEBHOOK = "/mutate-batch-v1-job"


def admin_client() -> httpx.Client:
    lab = from_args(None, None, None)
    ctx = ssl.create_default_context(cafile=str(lab.pki / "ca.crt"))
    ctx.load_cert_chain(str(lab.pki / "admin.crt"), str(lab.pki / "admin.key"))
    return httpx.Client(base_url=lab.server, verify=ctx, timeout=30)


def insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    pki = from_args(None, None, None).pki
    if (pki / "webhook-client.crt").exists():
        ctx.load_cert_chain(str(pki / "webhook-client.crt"), str(pki / "webhook-client.key"))
    return ctx


def pykueue_pid() -> int:
    lab = from_args(None, None, None)
    return int(lab.pidfile("pykueue").read_text().strip())


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def ensure_queue(c: httpx.Client) -> None:
    kueue = "/apis/kueue.x-k8s.io/v1beta2"
    objects = [
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": NAME}}),
        (f"{kueue}/resourceflavors", {"apiVersion": "kueue.x-k8s.io/v1beta2",
                                      "kind": "ResourceFlavor", "metadata": {"name": NAME}}),
        (f"{kueue}/clusterqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": NAME},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["cpu"], "flavors": [{"name": NAME, "resources": [
                    {"name": "cpu", "nominalQuota": "1000"}]}]}]}}),
        (f"{kueue}/namespaces/{NAME}/localqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": NAME, "namespace": NAME},
            "spec": {"clusterQueue": NAME}}),
    ]
    for path, body in objects:
        r = c.post(path, json=body)
        if r.status_code not in (201, 409):
            raise SystemExit(f"cannot create {path}: {r.status_code} {r.text[:200]}")


def probe_job(name: str) -> dict[str, Any]:
    res = {"cpu": "1"}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAME,
                         "labels": {"kueue.x-k8s.io/queue-name": NAME}},
            "spec": {"suspend": True, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "x",
                                "resources": {"requests": res, "limits": res}}]}}}}


class Prober(threading.Thread):
    """Creates a Job every ~2 s; records creation latency and time to unsuspension (s)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.created: list[float] = []
        self.admitted: list[float | None] = []
        self.refused: Counter[int] = Counter()

    def run(self) -> None:
        c = admin_client()
        jobs = f"/apis/batch/v1/namespaces/{NAME}/jobs"
        while not self.stop.is_set():
            name = f"probe-{time.time_ns()}"
            t0 = time.monotonic()
            r = c.post(jobs, json=probe_job(name))
            if r.status_code != 201:
                self.refused[r.status_code] += 1
                time.sleep(2)
                continue
            self.created.append(time.monotonic() - t0)
            t0 = time.monotonic()
            took = None
            while time.monotonic() - t0 < 60:
                got = c.get(f"{jobs}/{name}")
                if got.status_code == 200 and got.json()["spec"].get("suspend") is False:
                    took = time.monotonic() - t0
                    break
                time.sleep(0.05)
            self.admitted.append(took)
            c.delete(f"{jobs}/{name}", params={"propagationPolicy": "Background"})
            self.stop.wait(2)

    def report(self) -> dict[str, Any]:
        done = [t for t in self.admitted if t is not None]
        return {"jobs": len(self.admitted), "not_admitted_in_60s": len(self.admitted) - len(done),
                "admission_s": [round(min(done), 3), round(max(done), 3)] if done else None,
                "create_s": ([round(min(self.created), 3), round(max(self.created), 3)]
                             if self.created else None),
                "create_refused": dict(self.refused)}


class LeaseWatch(threading.Thread):
    """Reads the leader's Lease every 0.25 s: the longest gap between renewals (s)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.longest = 0.0
        self.holders: set[str] = set()

    def run(self) -> None:
        c = admin_client()
        path = "/apis/coordination.k8s.io/v1/namespaces/pykueue-system/leases/pykueue-leader"
        last, changed = None, time.monotonic()
        while not self.stop.is_set():
            spec = c.get(path).json().get("spec", {})
            self.holders.add(str(spec.get("holderIdentity")))
            now = time.monotonic()
            if spec.get("renewTime") != last:
                self.longest = max(self.longest, now - changed)
                last, changed = spec.get("renewTime"), now
            self.stop.wait(0.25)
        self.longest = max(self.longest, time.monotonic() - changed)


def review_body(containers: int) -> bytes:
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "x", "namespace": NAME,
                        "labels": {"kueue.x-k8s.io/queue-name": NAME}},
           "spec": {"suspend": True, "template": {"spec": {"containers": [
               {"name": f"c{i}", "resources": {"requests": {"cpu": "1"}}}
               for i in range(containers)]}}}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u", "operation": "CREATE", "namespace": NAME,
                                   "kind": {"group": "batch", "version": "v1", "kind": "Job"},
                                   "userInfo": {"username": "eve"}, "object": job}}).encode()


def attack_reviews(threads: int, seconds: float) -> dict[str, Any]:
    body = review_body(100_000)
    url = f"https://127.0.0.1:{PYKUEUE_PORT}{WEBHOOK}"
    codes: Counter[str] = Counter()
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def loop() -> None:
        with httpx.Client(verify=insecure(), timeout=60) as c:
            while time.monotonic() < end:
                try:
                    k = str(c.post(url, content=body,
                                   headers={"content-type": "application/json"}).status_code)
                except httpx.HTTPError as exc:
                    k = type(exc).__name__
                with lock:
                    codes[k] += 1

    lease, prober = LeaseWatch(), Prober()
    lease.start()
    prober.start()
    workers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    prober.stop.set()
    lease.stop.set()
    prober.join()
    lease.join()
    return {"body_bytes": len(body), "threads": threads, "seconds": seconds,
            "answers": dict(codes), "probe": prober.report(),
            "longest_lease_renewal_gap_s": round(lease.longest, 1),
            "lease_holders": sorted(lease.holders)}


async def _hold_one(size: int, hold: float) -> str:
    try:
        r, w = await asyncio.open_connection("127.0.0.1", PYKUEUE_PORT, ssl=insecure())
        w.write(f"POST {WEBHOOK} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {size}\r\n\r\n".encode())
        w.write(b"x" * (size - 1))
        await w.drain()
        await asyncio.sleep(hold)
        line = await asyncio.wait_for(r.readline(), 30)
        w.close()
        return line.decode(errors="replace").split(" ")[1] if line else "closed"
    except (OSError, TimeoutError, IndexError) as exc:
        return type(exc).__name__


def attack_hold(connections: int) -> dict[str, Any]:
    pid = pykueue_pid()
    before = rss_mib(pid)
    peak = before
    prober = Prober()
    prober.start()
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mib(pid))
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    async def all_of() -> list[str]:
        return await asyncio.gather(*(_hold_one(8 * 1024 * 1024 - 4096, 8)
                                      for _ in range(connections)))

    answers = Counter(asyncio.run(all_of()))
    done.set()
    sampler.join()
    prober.stop.set()
    prober.join()
    return {"connections": connections, "rss_before_mib": before, "rss_peak_mib": peak,
            "answers": dict(answers), "probe": prober.report()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="hold,reviews")
    p.add_argument("--connections", type=int, default=100)
    p.add_argument("--threads", type=int, default=30)
    p.add_argument("--seconds", type=float, default=60)
    a = p.parse_args()
    ensure_queue(admin_client())
    out: dict[str, Any] = {"pykueue_port": PYKUEUE_PORT, "lab": os.environ.get("LAB_STATE_DIR")}
    only = set(a.only.split(","))
    if "hold" in only:
        out["hold"] = attack_hold(a.connections)
    if "reviews" in only:
        out["reviews"] = attack_reviews(a.threads, a.seconds)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
