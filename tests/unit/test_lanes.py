"""tests/lanes.py (hack/test.sh's two lanes) on a small suite of its own: two real pytest
processes over the same files run every test exactly once, whole files each, the conformance
file in lane ``a`` only, each lane's session fixture set up once and each module's fixtures
once; a file already taken is left to its taker; hack/test_waves.py's ``lanes_check`` finds a
file no lane ran. Also ``lane_order`` and ``lane_env``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hack"))
import test_waves as waves  # noqa: E402

CONFTEST = """
    import os
    from pathlib import Path

    import pytest

    from tests.lanes import pytest_runtestloop  # noqa: F401

    LOG = Path(os.environ["LANES_TEST_LOG"])
    LANE = os.environ["PYKUEUE_TEST_LANE"]


    def record(*words):
        with LOG.open("a") as out:
            out.write(" ".join((LANE, *words)) + "\\n")


    @pytest.fixture(scope="session", autouse=True)
    def lab():
        record("session-up")
        yield
        record("session-down")


    @pytest.fixture(scope="module", autouse=True)
    def module_state(request):
        record("module-up", request.node.nodeid)
        yield
        record("module-down", request.node.nodeid)


    @pytest.fixture(autouse=True)
    def each(request):
        record("test", request.node.nodeid)
"""

FILES = {
    "tests/conformance/test_pinned.py": 2,
    "tests/e2e/test_one.py": 3,
    "tests/e2e/test_two.py": 1,
    "tests/integration/test_three.py": 2,
    "tests/unit/test_four.py": 4,
    "tests/unit/test_five.py": 2,
}


def _suite(tmp: Path) -> None:
    (tmp / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp / "pytest.ini").write_text("[pytest]\n")
    for path, n in FILES.items():
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        body = "".join(f"def test_{i}():\n    pass\n\n\n" for i in range(n))
        (tmp / path).write_text(body)


def _lane(tmp: Path, lane: str, lanes: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYKUEUE_TEST_LANE": lane, "PYKUEUE_TEST_LANES": str(lanes),
           "LANES_TEST_LOG": str(log), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             str(tmp)],
                            cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _records(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()]


def test_two_lanes_run_every_test_once_whole_files_each(tmp_path: Path) -> None:
    suite, lanes, log = tmp_path / "suite", tmp_path / "lanes", tmp_path / "log"
    suite.mkdir()
    _suite(suite)
    procs = [_lane(suite, lane, lanes, log) for lane in ("a", "b")]
    outs = [p.communicate(timeout=120)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    recs = _records(log)
    tests = [(r[0], r[2]) for r in recs if r[1] == "test"]
    ids = [t for _, t in tests]
    want = {f"{p}::test_{i}" for p, n in FILES.items() for i in range(n)}
    assert sorted(ids) == sorted(want)  # each exactly once
    lane_of_file: dict[str, set[str]] = {}
    for lane, nodeid in tests:
        lane_of_file.setdefault(nodeid.split("::")[0], set()).add(lane)
    assert all(len(v) == 1 for v in lane_of_file.values()), lane_of_file  # whole files
    assert lane_of_file["tests/conformance/test_pinned.py"] == {"a"}
    for lane in {lane for lane, _ in tests}:
        assert [r[1] for r in recs if r[0] == lane and r[1].startswith("session")] == \
            ["session-up", "session-down"]
    ups = sorted(r[2] for r in recs if r[1] == "module-up")
    downs = sorted(r[2] for r in recs if r[1] == "module-down")
    assert ups == downs == sorted(FILES)
    assert waves.lanes_check(lanes) == []
    ran = (lanes / "ran-a").read_text().split() + \
        ((lanes / "ran-b").read_text().split() if (lanes / "ran-b").exists() else [])
    assert sorted(ran) == sorted(FILES)


def test_a_file_taken_is_left_and_a_file_nobody_ran_is_found(tmp_path: Path) -> None:
    suite, lanes, log = tmp_path / "suite", tmp_path / "lanes", tmp_path / "log"
    suite.mkdir()
    _suite(suite)
    (lanes / "claims").mkdir(parents=True)
    (lanes / "claims" / "tests__e2e__test_one.py").write_text("a\n")  # lane a has it
    out, _ = _lane(suite, "b", lanes, log).communicate(timeout=120)
    files = {r[2].split("::")[0] for r in _records(log) if r[1] == "test"}
    # lane b runs neither the file taken nor the one only lane a runs
    assert files == set(FILES) - {"tests/e2e/test_one.py", "tests/conformance/test_pinned.py"}, \
        out.decode()
    assert waves.lanes_check(lanes) == [
        "tests/conformance/test_pinned.py: collected, run by no lane",
        "tests/e2e/test_one.py: collected, run by no lane",
    ]


def test_lane_order_puts_lane_a_only_files_first_and_keeps_them_from_b() -> None:
    files = ["tests/e2e/test_appwrapper.py", "tests/e2e/test_kubeflow.py",
             "tests/conformance/test_core_cases.py", "tests/unit/test_x.py"]
    assert waves.lane_order(files, "a") == [
        "tests/e2e/test_kubeflow.py", "tests/conformance/test_core_cases.py",
        "tests/e2e/test_appwrapper.py", "tests/unit/test_x.py"]
    assert waves.lane_order(files, "b") == ["tests/e2e/test_appwrapper.py", "tests/unit/test_x.py"]
    # every file that starts the mpi-operator stays in lane a
    for path, binaries in waves.NEEDS.items():
        assert waves.lane_a_only(path) == ("mpi-operator" in binaries)


def test_lane_b_env_is_outside_lane_as_ports_and_state(tmp_path: Path) -> None:
    assert waves.lane_env("a", {}, tmp_path) == {}
    env = waves.lane_env("b", {"LAB_PORT_BASE": "26040", "PYKUEUE_PORT": "26443"}, tmp_path)
    assert env["LAB_PORT_BASE"] == "28040" and env["PYKUEUE_PORT"] == "28443"
    assert env["RECONCILER_LAB_PORT_BASE"] == "18740"
    assert env["LAB_STATE_DIR"] == str(tmp_path / "build" / "lane-b" / ".lab")
    assert env["RECONCILER_LAB_STATE"].endswith("pykueue-reconciler-lab-b")
    # lane a's lab spans base .. base + 643 (MultiKueue workers and their pykueues)
    a_ports = set(range(26040, 26040 + 644)) | {26443, 26444} | set(range(16740, 16776))
    b_ports = set(range(28040, 28040 + 644)) | {28443, 28444} | set(range(18740, 18776))
    assert not a_ports & b_ports
    assert "PYKUEUE_VISIBILITY_PORT" not in env
    assert waves.lane_env("b", {"PYKUEUE_VISIBILITY_PORT": "9500"}, tmp_path)[
        "PYKUEUE_VISIBILITY_PORT"] == "11500"


def test_lane_order_takes_files_waiting_for_a_build_first_within_each_part() -> None:
    files = ["tests/conformance/test_core_cases.py", "tests/e2e/test_kubeflow.py",
             "tests/e2e/test_visibility.py", "tests/e2e/test_jobset.py", "tests/unit/test_x.py",
             "tests/unit/test_chart.py"]
    later = {"tests/e2e/test_kubeflow.py", "tests/e2e/test_jobset.py", "tests/unit/test_chart.py"}
    assert waves.lane_order(files, "a", later) == [
        "tests/e2e/test_kubeflow.py", "tests/conformance/test_core_cases.py",
        "tests/e2e/test_jobset.py", "tests/unit/test_chart.py",
        "tests/e2e/test_visibility.py", "tests/unit/test_x.py"]
    assert waves.lane_order(files, "b", later) == [
        "tests/e2e/test_jobset.py", "tests/unit/test_chart.py",
        "tests/e2e/test_visibility.py", "tests/unit/test_x.py"]


def test_build_state_reads_the_builds_done_and_whether_any_is_left() -> None:
    assert waves.build_state("", True) == (frozenset(), False)
    assert waves.build_state("kuberay 0 10:00:01\njobset 2 10:00:09\n", True) == (
        frozenset({"kuberay"}), False)
    assert waves.build_state("kuberay 0 10:00:01\n", False) == (frozenset({"kuberay"}), True)
    every = "".join(f"{n} 0 10:00:00\n" for n in waves.BUILD_ORDER)
    assert waves.build_state(every, True) == (frozenset(waves.BUILD_ORDER), True)


def _building_lanes(tmp: Path, status: Path, later: list[str],
                    lanes: tuple[str, ...] = ("a", "b")) -> tuple[
        Path, Path, subprocess.Popen[bytes], list[subprocess.Popen[bytes]]]:
    """The ``lanes`` over ``_suite`` beside a stand-in build (a sleeping process) whose status
    file is ``status`` and whose waiting files are ``later``."""
    suite, lanes_dir, log = tmp / "suite", tmp / "lanes", tmp / "log"
    suite.mkdir()
    _suite(suite)
    lanes_dir.mkdir()
    (lanes_dir / "later").write_text("".join(f"{f}\n" for f in later))
    status.write_text("")
    build = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    env = {"PYKUEUE_TEST_BUILD_STATUS": str(status), "PYKUEUE_TEST_BUILD_PID": str(build.pid),
           "PYKUEUE_TEST_BUILD_POLL_S": "0.2"}
    old = dict(os.environ)
    os.environ.update(env)
    try:
        procs = [_lane(suite, lane, lanes_dir, log) for lane in lanes]
    finally:
        os.environ.clear()
        os.environ.update(old)
    return lanes_dir, log, build, procs


def _wait_for_lines(log: Path, want: int) -> None:
    """Until ``log`` has ``want`` test lines (each lane runs what needs no build first)."""
    import time
    for _ in range(600):
        if log.exists() and sum(r[1] == "test" for r in _records(log)) >= want:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {want} tests ran: {log.read_text() if log.exists() else ''}")


def test_a_file_waiting_for_a_build_is_taken_once_built_on_the_same_lab(tmp_path: Path) -> None:
    status = tmp_path / "status"
    later = ["tests/e2e/test_one.py", "tests/unit/test_five.py"]
    lanes, log, build, procs = _building_lanes(tmp_path, status, later)
    try:
        ready = sum(n for p, n in FILES.items() if p not in later)
        _wait_for_lines(log, ready)
        assert not {r[2].split("::")[0] for r in _records(log) if r[1] == "test"} & set(later)
        assert all(p.poll() is None for p in procs), "a lane ended with files waiting"
        status.write_text("".join(f"{n} 0 10:00:00\n" for n in waves.BUILD_ORDER))
        outs = [p.communicate(timeout=120)[0].decode() for p in procs]
    finally:
        build.kill()
    assert [p.returncode for p in procs] == [0, 0], outs
    recs = _records(log)
    ids = sorted(r[2] for r in recs if r[1] == "test")
    assert ids == sorted(f"{p}::test_{i}" for p, n in FILES.items() for i in range(n))
    for lane in ("a", "b"):  # the lab (session fixture) kept while waiting
        ups = [r[1] for r in recs if r[0] == lane and r[1].startswith("session")]
        assert ups in ([], ["session-up", "session-down"]), (lane, ups)
    assert waves.lanes_check(lanes) == []
    assert "waits for the build of" in "".join(outs)


def test_a_file_whose_build_failed_is_run_by_no_lane(tmp_path: Path) -> None:
    status = tmp_path / "status"
    lanes, log, build, procs = _building_lanes(tmp_path, status, ["tests/e2e/test_one.py"])
    try:
        status.write_text("kuberay 1 10:00:00\n")
        build.kill()  # the build gone with files still waiting for it
        outs = [p.communicate(timeout=120)[0].decode() for p in procs]
    finally:
        build.kill()
    assert [p.returncode for p in procs] == [0, 0], outs
    files = {r[2].split("::")[0] for r in _records(log) if r[1] == "test"}
    assert files == set(FILES) - {"tests/e2e/test_one.py"}
    assert waves.lanes_check(lanes) == ["tests/e2e/test_one.py: collected, run by no lane"]


def test_a_file_taken_after_waiting_runs_whatever_the_stand_in_was(tmp_path: Path) -> None:
    """The lane's last file before the wait (tests/e2e/test_two.py) and the stand-in (the first
    file left, tests/e2e/test_one.py) share a directory; the other lane takes the stand-in
    meanwhile, and this lane then takes a file of another directory (tests/integration):
    pytest's setup must not find tests/e2e still set up (session 32's fresh run failed so:
    "previous item was not torn down properly")."""
    status = tmp_path / "status"
    later = ["tests/e2e/test_one.py", "tests/integration/test_three.py",
             "tests/unit/test_four.py", "tests/unit/test_five.py"]
    lanes, log, build, procs = _building_lanes(tmp_path, status, later, lanes=("a",))
    try:
        _wait_for_lines(log, sum(n for p, n in FILES.items() if p not in later))
        (lanes / "claims" / "tests__e2e__test_one.py").write_text("b\n")  # the other lane's
        status.write_text("".join(f"{n} 0 10:00:00\n" for n in waves.BUILD_ORDER))
        outs = [p.communicate(timeout=120)[0].decode() for p in procs]
    finally:
        build.kill()
    assert [p.returncode for p in procs] == [0], outs
    files = {r[2].split("::")[0] for r in _records(log) if r[1] == "test"}
    assert files == set(FILES) - {"tests/e2e/test_one.py"}, outs
