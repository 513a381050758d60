"""``pykueue status``: the queue status API (``app.api.status``) as tables in a terminal.

``fetch(client, namespace, limit)`` reads one snapshot over HTTPS: without a namespace every
ClusterQueue, the head of each one's pending list and the cohort tree (``cohorts``: the API's
list, or None when the token may not read cohorts: ``forbidden`` then maps ``cohorts`` to the
API's 403 message, and the tables say the tree is not shown and why; likewise ``pending``
when the token may read ClusterQueues but not their pending lists); with one,
that namespace's LocalQueues and theirs. ``render(snapshot)`` draws it with rich: one line per
queue (``summary``: GPUs first, then the other resources, ``used/nominal`` per flavor and what
it borrows; a usage bar for its first resource), or with ``wide=True`` (``-o wide``) the full
table, one row per flavor and resource with a usage bar each (``█`` within nominal quota, ``▓``
borrowed beyond it, ``░`` free); then the pending Workloads with their position, the reason
they wait and their expected start (the API's ``eta``); then, when there are cohorts, the
cohort tree (``cohort_tree``: each cohort with its parent above it, its ClusterQueues below,
its subtree ``used/subtree quota`` per flavor and what it borrows from its parent, its weight
and weighted share under fair sharing, and why it is inactive). ``--output json`` prints the
snapshot itself (the API's JSON, unchanged).

Connection (first found wins):

- server: ``--server``, ``$PYKUEUE_URL``, else ``https://<PYKUEUE_SERVER__HOST>:<PORT>`` of the
  local settings (127.0.0.1:9443 by default; the port ``$PYKUEUE_PORT`` when set, the lab's);
- token: ``--token``, ``$PYKUEUE_TOKEN``, else the current user's ``token`` / ``tokenFile`` of
  the kubeconfig (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``); exec plugins are not
  run: use ``kubectl create token NAME`` then;
- CA: ``--ca-file``, else ``PYKUEUE_SERVER__CA_FILE`` (certs/out/ca.crt) when it exists, else
  the system trust store.

Errors: ``StatusError`` (HTTP status and the API's message) and ``ConfigError`` (no token,
unreadable kubeconfig); the command maps them to exit codes 1 and 2.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from app.core.quantity import QuantityError, parse_quantity

BAR_WIDTH = 20
Snapshot = dict[str, Any]


class ConfigError(Exception):
    """The command cannot connect as asked (no token, bad kubeconfig or CA file)."""


class StatusError(Exception):
    """The status API answered with an error; ``status`` is the HTTP code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


# ------------------------------------------------------------------------------ connection


def _kubeconfig_paths(explicit: Path | None) -> list[Path]:
    if explicit is not None:
        return [explicit]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [Path.home() / ".kube" / "config"]


