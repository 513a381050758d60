"""Visibility API latency: a LocalQueue's and a ClusterQueue's pending list with N pending
Workloads (default 10,000) in one ClusterQueue.

Usage: ``.venv/bin/python bench/visibility_latency.py [--pending 10000] [--calls 200]``

Builds the admission core in process (one ClusterQueue of 1 CPU held by one admitted Workload,
N one-CPU Workloads pending behind it in one LocalQueue, priorities 0..9), then calls the
visibility listener's application (``create_app``'s ``state.visibility_app``) through
``httpx.ASGITransport`` as kube-apiserver's front-proxy would (a client certificate of a
throwaway front-proxy CA, ``X-Remote-User`` of a user allowed by an in-process access table):
the handler, the authentication, the review cache and the JSON, without TLS or kube-apiserver.
Prints one JSON document: p50 / p99 / max in milliseconds per call (default limit 1000, and
``limit=10``), and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.api.access import Grant, StaticAccessReviewer  # noqa: E402
from app.config import LeaderElectionSettings, Settings, VisibilitySettings  # noqa: E402
from app.core.spec import LocalQueue  # noqa: E402
from app.core.types import ClusterQueueName  # noqa: E402
from app.main import create_app  # noqa: E402
from certs.pki import ensure_ca, ensure_leaf  # noqa: E402
from tests.builders import Sim, cluster_queue, workload  # noqa: E402

G = "/apis/visibility.kueue.x-k8s.io/v1beta2"


def build(pending: int) -> Any:
    sim = Sim(cluster_queue("cq").flavor("f", cpu=1), namespaces={"ns": {}})
    sim.c.add_local_queue(LocalQueue("ns", "lq", ClusterQueueName("cq")))
    sim.submit(workload("ns/holder").pods(1, cpu=1))
    sim.settle()
    # Queued, not cycled: a list's cost does not depend on the reasons the cycles write.
    sim.submit(*(workload(f"ns/w{i}").priority(i % 10).pods(1, cpu=1) for i in range(pending)))
    return sim.c


async def run(pending: int, calls: int) -> dict[str, Any]:
    import httpx

    d = Path(tempfile.mkdtemp(prefix="visibility-bench-"))
    ensure_ca(d, common_name="front-proxy-ca")
    ensure_leaf(d, "proxy", "front-proxy-client", server=False)
    cert = (d / "proxy.crt").read_text()
    app = create_app(Settings(controllers_enabled=False,
                              leader_election=LeaderElectionSettings(enabled=False),
                              visibility=VisibilitySettings(
                                  requestheader_client_ca_file=d / "ca.crt"))
                     ).state.visibility_app
    t0 = time.perf_counter()
    app.state.cluster = build(pending)
    built = time.perf_counter() - t0
    app.state.access_reviewer = StaticAccessReviewer({}, [
        Grant("viewer", ("get",), "visibility.kueue.x-k8s.io",
              ("localqueues/pendingworkloads", "clusterqueues/pendingworkloads"))])

    async def asgi(scope, receive, send):
        scope.setdefault("extensions", {})["tls"] = {"client_cert_chain": [cert]}
        await app(scope, receive, send)

    out: dict[str, Any] = {"pending": pending, "calls": calls,
                           "core_build_seconds": round(built, 1)}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                 base_url="http://bench") as c:
        for label, path in (("localqueue", f"{G}/namespaces/ns/localqueues/lq/pendingworkloads"),
                            ("localqueue_limit10",
                             f"{G}/namespaces/ns/localqueues/lq/pendingworkloads?limit=10"),
                            ("clusterqueue", f"{G}/clusterqueues/cq/pendingworkloads")):
            times = []
            for _ in range(calls):
                t = time.perf_counter()
                r = await c.get(path, headers={"X-Remote-User": "viewer"})
                times.append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200, r.text
            times.sort()
            out[label] = {"p50_ms": round(statistics.median(times), 1),
                          "p99_ms": round(times[int(len(times) * 0.99) - 1], 1),
                          "max_ms": round(times[-1], 1),
                          "items": len(r.json()["items"]), "bytes": len(r.content)}
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pending", type=int, default=10_000)
    p.add_argument("--calls", type=int, default=200)
    a = p.parse_args()
    print(json.dumps(asyncio.run(run(a.pending, a.calls)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
