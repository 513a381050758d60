"""The dashboard's browser side: ``static/`` (index.html, app.js, app.css and vendored uPlot)
served by ``pykueue serve`` at ``/dashboard`` (``app.api.dashboard``) and by
``pykueue dashboard`` on localhost (``app.cli.dashboard``)."""

from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent / "static"
INDEX_HTML = STATIC_DIR / "index.html"