def token_from_kubeconfig(path: Path | None = None) -> str | None:
    """The bearer token of the current context's user (``token`` or ``tokenFile``), or None
    when there is no kubeconfig or its user has no token. Raises ``ConfigError`` when the
    file cannot be read or the user authenticates otherwise (exec plugin, client cert)."""
    for p in _kubeconfig_paths(path):
        if not p.is_file():
            continue
        try:
            cfg = yaml.safe_load(p.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read kubeconfig {p}: {exc}") from exc
        current = cfg.get("current-context")
        ctx = next((c.get("context") or {} for c in cfg.get("contexts") or []
                    if c.get("name") == current), None)
        if ctx is None:
            return None
        user = next((u.get("user") or {} for u in cfg.get("users") or []
                     if u.get("name") == ctx.get("user")), {})
        if user.get("token"):
            return str(user["token"])
        if user.get("tokenFile"):
            try:
                return Path(user["tokenFile"]).read_text().strip()
            except OSError as exc:
                raise ConfigError(f"cannot read tokenFile of kubeconfig {p}: {exc}") from exc
        if user.get("exec") or user.get("client-certificate") or \
                user.get("client-certificate-data"):
            raise ConfigError(
                f"the kubeconfig user {ctx.get('user')!r} has no bearer token (exec plugin or "
                "client certificate); pass --token \"$(kubectl create token NAME -n NS)\"")
        return None
    return None


def default_server() -> str:
    """``https://host:port`` of the local ``pykueue serve`` settings; the port is the lab's
    ``$PYKUEUE_PORT`` when set (hack/lab.py starts pykueue there, README "The lab")."""
    from app.config import Settings

    s = Settings().server
    host = "127.0.0.1" if s.host in ("0.0.0.0", "::", "") else s.host
    port = os.environ.get("PYKUEUE_PORT") or s.port
    return f"https://{host}:{port}"


def default_ca() -> Path | None:
    """The CA of the local serving certificate when it exists."""
    from app.config import Settings

    ca = Settings().server.ca_file
    return ca if ca.is_file() else None


class StatusClient:
    """GETs on the status API with a bearer token. ``transport``: an httpx transport to use
    instead of the network (tests pass ``httpx.ASGITransport``)."""

    def __init__(self, server: str, token: str, *, ca_file: Path | None = None,
                 transport: httpx.BaseTransport | None = None, timeout: float = 10.0) -> None:
        if ca_file is not None and not ca_file.is_file():
            raise ConfigError(f"CA file {ca_file} not found")
        verify: Any = ssl.create_default_context(cafile=str(ca_file)) if ca_file else True
        self._http = httpx.Client(base_url=server.rstrip("/"), verify=verify,
                                  headers={"Authorization": f"Bearer {token}"},
                                  transport=transport, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        """The decoded JSON of ``GET path``; ``StatusError`` on an HTTP error."""
        r = self._http.get(path, params={k: v for k, v in params.items() if v is not None})
        if r.status_code != 200:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = None
            if not isinstance(detail, str):
                detail = r.text.strip() or r.reason_phrase
            raise StatusError(r.status_code, detail)
        return r.json()


# ------------------------------------------------------------------------------ snapshot


def fetch(client: StatusClient, namespace: str | None, limit: int) -> Snapshot:
    """One snapshot (see the module doc); ``limit``: pending Workloads per queue."""
    if namespace is None:
        cqs = client.get("/api/v1/clusterqueues")["items"]
        snap: Snapshot = {"clusterQueues": cqs, "pending": {}, "cohorts": None}
        for cq in cqs:
            try:
                snap["pending"][cq["name"]] = client.get(
                    f"/api/v1/clusterqueues/{cq['name']}/pending", limit=limit)
            except StatusError as exc:
                if exc.status != 403:
                    raise
                # `get clusterqueues` without the visibility API's
                # `clusterqueues/pendingworkloads` (Kueue grants them apart): the queues are
                # shown, their pending lists said to be refused, rather than the whole
                # command failing on the first list.
                snap.setdefault("forbidden", {}).setdefault("pending", exc.message)
        try:
            snap["cohorts"] = client.get("/api/v1/cohorts")["items"]
        except StatusError as exc:
            if exc.status != 403:
                raise
            # A ClusterQueue viewer without `get cohorts`: no tree, and the output says so
            # (an empty section would read as "no cohorts").
            snap.setdefault("forbidden", {})["cohorts"] = exc.message
        return snap
    lqs = client.get(f"/api/v1/namespaces/{namespace}/localqueues")["items"]
    pending = {lq["name"]: client.get(
        f"/api/v1/namespaces/{namespace}/localqueues/{lq['name']}/pending", limit=limit)
        for lq in lqs}
    return {"namespace": namespace, "localQueues": lqs, "pending": pending}


# ------------------------------------------------------------------------------ rendering


def _amount(q: str | None, resource: str) -> int | None:
    if q is None:
        return None
    try:
        return parse_quantity(q, resource)
    except QuantityError:
        return None


def usage_bar(used: int, nominal: int, width: int = BAR_WIDTH) -> Text:
    """``width`` cells: ``█`` used within nominal, ``▓`` used beyond it (borrowed), ``░``
    unused nominal. Scaled to max(used, nominal); all ``░`` when both are 0."""
    scale = max(used, nominal)
    if scale <= 0:
        return Text("░" * width, style="dim")
    within = min(used, nominal)
    n_within = round(within * width / scale)
    n_over = round(used * width / scale) - n_within
    n_free = width - n_within - n_over
    bar = Text()
    bar.append("█" * n_within, style="green")
    bar.append("▓" * n_over, style="magenta")
    bar.append("░" * n_free, style="dim")
    return bar


def _quota_line(r: dict[str, Any], bar_width: int = BAR_WIDTH, wrap: bool = False) -> Text:
    res = r["resource"]
    used = _amount(r["used"], res) or 0
    nominal = _amount(r["nominalQuota"], res) or 0
    line = usage_bar(used, nominal, bar_width)
    line.append(f" {r['used']}/{r['nominalQuota']}")
    extras = []
    if r.get("borrowed") not in (None, "0"):
        extras.append(f"borrowed {r['borrowed']}")
    if r.get("lent") not in (None, "0"):
        extras.append(f"lent {r['lent']}")
    if r.get("borrowingLimit") is not None:
        extras.append(f"borrowingLimit {r['borrowingLimit']}")
    extras.append(f"available {r['available']}")
    line.append(("\n" if wrap else "  ") + ", ".join(extras), style="cyan")
    return line


def _age(created: str, now: float) -> str:
    try:
        t = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "?"
    s = max(0, int(now - t))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def _reason(w: dict[str, Any]) -> Text:
    t = Text()
    if w.get("reason"):
        t.append(w["reason"], style="yellow")
        if w.get("message"):
            t.append(": ")
    t.append(w.get("message") or ("" if w.get("reason") else "waiting for a scheduling cycle"))
    return t


def _resource_order(resource: str) -> tuple[int, str]:
    """GPUs (any resource named ``...gpu...``) first, then cpu, memory, the rest by name."""
    r = resource.lower()
    rank = 0 if "gpu" in r else 1 if r == "cpu" else 2 if r == "memory" else 3
    return rank, resource


def _gpus_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The API's per flavor-resource rows, GPUs first (``_resource_order``), then by flavor."""
    return sorted(rows, key=lambda r: (_resource_order(r["resource"]), r["flavor"]))


def _short(resource: str) -> str:
    """``nvidia.com/gpu`` -> ``gpu`` (the summary line has no room for the domain)."""
    return resource.rsplit("/", 1)[-1]


def summary(rows: list[dict[str, Any]], bar_width: int = 8) -> Text:
    """One line for a queue's usage: a bar for its first resource (GPUs first), then per
    resource ``gpu a100 6/4 (borrowing 2), l4 0/4 · cpu default 2/8``. Rows are the API's
    ``resources`` of a ClusterQueue (with ``nominalQuota``) or ``usage`` of a LocalQueue
    (``used`` only)."""
    if not rows:
        return Text("-")
    ordered = _gpus_first(rows)
    line = Text()
    first = ordered[0]
    if "nominalQuota" in first:
        res = first["resource"]
        line.append_text(usage_bar(_amount(first["used"], res) or 0,
                                   _amount(first["nominalQuota"], res) or 0, bar_width))
        line.append(" ")
    by_resource: dict[str, list[str]] = {}
    for r in ordered:
        text = f"{r['flavor']} {r['used']}"
        if "nominalQuota" in r:
            text += f"/{r['nominalQuota']}"
            if r.get("borrowed") not in (None, "0"):
                text += f" (borrowing {r['borrowed']})"
            elif r.get("lent") not in (None, "0"):
                text += f" (lending {r['lent']})"
        by_resource.setdefault(r["resource"], []).append(text)
    line.append(" · ".join(f"{_short(res)} {', '.join(items)}"
                           for res, items in by_resource.items()))
    return line


def eta_cell(w: dict[str, Any]) -> Text:
    """``~12m``, ``~40s``, ``now`` (due), ``unknown (why)`` (the API's ``eta``), with the
    confidence word when it is only an estimate and Gott's 50% interval when the API gives
    one (``~12m (5m-40m) est.``; ``5m-?`` when it has no later bound); ``-`` when the server
    computes no ETAs."""
    e = w.get("eta")
    if not e:
        return Text("-", style="dim")
    if e.get("confidence") == "unknown" or e.get("waitSeconds") is None:
        # Say why (e.g. "no end known": a run ahead has no limit and outlived every
        # finished run of its kind), so "unknown" is not mistaken for "soon".
        why = e.get("basis")
        return Text(f"unknown ({why})" if why else "unknown", style="dim")
    wait = int(e["waitSeconds"])
    # "now" only when due: a start 40 s away is "~40s", not "now".
    text = "now" if wait < 1 else f"~{wait}s" if wait < 60 else f"~{_duration(wait)}"
    span = e.get("range")
    if span:
        late = span.get("latestWaitSeconds")
        text += (f" ({_wait_text(int(span['earliestWaitSeconds']))}-"
                 f"{'?' if late is None else _wait_text(int(late))})")
    t = Text(text)
    if e.get("confidence") == "estimated":
        t.append(" est.", style="dim")
    return t


def _wait_text(s: int) -> str:
    """A wait without the ``~``: ``now``, ``40s``, ``12m``, ``3h05m``."""
    return "now" if s < 1 else f"{s}s" if s < 60 else _duration(s)


def _duration(s: int) -> str:
    if s < 3600:
        return f"{max(1, round(s / 60))}m"
    if s < 172800:
        h, m = divmod(round(s / 60), 60)
        return f"{h}h{m:02d}m" if h < 10 and m else f"{round(s / 3600)}h"
    return f"{round(s / 86400)}d"


# Human-facing positions count from 1 everywhere (this table, the Pending message, the
# dashboard); the API keeps Kueue's 0-based positionInClusterQueue / positionInLocalQueue.
POS_LEGEND = "Pos 1 = next to be admitted (API positionInClusterQueue + 1)"


def _pending_table(title: str, page: dict[str, Any], now: float, *,
                   in_local_queue: bool = False) -> Table:
    """Pending Workloads of one page. ``Pos``: place in the ClusterQueue counted from 1 (1
    is next), as in the Pending message's ``position N``: the API's 0-based
    ``positionInClusterQueue`` + 1; ``In LQ``: the same in the LocalQueue (namespace view).
    The caption says so."""
    meta = page.get("metadata") or {}
    more = meta.get("remainingItemCount") or 0
    caption = POS_LEGEND + (f"; {more} more not shown (use --limit)" if more else "")
    t = Table(title=title, caption=caption, title_justify="left", expand=False)
    t.add_column("Pos", justify="right")
    if in_local_queue:
        t.add_column("In LQ", justify="right")
    for col in ("Workload", "LocalQueue"):
        t.add_column(col, overflow="fold")
    t.add_column("Prio", justify="right")
    t.add_column("Age", justify="right")
    t.add_column("Starts", justify="right")
    t.add_column("Why it waits", overflow="fold", ratio=1)
    for w in page.get("items") or []:
        pos = [str(w["positionInClusterQueue"] + 1)]
        if in_local_queue:
            pos.append(str(w["positionInLocalQueue"] + 1))
        t.add_row(*pos, f"{w['namespace']}/{w['name']}", w["localQueueName"],
                  str(w["priority"]), _age(w["created"], now), eta_cell(w), _reason(w))
    return t


Row = dict[str, Any]


def _queue_table(title: str, columns: tuple[str, ...], last: str, queues: list[Row],
                 head: Callable[[Row], list[Any]], rows_of: Callable[[Row], list[Row]],
                 cell: Callable[[Row], Text], compact: bool = False) -> Table:
    """One row per flavor-resource of each queue: the queue's own ``columns`` (``head(q)``)
    on its first row only, then Flavor, Resource and ``last`` (``cell(r)`` for each of
    ``rows_of(q)``). ``compact`` (narrow terminals): three columns; the queue's name with its
    other columns stacked under it as ``Column: value`` lines, then flavor and resource in
    one cell, then ``last``."""
    t = Table(title=title, title_justify="left")
    heads = (columns[0], "Flavor / resource", last) if compact else (
        *columns, "Flavor", "Resource", last)
    for col in heads:
        # Names wrap rather than being cut with an ellipsis on narrow terminals.
        t.add_column(col, overflow="fold")
    for q in queues:
        first = head(q)
        if compact:
            stacked = Text(str(first[0]), style="bold")
            for name, value in zip(columns[1:], first[1:], strict=True):
                stacked.append(f"\n{name}: ", style="dim")
                stacked.append(value if isinstance(value, Text) else Text(str(value)))
            first = [stacked]
        rows = rows_of(q) or [None]
        for i, r in enumerate(rows):
            cells: list[Any] = first if i == 0 else [""] * len(first)
            end = compact and i == len(rows) - 1  # a rule between queues when stacked
            if r is None:
                t.add_row(*cells, *(["-"] if compact else ["-", "-"]), "-", end_section=end)
            elif compact:
                t.add_row(*cells, f"{r['flavor']}\n{r['resource']}", cell(r), end_section=end)
            else:
                t.add_row(*cells, r["flavor"], r["resource"], cell(r))
    return t


def _active(q: dict[str, Any]) -> Text:
    return Text("yes", style="green") if q["active"] else Text(f"no: {q['reason']}", style="red")


def _counts(q: dict[str, Any]) -> list[str]:
    return [f"{q['pendingWorkloads']} ({q['inadmissibleWorkloads']} inadmissible)",
            str(q["admittedWorkloads"])]


def _summary_table(snap: Snapshot) -> Table:
    """The default view: one line per queue (``summary``)."""
    if "clusterQueues" in snap:
        t = Table(title="ClusterQueues", title_justify="left")
        for col in ("ClusterQueue", "Cohort", "Pending", "Admitted"):
            t.add_column(col, overflow="fold", justify="left" if col[0] == "C" else "right")
        t.add_column("Usage: used/nominal (GPUs first)", overflow="fold")
        for q in snap["clusterQueues"]:
            name = Text(q["name"]) if q["active"] else Text(f"{q['name']} (inactive)",
                                                            style="red")
            t.add_row(name, q.get("cohort") or "-", _pending_count(q),
                      str(q["admittedWorkloads"]), summary(q["resources"]))
        return t
    ns = snap["namespace"]
    t = Table(title=f"LocalQueues in namespace {ns}", title_justify="left")
    for col in ("LocalQueue", "ClusterQueue", "Pending", "Admitted"):
        t.add_column(col, overflow="fold", justify="right" if col[0] in "PA" else "left")
    t.add_column("Used (GPUs first)", overflow="fold")
    for q in snap["localQueues"]:
        name = Text(q["name"]) if q["active"] else Text(f"{q['name']} ({q['reason']})",
                                                        style="red")
        t.add_row(name, q["clusterQueue"], _pending_count(q), str(q["admittedWorkloads"]),
                  summary(q["usage"]))
    return t


def _cohort_label(c: Row) -> Text:
    """``name  gpu a100 8/10 (borrowing 2) · weight 2, share 0`` for one cohort: its
    subtree's usage against its subtree quota (``summary``), its own quota when it has
    one, fair sharing figures when the server has fair sharing on, and why it is inactive."""
    label = Text(c["name"], style="bold")
    if not c.get("explicit", True):
        label.append(" (implicit)", style="dim")
    if not c["active"]:
        label.append(f" inactive: {c['reason']}", style="red")
    rows = [{"flavor": r["flavor"], "resource": r["resource"], "used": r["used"],
             "nominalQuota": r["subtreeQuota"], "borrowed": r["borrowed"]}
            for r in c.get("resources") or []]
    if rows:
        label.append("  ")
        label.append_text(summary(rows))
    own = [f"{_short(r['resource'])} {r['flavor']} {r['nominalQuota']}"
           for r in c.get("resources") or [] if r["nominalQuota"] != "0"]
    if own:
        label.append(f"  own quota {', '.join(own)}", style="cyan")
    if c.get("weightedShare") is not None:
        label.append(f"  weight {c['fairSharingWeight']}, share {c['weightedShare']}",
                     style="cyan")
    if not c["active"] and c.get("message"):
        label.append(f"\n{c['message']}", style="red")
    return label


def cohort_tree(cohorts: list[Row]) -> Tree:
    """The cohort forest: roots (no parent, or a parent nobody declares) with their child
    cohorts and ClusterQueues below; cohorts only reachable through a cycle of parentName
    are listed at the top level with the cycle."""
    by_name = {c["name"]: c for c in cohorts}
    tree = Tree(Text("Cohorts", style="bold"), guide_style="dim")
    seen: set[str] = set()

    def add(parent: Tree, c: Row) -> None:
        seen.add(c["name"])
        node = parent.add(_cohort_label(c))
        for child in c.get("cohorts") or []:
            if child in by_name and child not in seen:
                add(node, by_name[child])
        for cq in c.get("clusterQueues") or []:
            node.add(Text(f"ClusterQueue {cq}"))

    for c in cohorts:
        if c.get("parent") is None or c["parent"] not in by_name:
            add(tree, c)
    for c in cohorts:
        if c["name"] not in seen:
            add(tree, c)
    return tree


def _pending_count(q: dict[str, Any]) -> str:
    # Spelled out: "inadm." puzzled a first-time reader (parked until something changes).
    n, parked = q["pendingWorkloads"], q["inadmissibleWorkloads"]
    return f"{n} ({parked} inadmissible)" if parked else str(n)


# The sections a ``forbidden`` list of a snapshot leaves out, as the note names them.
_SECTIONS = {"cohorts": "cohort tree is", "pending": "pending lists of the ClusterQueues are"}


def render(snap: Snapshot, now: float | None = None, width: int | None = None,
           wide: bool = False) -> RenderableType:
    """The tables of a snapshot (see the module doc): one line per queue, or with ``wide``
    the full table. ``width``: the terminal's columns; in the wide view below 150 the usage
    bars shrink to 8 cells and the queue table stacks its columns (three instead of nine) so
    names and headers stay whole."""
    now = time.time() if now is None else now
    narrow = width is not None and width < 150
    bar_width = 8 if narrow else BAR_WIDTH
    parts: list[RenderableType] = []
    if not wide:
        parts.append(_summary_table(snap))
        kind = "ClusterQueue" if "clusterQueues" in snap else f"LocalQueue {snap['namespace']}/"
        sep = " " if "clusterQueues" in snap else ""
        titles = {name: f"Pending in {kind}{sep}{name}" for name in snap["pending"]}
        in_lq = "clusterQueues" not in snap
    elif "clusterQueues" in snap:
        parts.append(_queue_table(
            "ClusterQueues",
            ("ClusterQueue", "Cohort", "Strategy", "Active", "Pending", "Admitted"),
            "Usage (used/nominal)", snap["clusterQueues"],
            lambda q: [q["name"], q.get("cohort") or "-", q["queueingStrategy"], _active(q),
                       *_counts(q)],
            lambda q: _gpus_first(q["resources"]),
            lambda r: _quota_line(r, bar_width, narrow), narrow))
        titles = {name: f"Pending in ClusterQueue {name}" for name in snap["pending"]}
        in_lq = False
    else:
        ns = snap["namespace"]
        parts.append(_queue_table(
            f"LocalQueues in namespace {ns}",
            ("LocalQueue", "ClusterQueue", "Active", "Pending", "Admitted"),
            "Used", snap["localQueues"],
            lambda q: [q["name"], q["clusterQueue"], _active(q), *_counts(q)],
            lambda q: _gpus_first(q["usage"]), lambda u: Text(u["used"]), narrow))
        titles = {name: f"Pending in LocalQueue {ns}/{name}" for name in snap["pending"]}
        in_lq = True
    for name, page in snap["pending"].items():
        if page.get("items"):
            parts.append(_pending_table(titles[name], page, now, in_local_queue=in_lq))
    if not any(p.get("items") for p in snap["pending"].values()) \
            and "pending" not in (snap.get("forbidden") or {}):
        parts.append(Text("No pending Workloads.", style="green"))
    if snap.get("cohorts"):
        parts.append(cohort_tree(snap["cohorts"]))
    for what, detail in (snap.get("forbidden") or {}).items():
        parts.append(Text(f"The {_SECTIONS.get(what, what + ' is')} not shown: the status API "
                          f"refused it (HTTP 403: {detail}). The ClusterRole "
                          "pykueue-clusterqueue-viewer (manifests/rbac/user_roles.yaml) "
                          "grants it.", style="yellow"))
    return Group(*parts)


@dataclass
class Options:
    """What ``pykueue status`` was asked for (resolved connection settings)."""

    server: str
    token: str
    ca_file: Path | None
    namespace: str | None
    limit: int


def resolve(server: str | None, token: str | None, kubeconfig: Path | None,
            ca_file: Path | None, namespace: str | None, limit: int) -> Options:
    """Apply the defaults of the module doc; ``ConfigError`` when no token is found."""
    tok = token or os.environ.get("PYKUEUE_TOKEN") or token_from_kubeconfig(kubeconfig)
    if not tok:
        raise ConfigError("no bearer token: pass --token, set PYKUEUE_TOKEN, or use a "
                          "kubeconfig whose user has a token (e.g. --token \"$(kubectl create "
                          "token NAME -n NAMESPACE)\")")
    return Options(server or os.environ.get("PYKUEUE_URL") or default_server(), tok,
                   ca_file if ca_file is not None else default_ca(), namespace, limit)
