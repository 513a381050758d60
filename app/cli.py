"""The ``pykueue`` command line (typer): serve, status, simulate."""

from __future__ import annotations

import typer

app = typer.Typer(help="pykueue: GPU job queueing with fair-share quotas for Kubernetes.", no_args_is_help=True)


@app.command()
def serve() -> None:
    """Serve the webhook, scheduler extender, status API and metrics over HTTPS, and run the controllers."""
    import uvicorn

    from app.config import Settings
    from app.main import create_app

    settings = Settings()
    uvicorn.run(
        create_app(settings),
        host=settings.server.host,
        port=settings.server.port,
        ssl_certfile=str(settings.server.cert_file),
        ssl_keyfile=str(settings.server.key_file),
        log_level="info",
    )


@app.callback()
def main() -> None:
    """pykueue: GPU job queueing with fair-share quotas for Kubernetes (Kueue v1beta2 API)."""
