"""design.md "Rooms": core is pure, models import pydantic only, only main imports api.

Runs the import-linter contracts from pyproject.toml, so a forbidden import fails the tests.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe, "import-linter is a dev dependency: pip install -e .[dev]"
    r = subprocess.run([exe], cwd=ROOT, text=True, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    contracts = (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    assert f"{contracts} kept, 0 broken" in r.stdout


def test_core_imports_only_the_standard_library() -> None:
    """A second, independent check: every import in app/core is stdlib or app.core."""
    import ast

    allowed_roots = set(sys.stdlib_module_names) | {"app"}
    for path in (ROOT / "app" / "core").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                root = name.split(".")[0]
                assert root in allowed_roots, f"{path.relative_to(ROOT)} imports {name}"
                if root == "app":
                    assert name.startswith("app.core"), f"{path.relative_to(ROOT)} imports {name}"
