"""breaker6: what a tenant with edit rights in one namespace can make the ETA code compute.

The background refresher draws on ``eta_refresh_share`` (app/controllers/pending_messages.py
``_eta_refresher``), but every status request that lists pending Workloads with their ETA
(``ClusterView._eta`` -> ``EtaBoard.for_cluster_queue``) advances the cohort's run by a
slice of up to ``eta_budget_ms`` on the controller's event loop, outside that share; and
``ArrivalModel`` kept a class per (LocalQueue, priority, shape) for ever."""

from __future__ import annotations

import time

from app.controllers.cluster_view import ClusterView
from app.core.eta import ArrivalModel, EtaBoard, RuntimeModel
from tests.builders import Sim, cluster_queue, workload

T = 1_000_000.0


def _flooded(n: int) -> Sim:
    """Cohort co: q1 runs 8 one-hour Workloads (4 CPU borrowed from q0); a tenant's
    LocalQueue in q0 holds ``n`` pending 1-minute Workloads, each of its own shape and
    priority (so no two share a nomination class and the forward run is long)."""
    s = Sim(*[cluster_queue(f"q{i}").cohort("co").flavor("default-flavor", cpu=4)
              .preemption(within="LowerPriority", reclaim="Any") for i in range(2)])
    for i in range(8):
        s.c.add_workload(workload(f"r{i}").cq("q1").pods(1, cpu=1).limit(3600)
                         .build(creation=T - 10))
    while s.c.schedule(T):
        pass
    for i in range(n):
        s.c.add_workload(workload(f"f{i}").cq("q0").pods(1, cpu=f"{100 + i}m").priority(i)
                         .limit(60).build(creation=T + i * 0.001))
    s.c.add_workload(workload("other").cq("q1").pods(1, cpu=1).build(creation=T))
    return s


def test_status_requests_do_not_compute_eta_beyond_the_refresh_share() -> None:
    """Each status request listing pending Workloads advanced the cohort's ETA run by one
    eta_budget_ms slice on the event loop, outside eta_refresh_share (a tenant polling its
    own pending list spent the controller's loop at will). Beside the background refresher
    (``pykueue serve``: ``app.state.eta_refreshed``) a view only reads what was computed."""
    s = _flooded(600)
    board = EtaBoard(RuntimeModel(), budget_ms=5.0, clock=time.perf_counter)
    requests = 40

    def read() -> dict:
        view = ClusterView(s.c, eta=board, clock=lambda: T + 1, eta_advance=False)
        found = view.local_queue_pending("ns", "lq-q0")
        assert found is not None
        cq, entries = found
        return {d.key: d for d in
                view.details(entries[:10], cq, {e.workload: i for i, e in enumerate(entries)})}

    for _ in range(requests):
        read()
    assert board.slices == 0, (board.slices, round(board.total_ms), "ms")
    # What the refresher computes is what the reads then serve.
    while not board.advance(s.c, "q0", T + 1):
        pass
    assert board.slices > 0
    got = read()
    assert got and all(d.eta is not None and d.eta.confidence != "unknown"
                       for d in got.values()), got
    # A view without a refresher beside it (the default) still computes its slice.
    ClusterView(s.c, eta=EtaBoard(RuntimeModel(), budget_ms=5.0, clock=time.perf_counter),
                clock=lambda: T + 1).local_queue_pending("ns", "lq-q0")


def test_arrival_classes_older_than_the_window_are_forgotten() -> None:
    """A tenant creating Workloads of ever new shapes (cpu 100m, 101m, ...) made one class
    each, kept for ever with its latest Workload; classes with no arrival within the window
    project nothing and are dropped, and a class still going keeps its projection."""
    am = ArrivalModel(window_seconds=3600.0)
    for i in range(5000):
        am.observe(workload(f"w{i}").pods(1, cpu=f"{100 + i}m").build(creation=T + i))
    later = T + 5000 + 2 * 3600.0
    am.observe(workload("new").pods(1, cpu="1").build(creation=later))
    assert am.future(later, {"ns/lq"}) == []
    assert len(am._classes) < 100  # noqa: SLF001 - the leak is the size of this dict
    # A stream that is still going is kept through the sweeps and still projected.
    for i in range(10):
        am.observe(workload(f"s{i}").pods(1, cpu="2").build(creation=later + i))
    for i in range(3000):
        am.observe(workload(f"x{i}").pods(1, cpu=f"{5000 + i}m").build(creation=later + 10))
    assert len(am.future(later + 10, {"ns/lq"})) > 0


def test_an_eta_past_year_9999_is_answered_not_a_500(certs) -> None:
    """A tenant queues 125 Workloads, each the whole ClusterQueue for the largest
    maximumExecutionTimeSeconds (int32: 68 years), so they run one after another in the
    projection; another team's Workload behind them starts after year 9999. Its LocalQueue's
    pending list (``GET /api/v1/namespaces/ns/localqueues/lq-q/pending`` over TLS) answered
    500 (``datetime`` out of range); the time is capped at 9999-12-31T23:59:59Z."""
    import ssl

    import httpx

    from tests.status_server import Server

    now = time.time()
    s = Sim(cluster_queue("q").flavor("default-flavor", cpu=1))
    for i in range(125):
        s.c.add_workload(workload(f"t{i}").cq("q").pods(1, cpu=1).limit(2147483647)
                         .build(creation=now - 200 + i * 0.01))
    s.c.add_workload(workload("other").cq("q").pods(1, cpu=1).limit(60)
                     .build(creation=now - 1))
    for _ in range(300):
        if not s.c.schedule(now):
            break
    server = Server(certs, cluster=s.c)
    server.app.state.eta = EtaBoard(RuntimeModel())
    server.start()
    try:
        r = httpx.get(server.url + "/api/v1/namespaces/ns/localqueues/lq-q/pending",
                      params={"limit": 1000},
                      verify=ssl.create_default_context(cafile=str(certs / "ca.crt")),
                      headers={"Authorization": "Bearer admin-token"})
    finally:
        server.stop()
    assert r.status_code == 200, r.text
    last = r.json()["items"][-1]
    assert last["name"] == "other"
    assert last["eta"]["start"] == "9999-12-31T23:59:59Z"
    assert last["eta"]["waitSeconds"] > 250 * 365 * 86400
