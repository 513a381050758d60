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
A lane that stops on ``-x``/``--maxfail`` writes ``<dir>/stop``, and the other then takes no
further file.

While hack/test.sh still builds the operators, Helm and kueuectl beside the lanes (a fresh
machine), ``PYKUEUE_TEST_BUILD_STATUS`` names its status file and ``PYKUEUE_TEST_BUILD_PID``
its process, and ``<dir>/later`` lists the files that start those binaries: a lane takes such
a file only once its binaries are all built (hack/test_waves.py ``NEEDS``), and the others
meanwhile; with nothing left to take but files waiting for a build, it waits for the build
with its lab up. A file whose build failed is taken by neither lane (hack/test.sh then names
it and exits with the build's status).

Each lane writes ``<dir>/collected-<lane>`` (the files it collected, one a line) and
``<dir>/ran-<lane>`` (the files it ran to their end); hack/test_waves.py ``lanes-check`` then
proves every collected file ran in exactly one lane. pytest's ``cache/lastfailed`` is merged,
not overwritten, by the lane that ends last (``_LastFailedMerge``), so ``pytest --lf`` after
``make test`` reruns the failures of both.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Generator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LANE = os.environ.get("PYKUEUE_TEST_LANE", "")
LANES_DIR = os.environ.get("PYKUEUE_TEST_LANES", "")
BUILD_STATUS = os.environ.get("PYKUEUE_TEST_BUILD_STATUS", "")
BUILD_PID = int(os.environ.get("PYKUEUE_TEST_BUILD_PID") or 0)
# How often (seconds) a lane with nothing to take but files waiting for a build reads its status.
POLL_S = float(os.environ.get("PYKUEUE_TEST_BUILD_POLL_S") or 5)


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


class _Builds:
    """The build hack/test.sh runs beside the lanes: which files wait for it (``<dir>/later``)
    and what it has built so far. With no build (every binary built), nothing waits."""

    def __init__(self, root: Path) -> None:
        later = root / "later"
        self.later = frozenset(later.read_text().split()) if BUILD_STATUS and later.exists() \
            else frozenset()

    def needs(self, path: str) -> frozenset[str]:
        """The binaries ``path`` starts, when it is a file that waits for the build."""
        return _waves().needs(path) if path in self.later else frozenset()

    def state(self) -> tuple[frozenset[str], bool]:
        """(the binaries built, True when no build is left): hack/test_waves.py
        ``build_state``; the process is looked at before its status file is read."""
        if not self.later:
            return frozenset(), True
        alive = BUILD_PID > 0 and _running(BUILD_PID)
        try:
            status = Path(BUILD_STATUS).read_text()
        except FileNotFoundError:
            status = ""
        return _waves().build_state(status, alive)


def _running(pid: int) -> bool:
    """True while process ``pid`` runs: it exists and is not a zombie (one that ended but whose
    parent has not reaped it yet). Its number could be reused once it is reaped; a build that
    ends normally has written every status line first, which ``build_state`` reads."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: the process exists
    return stat.rpartition(")")[2].split()[0] != "Z"


class _LastFailedMerge:
    """At the session's end, under ``<dir>/lastfailed.lock``, gives pytest's cache plugin
    (``lfplugin``, which writes ``cache/lastfailed`` from what it read at its start and what
    this lane ran) the value on disk with this lane's outcomes laid over it: a test this lane
    ran counts as this lane saw it, one the other lane ran as the file on disk has it (the
    other lane's write, when it ended first), anything else (collection errors, which both
    lanes see alike, and entries of tests neither collected) as this lane has it. Otherwise
    the lane ending last drops the other's failures (brk31 L2)."""

    def __init__(self, root: Path, files: dict[str, list[pytest.Item]], taken: set[str]) -> None:
        self.root, self.files, self.taken = root, files, taken

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        lf = session.config.pluginmanager.get_plugin("lfplugin")
        cache = getattr(session.config, "cache", None)
        if lf is None or cache is None:
            yield
            return
        fd = os.open(self.root / "lastfailed.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            collected = {i.nodeid for items in self.files.values() for i in items}
            ours = {i.nodeid for path in self.taken for i in self.files[path]}
            disk = cache.get("cache/lastfailed", {})
            merged = {k: v for k, v in lf.lastfailed.items() if k not in collected or k in ours}
            merged.update((k, v) for k, v in disk.items() if k in collected and k not in ours)
            lf.lastfailed = merged
            yield  # lfplugin writes it, under the lock
        finally:
            os.close(fd)


WAITING = "<waiting for a build>"  # take(block=False)'s answer: files are left, none built yet


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """Run the files this lane takes (see the module doc); pytest's own loop when no lane is
    set. Raises ``session.Failed``/``session.Interrupted`` as pytest's loop does (-x, Ctrl-C)."""
    if not (LANE and LANES_DIR):
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} errors during collection")
    root = Path(LANES_DIR)
    if session.config.option.collectonly:
        # Nothing is run, so nothing is to be checked (``lanes_check``; brk32 L2).
        root.mkdir(parents=True, exist_ok=True)
        (root / "collect-only").write_text(f"{LANE}\n")
        return True
    claims = root / "claims"
    claims.mkdir(parents=True, exist_ok=True)
    files = _by_file(session.items)
    taken: set[str] = set()
    session.config.pluginmanager.register(_LastFailedMerge(root, files, taken))
    (root / f"collected-{LANE}").write_text("".join(f"{f}\n" for f in files))
    builds = _Builds(root)
    order = _waves().lane_order(list(files), LANE, builds.later)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    said = ""

    def take(block: bool) -> str | None:
        """The next file this lane takes; None when none is left to take (all taken, or
        waiting for a build that failed); ``WAITING`` when ``block`` is False and the files
        left all wait for a build."""
        nonlocal said
        while True:
            if (root / "stop").exists():  # the other lane stopped on -x / --maxfail
                return None
            built, over = builds.state()
            waiting: list[str] = []
            for path in list(order):
                if not builds.needs(path) <= built:
                    waiting.append(path)
                    continue
                order.remove(path)
                if _claim(claims, path):
                    taken.add(path)
                    return path
            if not waiting or over:
                return None
            if not block:
                return WAITING
            lacking = sorted(set().union(*(builds.needs(p) for p in waiting)) - built)
            left = f"{len(waiting)} file{'s' if len(waiting) > 1 else ''} left"
            line = f"lanes: lane {LANE} waits for the build of {' '.join(lacking)} ({left})"
            if line != said and reporter is not None:
                if reporter._tw.width_of_current_line:  # after a file's progress dots
                    reporter.write("\n")
                reporter.write_line(f"{line} at {time.strftime('%H:%M:%S', time.gmtime())}")
                said = line
            time.sleep(POLL_S)

    current = take(block=True)
    while current is not None:
        items = files[current]
        following: str | None = None
        for i, item in enumerate(items):
            if i + 1 < len(items):
                nextitem = items[i + 1]
            else:
                following = take(block=False)
                # While the files left wait for a build, a file not taken stands in as the next
                # item: pytest then tears down this module's fixtures but keeps the session's
                # (the lab) for the file taken once the build is done.
                stand_in = order[0] if following == WAITING and order else following
                nextitem = files[stand_in][0] if stand_in not in (None, WAITING) else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                (root / "stop").write_text(f"{LANE}\n")  # -x stops both lanes
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        with (root / f"ran-{LANE}").open("a") as out:
            out.write(f"{current}\n")
        if following == WAITING:
            current = take(block=True)
            if current is not None:
                # Down to what the file taken shares with the stand-in's chain (a directory of
                # its own): pytest's own loop does this between items through ``nextitem``.
                session._setupstate.teardown_exact(files[current][0])
        else:
            current = following
    return True
