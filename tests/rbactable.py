"""The permission table of docs/rbac.md as data, shared by tests/unit/test_rbac.py (roles vs
table vs code) and tests/integration/test_service_account.py (table vs the API server)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RBAC_DOC = ROOT / "docs" / "rbac.md"
NAMESPACE = "pykueue-system"
SERVICE_ACCOUNT = "pykueue"
HEADER = ["scope", "apiGroup", "resource", "verbs", "code path", "call"]


@dataclass(frozen=True)
class Row:
    """One row: ``scope`` is ``cluster`` (the ClusterRole) or a namespace (the Role there);
    ``group`` is ``""`` for the core API group (written ``core`` in the table); ``resource``
    may name a subresource (``workloads/status``); ``calls``: the code snippets (backticked in
    the table, several when a generic helper makes the request) that ``path`` must contain,
    compared with all whitespace removed."""

    scope: str
    group: str
    resource: str
    verbs: tuple[str, ...]
    path: str
    calls: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.path}: {','.join(self.verbs)} {self.resource}"


def load_table(text: str | None = None) -> list[Row]:
    """Rows of the markdown table whose header is ``HEADER`` (``text`` defaults to
    docs/rbac.md). Separator rows are skipped; the table ends at the first non-table line."""
    lines = (RBAC_DOC.read_text() if text is None else text).splitlines()
    rows: list[Row] = []
    in_table = False
    for line in lines:
        if not line.lstrip().startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells == HEADER:
            in_table = True
            continue
        if not in_table or set("".join(cells)) <= set("-: "):
            continue
        scope, group, resource, verbs, path, call = cells
        rows.append(Row(scope=scope, group="" if group == "core" else group,
                        resource=resource,
                        verbs=tuple(v.strip() for v in verbs.split(",") if v.strip()),
                        path=path.strip("`"),
                        calls=tuple(re.findall(r"`([^`]+)`", call)) or (call,)))
    return rows
