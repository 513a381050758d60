"""The ``pykueue`` command line (typer): serve, status, dashboard, simulate."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import httpx
import typer

app = typer.Typer(
    help="pykueue: GPU job queueing with fair-share quotas for Kubernetes.", no_args_is_help=True,
    rich_markup_mode="markdown",  # docstring paragraphs reflow; `code` renders as code
)


# Connection options of the commands that talk to the status API (status, dashboard).
ServerOpt = Annotated[str | None, typer.Option(
    help="Status API URL (default: $PYKUEUE_URL, else https://127.0.0.1:9443 or what "
         "PYKUEUE_SERVER__HOST / PORT say; the port $PYKUEUE_PORT when set, the lab's).")]
TokenOpt = Annotated[str | None, typer.Option(
    help="Bearer token (default: $PYKUEUE_TOKEN, else the kubeconfig user's token).")]
KubeconfigOpt = Annotated[Path | None, typer.Option(
    help="Kubeconfig to take the token from (default: $KUBECONFIG, ~/.kube/config).")]
CaFileOpt = Annotated[Path | None, typer.Option(
    help="CA bundle for the server certificate (default: PYKUEUE_SERVER__CA_FILE, "
         "certs/out/ca.crt unless set, if it exists; else the system trust store).")]


@app.command()
def serve(
    host: str | None = typer.Option(None, help="Listen address (default: PYKUEUE_SERVER__HOST)."),
    port: int | None = typer.Option(None, help="HTTPS port (default: PYKUEUE_SERVER__PORT)."),
    log_level: str = typer.Option("info", help="debug, info, warning or error."),
) -> None:
    """Serve the webhook, extender, status API and metrics over HTTPS; run the controllers.
    Kueue's visibility API listens on a port of its own (``PYKUEUE_VISIBILITY__PORT``, default
    8082; 0: off).

    Settings come from the environment (``PYKUEUE_*``, see app/config.py). There is no plaintext
    listener: the serving certificate and key (``PYKUEUE_SERVER__CERT_FILE``/``KEY_FILE``,
    default certs/out/tls.crt and tls.key) must exist; ``python -m certs.generate`` makes them.
    """
    import asyncio
    import logging

    from app import gc_policy
    from app.config import Settings
    from app.main import create_app
    from app.serving import serve, uvicorn_config

    gc_policy.apply()
    settings = Settings()
    if host is not None or port is not None:
        server = settings.server.model_copy(
            update={k: v for k, v in (("host", host), ("port", port)) if v is not None}
        )
        settings = settings.model_copy(update={"server": server})
    missing = [
        str(p) for p in (settings.server.cert_file, settings.server.key_file) if not p.is_file()
    ]
    if missing:
        typer.echo(
            f"pykueue serve: TLS file(s) not found: {', '.join(missing)}; generate them with "
            "`python -m certs.generate --out certs/out` (or set PYKUEUE_SERVER__CERT_FILE and "
            "PYKUEUE_SERVER__KEY_FILE)",
            err=True,
        )
        raise typer.Exit(code=2)
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    app = create_app(settings)
    main_config = uvicorn_config(app, settings.server, log_level)

    async def run() -> None:
        others = []
        vis = settings.visibility
        if app.state.visibility_app is not None:
            from app.api.requestheader import request_header_auth_from_cluster

            auth = app.state.visibility_auth
            if auth is None:
                auth = app.state.visibility_auth = await request_header_auth_from_cluster(
                    settings)
            # Without the request-header CA no certificate is asked for: the API answers 503.
            others.append(uvicorn_config(
                app.state.visibility_app, settings.server, log_level, port=vis.port,
                client_cas=[auth.ca_pem] if auth is not None else [], lifespan="off"))
        await serve(main_config, others)

    with asyncio.Runner(loop_factory=main_config.get_loop_factory()) as runner:
        runner.run(run())


@app.command()
def status(
    namespace: Annotated[str | None, typer.Option(
        "--namespace", "-n",
        help="Show this namespace's LocalQueues (needs get on localqueues there) instead of "
             "every ClusterQueue (needs get on clusterqueues).")] = None,
    output: Annotated[str, typer.Option(
        "--output", "-o", help="table (one line per queue, GPUs first), wide (a row per "
        "flavor and resource, with limits) or json.")] = "table",
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Redraw every --interval "
                                        "seconds until Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between redraws with "
                                            "--watch.")] = 2.0,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Pending Workloads shown per "
                                       "queue.")] = 20,
    server: ServerOpt = None,
    token: TokenOpt = None,
    kubeconfig: KubeconfigOpt = None,
    ca_file: CaFileOpt = None,
    iterations: Annotated[int, typer.Option(hidden=True, help="Stop --watch after N "
                                            "redraws.")] = 0,
) -> None:
    """Show queues and who waits: one line per ClusterQueue (GPUs first; -o wide: a row per
    flavor and resource), then the pending Workloads in admission order with the reason
    each waits and when it is expected to start.

    Talks to the status API of `pykueue serve` over HTTPS with a Kubernetes bearer token,
    e.g. `pykueue status --token "$(kubectl create token viewer -n team-a)" -n team-a`.
    Exit codes: 0 ok, 1 the API refused or failed (401, 403, 404, 503), 2 cannot connect.
    """
    import json

    from rich.console import Console
    from rich.live import Live

    from app.cli import status as sc

    if output not in ("table", "wide", "json"):
        raise typer.BadParameter("must be table, wide or json", param_hint="--output")
    wide = output == "wide"
    err = Console(stderr=True)
    try:
        opts = sc.resolve(server, token, kubeconfig, ca_file, namespace, limit)
        client = sc.StatusClient(opts.server, opts.token, ca_file=opts.ca_file,
                                 transport=_status_transport)
    except sc.ConfigError as exc:
        err.print(f"pykueue status: {exc}", markup=False)
        raise typer.Exit(code=2) from None
    console = Console()
    live: Live | None = None
    n = 0
    try:
        while True:
            snap = sc.fetch(client, opts.namespace, opts.limit)
            n += 1
            if output == "json":
                typer.echo(json.dumps(snap, indent=None if watch else 2))
            elif watch:
                if live is None:
                    live = Live(sc.render(snap, width=console.width, wide=wide),
                                console=console, auto_refresh=False)
                    live.start()
                else:
                    live.update(sc.render(snap, width=console.width, wide=wide), refresh=True)
            else:
                console.print(sc.render(snap, width=console.width, wide=wide))
            if not watch or (iterations and n >= iterations):
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    except sc.StatusError as exc:
        err.print(f"pykueue status: {opts.server}: {exc}", markup=False)
        raise typer.Exit(code=1) from None
    except httpx.HTTPError as exc:
        err.print(f"pykueue status: cannot reach {opts.server}: {exc}", markup=False)
        raise typer.Exit(code=2) from None
    finally:
        if live is not None:
            live.stop()
        client.close()


# Tests inject an httpx transport (e.g. httpx.ASGITransport / MockTransport of a real app).
_status_transport: httpx.BaseTransport | None = None


@app.command()
def dashboard(
    port: Annotated[int, typer.Option(help="Local port (127.0.0.1 only; 0: any free).")] = 8089,
    open_browser: Annotated[bool, typer.Option("--open/--no-open",
                                               help="Open the page in a browser.")] = True,
    server: ServerOpt = None,
    token: TokenOpt = None,
    kubeconfig: KubeconfigOpt = None,
    ca_file: CaFileOpt = None,
) -> None:
    """Open the dashboard locally: a server on 127.0.0.1 that uses your kubeconfig's token
    (as `kubectl proxy` does) to ask pykueue, so you see what you may see.

    Serves the page at `http://127.0.0.1:PORT/dashboard` and forwards its requests to the
    status API of `pykueue serve` with your token. Exit codes: 2 no token or bad CA file.
    """
    import threading
    import webbrowser

    import uvicorn

    from app.cli import status as sc
    from app.cli.dashboard import create_local_app

    try:
        opts = sc.resolve(server, token, kubeconfig, ca_file, None, 1)
        if opts.ca_file is not None and not opts.ca_file.is_file():
            raise sc.ConfigError(f"CA file {opts.ca_file} not found")
    except sc.ConfigError as exc:
        typer.echo(f"pykueue dashboard: {exc}", err=True)
        raise typer.Exit(code=2) from None
    local = create_local_app(opts.server, opts.token, ca_file=opts.ca_file)
    config = uvicorn.Config(local, host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(config)

    def announce() -> None:
        while not srv.started:
            time.sleep(0.05)
        bound = srv.servers[0].sockets[0].getsockname()[1] if srv.servers else port
        url = f"http://127.0.0.1:{bound}/dashboard"
        typer.echo(f"pykueue dashboard: {url} (asking {opts.server}; Ctrl-C to stop)")
        if open_browser:
            webbrowser.open(url)

    threading.Thread(target=announce, daemon=True).start()
    srv.run()


@app.command()
def simulate(
    trace: str = typer.Argument(..., help="YAML trace (see app/sim/trace.py; bench/scenarios/)."),
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
    timeline: bool = typer.Option(False, help="Include the per-queue timeline in --json."),
    output: str | None = typer.Option(None, help="Also write figures + timeline as JSON here."),
    plot: str | None = typer.Option(None, help="Draw usage and queue length into FILE.png "
                                    "(with --fair-sharing also shares into FILE-shares.png)."),
    eviction_delay: str | None = typer.Option(
        None, help="Preemption to quota release (e.g. 2s); default: the trace's evictionDelay."),
    until: str | None = typer.Option(None, help="Stop the virtual clock here (e.g. 10m)."),
    max_queues: int = typer.Option(40, help="ClusterQueue rows in the table."),
    fair_sharing: bool = typer.Option(
        False, "--fair-sharing", help="Enable fair sharing (Kueue's fairSharing, both "
        "preemption strategies): weights order admission and choose victims."),
    s2b_priority_guard: bool = typer.Option(
        False, "--s2b-priority-guard", help="With --fair-sharing: LessThanInitialShare "
        "evicts no Workload above the preemptor's priority (pykueue's rule, "
        "fair_sharing.s2b_priority_guard; off = Kueue v0.17.1's)."),
    sticky_preemptor_first: bool = typer.Option(
        False, "--sticky-preemptor-first", help="With --fair-sharing: a preemptor that "
        "issued preemptions is admitted before the other heads of its cohort tree "
        "(pykueue's rule, fair_sharing.sticky_preemptor_first; off = Kueue v0.17.1's)."),
    nominal: list[str] = typer.Option(  # noqa: B008 - typer's idiom
        [], help="What if: CLUSTERQUEUE:FLAVOR:RESOURCE=QUANTITY (repeatable)."),
    requeue_batch: str = typer.Option(
        "0s", help="Parked Workloads return this long after a change in their cohort "
        "(requeue_batch_seconds; 1s = Kueue v0.17.1's requeueBatchPeriod)."),
    preempted_queue_order: str = typer.Option(
        "Eviction", help="Where a preempted Workload goes in its queue: Eviction (by its "
        "eviction time, pykueue's default) or Creation (by its creation time, Kueue v0.17.1's; "
        "scheduling.preempted_queue_order)."),
) -> None:
    """Simulate a trace through the admission core with a virtual clock ("what if")."""
    import json

    from app import gc_policy
    from app.core.scheduling_cycle import Scheduler
    from app.core.spec import FairSharing
    from app.sim import Simulator, TraceError, load_trace, summarize, timelines
    from app.sim.fairness import TreeFairness, plot_shares
    from app.sim.report import plot as draw
    from app.sim.report import print_report
    from app.sim.trace import parse_duration_us, with_nominal

    try:
        parsed = load_trace(trace)
        for setting in nominal:
            parsed = with_nominal(parsed, setting)
        delay = None if eviction_delay is None else parse_duration_us(eviction_delay)
        stop = None if until is None else parse_duration_us(until)
        batch_s = parse_duration_us(requeue_batch) / 1e6
        if preempted_queue_order not in ("Eviction", "Creation"):
            raise ValueError("--preempted-queue-order must be Eviction or Creation, not "
                             f"{preempted_queue_order!r}")
        if s2b_priority_guard and not fair_sharing:
            raise ValueError("--s2b-priority-guard needs --fair-sharing")
        if sticky_preemptor_first and not fair_sharing:
            raise ValueError("--sticky-preemptor-first needs --fair-sharing")
    except (TraceError, ValueError, OSError) as exc:
        typer.echo(f"pykueue simulate: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    gc_policy.apply()
    fair = FairSharing(s2b_priority_guard=s2b_priority_guard,
                       sticky_preemptor_first=sticky_preemptor_first) if fair_sharing else None
    core = Scheduler(fair, parsed.admission_fair_sharing, requeue_batch_s=batch_s,
                     order_evicted_by_eviction_time=preempted_queue_order == "Eviction")
    # With fair sharing: each queue's share of its cohort tree against its weighted fair share
    # (app.sim.fairness; it samples pending demand at every instant, so only when asked).
    fairness = TreeFairness() if fair_sharing else None
    sim = Simulator(parsed, cluster=core, eviction_delay_us=delay, until_us=stop,
                    on_cycle=fairness)
    if fairness is not None:
        fairness.bind(sim)
    sim.run()
    figures = summarize(sim)
    if fairness is not None:
        figures["fair_share"] = fairness.report(sim.end_us)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            json.dump({**figures, "timeline": timelines(sim)}, f)
    if json_out:
        typer.echo(json.dumps({**figures, "timeline": timelines(sim)} if timeline else figures,
                              indent=2))
    else:
        print_report(sim, figures, max_queues=max_queues)
        for tree, rows in figures.get("fair_share", {}).items():
            typer.echo(f"\nshare of {tree} (contended time) vs weighted fair share:")
            for q, r in rows.items():
                if not q.startswith("_"):
                    typer.echo(f"  {q:<30} weight {r['weight']:<6g} share {r['share_pct']:5.1f}%"
                               f"  fair {r['fair_share_pct']:5.1f}%  ({r['diff_points']:+.1f})")
    if plot:
        draw(sim, plot)
        if fairness is not None and fairness.probes:
            shares = plot.removesuffix(".png") + "-shares.png"
            plot_shares(fairness, shares, sim.end_us)
            typer.echo(f"shares over time: {shares}")


@app.callback()
def main() -> None:
    """pykueue: GPU job queueing with fair-share quotas for Kubernetes (Kueue v1beta2 API)."""
