"""A dashboard to look at without a cluster, and the screenshots under docs/.

Builds a core state around the current time by playing two hours of a seeded GPU workload
(cohort ai: research-cq and inference-cq, A100 and L4 flavors, borrowing and reclaim; a
cpu-only batch-cq), recording the usage history and the preemptions as ``pykueue serve``
would, then serves the app over HTTPS with the test token table (``admin-token``: every
view; ``research-token``: namespace research only).

    .venv/bin/python hack/dashboard_demo.py                 # https://127.0.0.1:18099/dashboard#token=admin-token
    .venv/bin/python hack/dashboard_demo.py --screenshots docs   # needs chromium (make browser)
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.controllers.history import PreemptionLog, UsageHistory  # noqa: E402
from app.core.decisions import Admit, Preempt  # noqa: E402
from app.core.eta import EtaBoard, RuntimeModel  # noqa: E402
from app.core.scheduling_cycle import Scheduler  # noqa: E402
from app.core.spec import LocalQueue  # noqa: E402
from app.core.types import ClusterQueueName, WorkloadKey  # noqa: E402
from certs.pki import ensure_certs  # noqa: E402
from tests.builders import Sim, cluster_queue, workload  # noqa: E402
from tests.status_server import Server  # noqa: E402

STEP = 30.0


def build(now: float, seed: int = 7) -> tuple[Scheduler, UsageHistory, PreemptionLog, RuntimeModel]:
    rng = random.Random(seed)
    sim = Sim(
        cluster_queue("research-cq").cohort("ai")
        .flavor("a100", gpu=4, borrowing_limit=4).flavor("l4", gpu=4, borrowing_limit=4),
        cluster_queue("inference-cq").cohort("ai").preemption(reclaim="Any")
        .flavor("a100", gpu=4, borrowing_limit=4).flavor("l4", gpu=4, borrowing_limit=4),
        cluster_queue("batch-cq").flavor("default-flavor", cpu=32, memory="128Gi"),
        namespaces={"research": {}, "inference": {}, "batch": {}})
    c = sim.c
    for ns, cq in (("research", "research-cq"), ("inference", "inference-cq"),
                   ("batch", "batch-cq")):
        c.add_local_queue(LocalQueue(ns, ns, ClusterQueueName(cq)))
    history, log, model = UsageHistory(), PreemptionLog(), RuntimeModel()
    ends: dict[WorkloadKey, tuple[float, float]] = {}
    n = 0
    t = now - 2 * 3600
    while t <= now:
        for key, (end, start) in list(ends.items()):
            if end <= t:
                model.observe(c.domain_workload(key), end - start)
                c.finish(key)
                del ends[key]
        for ns, rate in (("research", 0.07), ("inference", 0.04), ("batch", 0.08)):
            if rng.random() < rate:
                n += 1
                b = workload(f"{ns}/{ns[:5]}-{n}").queue(ns)
                if ns == "batch":
                    b = b.pods(rng.choice((1, 2, 4)), cpu=4, memory="8Gi").limit(1800)
                else:
                    b = b.pods(rng.choice((1, 2, 2, 4, 6)), gpu=1)
                    if ns == "inference" or rng.random() < 0.5:
                        b = b.limit(rng.choice((600, 1200, 2400)))
                c.add_workload(b.build(creation=t))
        for _ in range(50):
            ds = c.schedule(t)
            for d in ds:
                if isinstance(d, Admit):
                    wl = c.domain_workload(d.workload)
                    c.update_workload(replace(wl, quota_reserved_at=t))
                    run = wl.max_execution_seconds or rng.lognormvariate(7.2, 0.8)
                    if wl.max_execution_seconds:
                        run *= rng.uniform(0.5, 1.0)
                    ends[d.workload] = (t + run, t)
                elif isinstance(d, Preempt) and d.victims:
                    log.record(d, t)
                    for v in d.victims:
                        c.finish_eviction(v.workload, t)
                        ends.pop(v.workload, None)
            if not any(isinstance(d, (Admit, Preempt)) for d in ds):
                break
        history.sample(c, t)
        t += STEP
    return c, history, log, model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=18099)
    ap.add_argument("--screenshots", type=Path, help="write dashboard-admin.png and "
                    "dashboard-user.png here, then exit")
    a = ap.parse_args()
    now = time.time()
    cluster, history, log, model = build(now)
    certs = Path(tempfile.mkdtemp(prefix="pykueue-demo-"))
    ensure_certs(certs)
    server = Server(certs, cluster)
    if a.screenshots is None:
        server.port = a.port
        server.server.config.port = a.port
    server.app.state.eta = EtaBoard(model)
    server.app.state.history = history
    server.app.state.preemptions = log
    server.start()
    if a.screenshots is None:
        print(f"{server.url}/dashboard#token=admin-token  (or #token=research-token); Ctrl-C")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            server.stop()
        return
    from tests.browser import Browser

    browser = Browser(width=1400, height=900)
    try:
        for token, name, needle in (("admin-token", "dashboard-admin.png", "History"),
                                    ("research-token", "dashboard-user.png", "My Workloads")):
            browser.open("about:blank")
            browser.js("sessionStorage.clear()")
            browser.open(f"{server.url}/dashboard#token={token}")
            browser.wait_text(needle)
            time.sleep(1.0)  # let the charts draw
            browser.screenshot(a.screenshots / name)
            print(f"wrote {a.screenshots / name}")
    finally:
        browser.close()
        server.stop()


if __name__ == "__main__":
    main()
