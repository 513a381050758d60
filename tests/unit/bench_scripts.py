"""Loading a script of bench/ (not a package) as a module, for its unit tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def bench_script(name: str) -> Any:
    """``bench/<name>.py`` as a module named ``name`` (registered in ``sys.modules`` first, as
    its dataclasses need). Raises ``FileNotFoundError`` when there is no such script."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, mod)
    spec.loader.exec_module(mod)
    return mod
