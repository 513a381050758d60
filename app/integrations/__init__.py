"""Job kinds pykueue queues (Kueue's integrations): one folder per kind, each with a ``KIND``
(``app.integrations.framework.JobKind``), registered below."""

from __future__ import annotations

from app.integrations import batchjob
from app.integrations.framework import JobKind, Registry

# Adding a job kind: its folder, and one line here.
BUILTIN_KINDS: tuple[JobKind, ...] = (
    batchjob.KIND,
)


def default_registry() -> Registry:
    """A registry of the built-in kinds (a new one per Manager: tests register their own)."""
    return Registry(BUILTIN_KINDS)
