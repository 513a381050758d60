"""The FastAPI applications: ``create_app(settings)`` wires the HTTP adapters and the lifespan.

One process serves, over HTTPS, the webhooks of every job kind
(``/mutate-<group>-<version>-<kind>``, ``/validate-...``: docs/webhook.md), the scheduler
extender (``/scheduler/filter``, ``/scheduler/prioritize``), the status API (``/api/v1/...``),
the dashboard (``/dashboard``), health (``/healthz``, ``/readyz``) and ``/metrics``; the
lifespan starts and stops the controllers (``app.controllers``) in the same event loop.
Kueue's visibility API (``/apis/visibility.kueue.x-k8s.io/...``, ``/openapi/v2``, ``/openapi/v3``)
is a second application, ``app.state.visibility_app`` (None when not served), for the
visibility listener (``app.serving``): it has no lifespan and shares the first one's
``state``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.api import dashboard, extender, health, status, visibility, webhook
from app.api.access import CachedAccessReviewer, ClientLimiter, KubeAccessReviewer
from app.api.health import metrics_registry
from app.api.limits import BodyLimitMiddleware, LoopShare
from app.api.requestheader import RequestHeaderAuth
from app.config import Settings
from app.controllers.metrics import install as install_metrics
from app.controllers.metrics import replica_role
from app.kube.context import WL


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the application for ``settings`` (defaults from the environment)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not settings.controllers_enabled:
            yield
            return
        from app.controllers.manager import Manager

        manager = Manager(settings, metrics=getattr(app.state, "metrics_recorder", None))
        await manager.start()
        app.state.reconciler = manager
        app.state.admission_lookup = manager.admission_lookup
        app.state.default_queue_lookup = manager.admission_lookup
        app.state.extender_state = manager.extender_state
        # Status API (app.api.status): the live core, its readiness, and token/access reviews
        # with pykueue's own client (needs create on tokenreviews and subjectaccessreviews).
        app.state.cluster = manager.cluster
        app.state.cluster_ready = manager.ready
        # Visibility API (app.api.visibility): creation times and owners of the Workloads.
        app.state.workload_store = manager.ctx.store(WL) if manager.ctx is not None else None
        sched = getattr(manager, "scheduler", None)
        app.state.eta = getattr(sched, "eta", None)
        # The scheduler's ETA refresher computes the runs within eta_refresh_share; status
        # reads then only read them (a read that computed would let any caller spend the
        # controller's loop outside that share).
        app.state.eta_refreshed = app.state.eta is not None
        # Holding quota, admission checks not all Ready: the status API and /metrics count
        # them as reserving, not admitted (as the CRD status writer does).
        lifecycle = getattr(sched, "lifecycle", None)
        app.state.awaiting_checks = (lifecycle.awaiting_checks if lifecycle is not None
                                     else frozenset())
        # Dashboard (app.api.dashboard): usage history and recent preemptions.
        app.state.history = getattr(sched, "history", None)
        app.state.preemptions = getattr(sched, "preemptions", None)
        # Reviews have a client of their own: a flood of tokens must not
        # queue the controllers' requests, and the per-client limit answers 429 before any
        # review is sent.
        assert manager.ctx is not None
        ar = settings.access_review
        review_api = manager.ctx.client.companion(ar.qps, ar.burst, max_wait=ar.max_wait_seconds)
        app.state.access_reviewer = CachedAccessReviewer(
            KubeAccessReviewer(review_api), ttl=ar.ttl_seconds,
            negative_ttl=ar.negative_ttl_seconds, max_entries=ar.max_entries,
            limiter=ClientLimiter(ar.per_client_qps, ar.per_client_burst))
        checks = getattr(app.state, "ready_checks", None)
        if checks is None:
            checks = app.state.ready_checks = []
        checks.append(manager.ready)
        try:
            yield
        finally:
            await manager.stop()
            await review_api.close()

    # The OpenAPI document and its UIs describe every endpoint to anyone: off unless enabled.
    docs = settings.server.openapi
    app = FastAPI(title="pykueue", version="0.1.0", lifespan=lifespan,
                  openapi_url="/openapi.json" if docs else None,
                  docs_url="/docs" if docs else None, redoc_url="/redoc" if docs else None)
    app.state.settings = settings
    app.state.large_body_pacer = LoopShare(settings.server.large_body_loop_share,
                                           settings.server.large_body_max_wait_seconds)
    # Queue metrics (app.controllers.metrics): gauges read app.state.cluster at scrape time;
    # the recorder is for the reconciler's counters.
    app.state.metrics_recorder = install_metrics(
        metrics_registry(app), lambda: getattr(app.state, "cluster", None),
        replica_role(settings.leader_election.enabled,
                     lambda: bool(getattr(getattr(app.state, "reconciler", None), "is_leader",
                                          False))),
        lambda: getattr(app.state, "awaiting_checks", frozenset()))
    for module in (webhook, extender, status, dashboard, health):
        app.include_router(module.router)
    app.state.visibility_app = None
    if settings.visibility.served:
        # The request-header (front-proxy) CA: from the file setting here, or loaded from
        # kube-system/extension-apiserver-authentication by `pykueue serve` and set on
        # app.state.visibility_auth before serving (the visibility listener's TLS trusts it).
        app.state.visibility_auth = RequestHeaderAuth.from_settings(settings.visibility)
        app.state.visibility_app = create_visibility_app(app)
    dashboard.mount_static(app)
    _limit_bodies(app, settings)
    return app


def create_visibility_app(main: FastAPI) -> FastAPI:
    """The visibility API's application: its routes only, no lifespan, ``main``'s state (the
    core, the access reviewer, ``visibility_auth``)."""
    vis = FastAPI(title="pykueue visibility", version="0.1.0", openapi_url=None,
                  docs_url=None, redoc_url=None)
    vis.state = main.state
    vis.include_router(visibility.router)
    _limit_bodies(vis, main.state.settings)
    return vis


def _limit_bodies(app: FastAPI, settings: Settings) -> None:
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.server.max_body_bytes,
                       body_timeout=settings.server.body_timeout_seconds,
                       in_flight_bytes=settings.server.max_body_bytes_in_flight)
