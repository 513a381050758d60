"""Lanes: two pytest processes that share one list of test files, each on a lab of its own.

hack/test.sh starts one pytest per lane over the same arguments, with ``PYKUEUE_TEST_LANE``
(``a`` or ``b``) and ``PYKUEUE_TEST_LANES`` (a directory both see) set, and a port block and
state directory of its own for lane ``b`` (hack/test_waves.py ``lane_env``). Both collect
every test; each then runs whole files, one at a time, taking the next file not yet taken by
either lane (an exclusive create of ``<dir>/claims/<file>``), so the lane that finishes a file
first takes the next and neither waits while files are left. A file that must not run beside
another lab's copy of itself (hack/test_waves.py ``lane_a_only``: the mpi-operator, whose
health port is fixed machine-wide, and the conformance suite) is taken by lane ``a`` only,
first. The next file is taken before the last test of the current one runs, so pytest tears
down only the current module's fixtures between files and each lane keeps its session's lab.

Each lane writes ``<dir>/collected-<lane>`` (the files it collected, one a line) and
``<dir>/ran-<lane>`` (the files it ran to their end); hack/test_waves.py ``lanes-check`` then
proves every collected file ran in exactly one lane.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LANE = os.environ.get("PYKUEUE_TEST_LANE", "")
LANES_DIR = os.environ.get("PYKUEUE_TEST_LANES", "")


def _waves():  # hack/ is not a package; test_waves.py is a script there
    if str(ROOT / "hack") not in sys.path:
        sys.path.insert(0, str(ROOT / "hack"))
    import test_waves

    return test_waves


def _by_file(items: list[pytest.Item]) -> dict[str, list[pytest.Item]]:
    """``items`` grouped by file (relative to the rootdir: the repository's for hack/test.sh),
    in order of first appearance."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    return files


def _claim(claims: Path, path: str) -> bool:
    """True when this lane takes ``path`` (nobody had); an exclusive create is the lock."""
    try:
        fd = os.open(claims / path.replace("/", "__"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, f"{LANE}\n".encode())
    os.close(fd)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """Run the files this lane takes (see the module doc); pytest's own loop when no lane is
    set. Raises ``session.Failed``/``session.Interrupted`` as pytest's loop does (-x, Ctrl-C)."""
    if not (LANE and LANES_DIR):
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} errors during collection")
    if session.config.option.collectonly:
        return True
    root = Path(LANES_DIR)
    claims = root / "claims"
    claims.mkdir(parents=True, exist_ok=True)
    files = _by_file(session.items)
    (root / f"collected-{LANE}").write_text("".join(f"{f}\n" for f in files))
    order = _waves().lane_order(list(files), LANE)

    def take() -> str | None:
        while order:
            path = order.pop(0)
            if _claim(claims, path):
                return path
        return None

    current = take()
    while current is not None:
        items = files[current]
        following = None
        for i, item in enumerate(items):
            if i + 1 < len(items):
                nextitem = items[i + 1]
            else:
                following = take()
                nextitem = files[following][0] if following is not None else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        with (root / f"ran-{LANE}").open("a") as out:
            out.write(f"{current}\n")
        current = following
    return True
