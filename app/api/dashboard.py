"""HTTP adapter: the dashboard (a page and its one JSON view), on the status API's port.

- ``GET /dashboard``: the page (``app/dashboard/static/index.html``); ``/dashboard/static/*``
  its script, style and the vendored uPlot. They hold no data, so they need no token.
- ``GET /api/v1/dashboard``: everything the page shows, for the user of the bearer token
  (checked as the status API checks it: ``app.api.status.authenticate``, TokenReview +
  SubjectAccessReview, cached 10 s). With ``get clusterqueues`` (cluster-wide) the admin
  part: the cohort tree, per ClusterQueue per flavor and resource nominal / borrowed / lent /
  used (GPUs first), counts, recent preemptions and the usage history (CPU in cores, memory
  in GiB, the rest as counted). For everyone, the
  Workloads (pending and admitted) and LocalQueues of the namespaces where the user may
  ``get localqueues``, with position, reason and ETA. A namespace the user may not read is
  left out, not refused.

Live updates: the page polls; the answer carries an ``ETag`` (a hash of the body, which holds
absolute times only, so an unchanged state gives the same tag) and ``If-None-Match`` with it
gets ``304 Not Modified``. Cost: O(ClusterQueues x history samples + visible Workloads) per
request; the page asks every 5 s.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from app.api.access import cluster_queue_access, local_queue_access
from app.api.status import Credentials, allowed, authenticate, cluster_view, rfc3339
from app.controllers.cluster_view import ClusterView, local_queue_positions_of
from app.core.eta import Eta
from app.core.quantity import format_quantity
from app.core.types import ClusterQueueName
from app.dashboard import INDEX_HTML, STATIC_DIR

router = APIRouter(tags=["dashboard"])

HISTORY_POINTS = 240  # at most this many points per chart (older samples are thinned)


def mount_static(app: Any) -> None:
    """Serve ``app/dashboard/static`` at ``/dashboard/static``."""
    app.mount("/dashboard/static", StaticFiles(directory=STATIC_DIR), name="dashboard-static")


@router.get("/dashboard", include_in_schema=False)
async def page() -> FileResponse:
    """The dashboard page (no data in it: it asks ``/api/v1/dashboard`` with a token)."""
    return FileResponse(INDEX_HTML, media_type="text/html",
                        headers={"Cache-Control": "no-cache"})


def _gpu_first(resource: str) -> tuple[int, str]:
    r = resource.lower()
    return (0 if "gpu" in r else 1 if r == "cpu" else 2 if r == "memory" else 3), resource


def _eta(e: Eta | None) -> dict[str, Any] | None:
    if e is None:
        return None
    out: dict[str, Any] = {"start": None if e.start is None else rfc3339(e.start),
                           "confidence": e.confidence, "basis": e.basis}
    if e.start is not None and e.earliest is not None:
        # Gott's 50% interval (app.core.eta.Eta): absolute times, so the ETag stays put
        # between recomputations.
        out["earliest"] = rfc3339(e.earliest)
        out["latest"] = None if e.latest is None else rfc3339(e.latest)
    return out


def _cluster_queues(view: ClusterView) -> list[dict[str, Any]]:
    out = []
    for v in view.cluster_queues():
        st = v.status
        resources = sorted(st.resources, key=lambda r: (_gpu_first(r.resource), r.flavor))
        out.append({
            "name": st.name, "cohort": st.cohort, "active": st.active, "reason": st.reason,
            "pending": st.pending, "inadmissible": v.pending_inadmissible,
            "admitted": v.reserving,
            "resources": [{
                "flavor": r.flavor, "resource": r.resource,
                # Raw amounts (milli-CPU, bytes, counts) size the bars; strings are for people.
                "nominal": r.nominal, "used": r.usage, "borrowed": r.borrowed, "lent": r.lent,
                "borrowingLimit": r.borrowing_limit,
                "text": {k: format_quantity(getattr(r, a), r.resource) for k, a in (
                    ("nominal", "nominal"), ("used", "usage"), ("borrowed", "borrowed"),
                    ("lent", "lent"), ("available", "available"))},
            } for r in resources],
        })
    return out


def _cohorts(cqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tree: dict[str, list[str]] = {}
    for cq in cqs:
        tree.setdefault(cq["cohort"] or "", []).append(cq["name"])
    return [{"name": name or None, "clusterQueues": members}
            for name, members in sorted(tree.items(), key=lambda kv: (kv[0] == "", kv[0]))]


def _display(resource: str, amount: int) -> float:
    """A chart value: CPU in cores (the core counts milli-CPU), memory in GiB (bytes),
    anything else as counted."""
    if resource == "cpu":
        return amount / 1000
    if resource == "memory" or resource.startswith("hugepages-"):
        return round(amount / 2**30, 3)
    return amount


def _history(request: Request, names: list[ClusterQueueName]) -> dict[str, Any]:
    history = getattr(request.app.state, "history", None)
    if history is None:
        return {}
    out: dict[str, Any] = {}
    for name in names:
        samples = history.of(name)
        step = max(1, -(-len(samples) // HISTORY_POINTS))
        samples = samples[::-1][::step][::-1]  # keep the newest, thin the rest evenly
        keys = sorted({fr for s in samples for fr in s.used},
                      key=lambda fr: (_gpu_first(fr.resource), fr.flavor))
        out[name] = {
            "t": [round(s.t, 3) for s in samples],
            "pending": [s.pending for s in samples],
            "admitted": [s.admitted for s in samples],
            "used": {f"{fr.flavor}/{fr.resource}": [_display(fr.resource, s.used.get(fr, 0))
                                                     for s in samples]
                     for fr in keys},
        }
    return out


def _preemptions(request: Request) -> list[dict[str, Any]]:
    log = getattr(request.app.state, "preemptions", None)
    if log is None:
        return []
    return [{"time": rfc3339(r.t), "preemptor": r.preemptor, "clusterQueue": r.cluster_queue,
             "victims": [{"workload": w, "reason": why} for w, why in r.victims]}
            for r in log.recent()[:20]]


def _workloads(view: ClusterView, namespaces: set[str]) -> list[dict[str, Any]]:
    """Pending and admitted Workloads of ``namespaces``: pending in admission order per
    ClusterQueue, then admitted ones by name."""
    c = view.cluster
    out: list[dict[str, Any]] = []
    admitted: list[dict[str, Any]] = []
    for name in view.cluster_queue_names():
        entries = view.pending(name) or []
        mine = [e for e in entries if e.workload.split("/", 1)[0] in namespaces]
        if mine:
            lqpos = local_queue_positions_of(entries)
            for p in view.details(mine, name, lqpos):
                out.append({
                    "namespace": p.namespace, "name": p.name, "localQueue": p.local_queue,
                    "clusterQueue": name, "state": "pending", "position": p.position,
                    "positionInLocalQueue": p.position_in_local_queue,
                    "inadmissible": p.inadmissible, "reason": p.reason,
                    "message": p.message, "eta": _eta(p.eta)})
        for key in c.admitted(name):
            ns, wl_name = key.split("/", 1)
            if ns not in namespaces:
                continue
            w = view.workload(ns, wl_name)
            if w is None:
                continue
            flavors = sorted({f for a in (w.info.admission.pod_set_assignments
                                          if w.info.admission else ())
                              for f in a.flavors.values()})
            admitted.append({
                "namespace": ns, "name": wl_name, "localQueue": w.local_queue,
                "clusterQueue": name, "state": w.info.state, "flavors": flavors,
                "usage": {f"{fr.flavor}/{fr.resource}": format_quantity(v, fr.resource)
                          for fr, v in sorted(w.usage.items())}})
    return out + sorted(admitted, key=lambda w: (w["namespace"], w["name"]))


@router.get("/api/v1/dashboard", include_in_schema=False)
async def dashboard_view(request: Request, credentials: Credentials) -> Response:
    """The dashboard's JSON for the token's user (see the module doc); 304 when the
    ``If-None-Match`` tag still matches."""
    reviewer, user = await authenticate(request, credentials)
    view = cluster_view(request)
    client = request.client.host if request.client else ""
    admin = await allowed(reviewer, user, cluster_queue_access(), client)
    lq_namespaces = sorted({lq.namespace for lq in view.local_queues()})
    namespaces = set()
    for ns in lq_namespaces:
        if admin or await allowed(reviewer, user, local_queue_access(ns), client):
            namespaces.add(ns)
    body: dict[str, Any] = {
        "user": user.username, "admin": admin, "namespaces": sorted(namespaces),
        "localQueues": [{
            "namespace": lq.namespace, "name": lq.name, "clusterQueue": lq.cluster_queue,
            "active": lq.active, "reason": lq.reason, "pending": lq.pending,
            "admitted": lq.reserving,
        } for lq in view.local_queues() if lq.namespace in namespaces],
        "workloads": _workloads(view, namespaces),
    }
    if admin:
        cqs = _cluster_queues(view)
        body |= {"clusterQueues": cqs, "cohorts": _cohorts(cqs),
                 "preemptions": _preemptions(request),
                 "history": _history(request, [cq["name"] for cq in cqs])}
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    tag = '"' + hashlib.sha256(raw).hexdigest()[:32] + '"'
    headers = {"ETag": tag, "Cache-Control": "no-cache", "Vary": "Authorization"}
    if tag in {t.strip() for t in request.headers.get("if-none-match", "").split(",")}:
        return Response(status_code=304, headers=headers)
    return Response(raw, media_type="application/json",
                    headers=headers | {"X-Generated-At": rfc3339(time.time())})

