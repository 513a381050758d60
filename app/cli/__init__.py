"""The ``pykueue`` command line: ``main`` (the typer app: serve, status, dashboard, simulate),
``status`` (``pykueue status``: the status API as terminal tables) and ``dashboard``
(``pykueue dashboard``: the dashboard on localhost with the user's own token).

A room of its own: it may import the rest of ``app``, nothing in ``app`` imports it
(import-linter contract in pyproject.toml). ``app.cli.app`` is the typer app (the
``pykueue`` console script is ``app.cli.main:app``).
"""

from app.cli.main import app

__all__ = ["app"]
