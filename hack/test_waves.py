#!/usr/bin/env python3
"""Which of hack/test.sh's files can run with the binaries built so far, and its two lanes.

hack/test.sh runs every test in two lanes (tests/lanes.py): two pytests, each on a lab of its
own (``lane_env``), taking whole files from one list (``lane_order``). On a fresh machine it
builds the operators, Helm and kueuectl beside the lanes, in ``BUILD_ORDER``; a file that starts
one of them (its LATER list) is taken only once its binaries are all built (``NEEDS``,
``build_state``), the others at once.

    python hack/test_waves.py order                          # BUILD_ORDER, one a line
    python hack/test_waves.py missing --built "jobset" FILE ...  # "FILE: BINARY ..." a line
    python hack/test_waves.py lane-env b                     # lane b's env, KEY=VALUE a line
    python hack/test_waves.py lanes-check DIR                # every collected file ran once

A file not in ``NEEDS`` needs every binary (it is taken after the last build), so a new file
can never start a binary before it is built. tests/unit/test_test_waves.py checks each entry
against the operators its file (and the fixtures it imports) names."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

OPERATORS = ("jobset", "training-operator", "mpi-operator", "kuberay", "lws", "trainer",
             "appwrapper", "spark-operator")

# The order hack/test.sh builds them in: most second-run test time depending on the binary
# first, estimated from session 25's fresh run (docs/ci.md): kuberay ~1,070 s of tests,
# jobset ~1,030, training-operator ~985, trainer ~795, mpi-operator ~790, appwrapper ~520,
# spark-operator ~170, Helm ~110, lws ~85, kueuectl ~25. Among near ties the shorter build
# comes first (trainer 125 s before mpi-operator 411 s).
BUILD_ORDER = ("kuberay", "jobset", "training-operator", "trainer", "mpi-operator",
               "appwrapper", "spark-operator", "helm", "lws", "kueuectl")

# The operators the MultiKueue sites start (tests/e2e/test_multikueue.py OPERATORS and
# WORKER1_OPERATORS, each when built): the fixture ``sites`` skips none, it leaves out what is
# not built, so every one of them is needed.
_MULTIKUEUE = frozenset({"jobset", "training-operator", "kuberay", "trainer", "appwrapper",
                         "mpi-operator"})

# Each LATER file of hack/test.sh -> the binaries it starts: operators_running(lab, ...) and
# ``operators-up`` in the file and in the fixtures it imports (aw_operator, kuberay,
# spark_operator, sites), kueuectl and Helm. The files that leave out what is not built
# instead of skipping (tests/integration/test_operators.py, test_multikueue.py's sites,
# test_pods_ready.py, seed_play's training-operator) must list all they would start.
NEEDS: dict[str, frozenset[str]] = {f"tests/e2e/{k}.py" if "/" not in k else k: frozenset(v)
                                    for k, v in {
    "test_appwrapper": {"appwrapper", "jobset"},
    "test_batch_job_stores": {"jobset", "trainer"},
    "test_break24_findings": {"training-operator", "mpi-operator", "jobset", "kuberay"},
    "test_break26_findings": {"spark-operator"},
    "test_brk28_ray_forged_status": {"kuberay"},
    "test_brk29_findings": {"jobset"},
    "test_brk30_findings": {"appwrapper", "jobset"},
    "test_brk30b_findings": {"appwrapper", "jobset"},
    "test_brk31_findings": {"appwrapper", "jobset"},
    "test_brk32_findings": {"appwrapper", "jobset"},
    "test_brk33_findings": {"jobset"},
    "test_brk33b_findings": set(),  # the API server and the Job controller only
    "test_brk34b_findings": {"training-operator"},
    "test_brk35_findings": {"kuberay", "appwrapper", "jobset"},
    "test_brk35b_findings": {"kuberay"},
    "test_brk36_findings": {"appwrapper", "training-operator", "kuberay"},
    "test_brk36b_findings": {"spark-operator", "appwrapper", "training-operator", "kuberay"},
    "test_breaker12_findings": {"jobset", "trainer", "kuberay"},
    "test_breaker13_findings": _MULTIKUEUE,  # sites, and aw_operator (appwrapper, jobset)
    "test_breaker14_findings": {"appwrapper", "jobset", "kuberay"},
    "test_breaker16_findings": _MULTIKUEUE,  # sites
    "test_dashboard_seed": {"training-operator"},  # seed_play: step 7 with it when built
    "test_child_being_deleted": {"jobset"},
    "test_child_job_orphaned": {"jobset"},
    "test_crd_installed_later": {"training-operator"},
    "test_foreground_deletion": {"jobset", "kuberay"},
    "test_jobset": {"jobset"},
    "test_kubeflow": {"training-operator", "mpi-operator"},
    "test_kueuectl": {"kueuectl"},
    "test_leaderworkerset": {"lws"},
    "test_multikueue": _MULTIKUEUE,
    "test_operator_lifecycle": {"jobset", "training-operator", "mpi-operator", "kuberay",
                                "trainer"},
    "test_pods_ready": {"training-operator", "mpi-operator", "kuberay", "appwrapper",
                        "jobset", "trainer"},
    "test_quota_follows_pods": {"jobset", "training-operator"},
    "test_ray": {"kuberay"},
    "test_ray_decoy_pod": {"kuberay"},
    "test_ray_dra_gap": {"kuberay"},
    "test_ray_quota_gaps": {"kuberay"},
    "test_scenario": {"training-operator"},  # seed_play: step 7 with it when built
    "test_spark_executors": {"spark-operator"},
    "test_sparkapplication": {"spark-operator"},
    "test_sparkapplication_ready": {"spark-operator"},
    "test_sparkbreak_findings": {"spark-operator"},
    "test_trainjob": {"jobset", "trainer"},
    "test_unqueued_operator_objects": {"jobset", "training-operator", "kuberay"},
    "tests/integration/test_operators.py": set(OPERATORS),  # every built one (ops.built())
    "tests/integration/test_manifests.py": {"helm"},
    "tests/unit/test_chart.py": {"helm"},
}.items()}


def needs(path: str) -> frozenset[str]:
    """The binaries ``path`` (relative to the repository) starts; every one when not listed."""
    return NEEDS.get(path, frozenset(BUILD_ORDER))


def ready(files: Iterable[str], built: Iterable[str]) -> list[str]:
    """The ``files`` (in their order) whose binaries are all in ``built``."""
    have = set(built)
    return [f for f in files if needs(f) <= have]


# Lane b's port block, pykueue port and reconciler lab port block are lane a's plus this: lane
# a's lab spans base .. base + 643 (MultiKueue workers at + 100 and + 200, each pykueue at its
# base + 443) and the reconciler lab is at 16740, so + 2000 meets none of lane a's ports.
LANE_B_PORT_OFFSET = 2000


def lane_a_only(path: str) -> bool:
    """True for a file only lane ``a`` runs: it starts the mpi-operator (its health port 8080
    is fixed, one per machine: hack/operators.py), or it is the conformance suite (whose lab
    takes the first free port block from 20540: two lanes could pick the same one)."""
    return "mpi-operator" in NEEDS.get(path, frozenset()) or path.startswith("tests/conformance/")


def lane_order(files: Iterable[str], lane: str, later: Iterable[str] = ()) -> list[str]:
    """The files (relative paths, in collection order) lane ``lane`` tries to take, in order:
    for ``a``, those only it runs first, then the rest; for ``b``, the rest. Within each part
    the ``later`` files (those waiting for a build) come first, so that each is taken as soon
    as its binaries are built rather than after the files that were ready all along."""
    files = list(files)
    late = set(later)
    key = {f: (not lane_a_only(f), f not in late) for f in files}
    ordered = sorted(files, key=key.__getitem__)  # stable: collection order within a part
    return ordered if lane == "a" else [f for f in ordered if not lane_a_only(f)]


def build_state(status: str, alive: bool) -> tuple[frozenset[str], bool]:
    """What hack/test.sh's build beside the lanes has done, from its status file's text
    (``NAME EXIT TIME`` a line, one per finished build of ``BUILD_ORDER``) and whether its
    process still runs (read ``alive`` before the file: a build that ends in between has
    written its line by then). Returns (the binaries built, exit 0; True when no build is left:
    every one wrote its line, or the process is gone)."""
    lines = [line.split() for line in status.splitlines() if line.strip()]
    built = frozenset(w[0] for w in lines if len(w) >= 2 and w[1] == "0")
    return built, (not alive) or len(lines) >= len(BUILD_ORDER)


def lane_env(lane: str, env: Mapping[str, str], root: Path) -> dict[str, str]:
    """The variables lane ``lane`` sets over ``env`` (none for ``a``): for ``b``, its lab's
    port base, pykueue's ports, the reconciler lab's port base and both labs' state
    directories, each outside lane ``a``'s (the defaults are hack/lab.py's and
    tests/integration/reconciler_support.py's). The MultiKueue workers' labs live beside the
    lab's state directory, so lane ``b``'s is one level down in its own directory."""
    if lane == "a":
        return {}
    off = LANE_B_PORT_OFFSET
    out = {
        "LAB_PORT_BASE": str(int(env.get("LAB_PORT_BASE") or 16440) + off),
        "PYKUEUE_PORT": str(int(env.get("PYKUEUE_PORT") or 9443) + off),
        "RECONCILER_LAB_PORT_BASE": str(int(env.get("RECONCILER_LAB_PORT_BASE") or 16740) + off),
        "LAB_STATE_DIR": str(root / "build" / f"lane-{lane}" / ".lab"),
        "RECONCILER_LAB_STATE": str(Path(env.get("RECONCILER_LAB_STATE") or Path(
            tempfile.gettempdir()) / "pykueue-reconciler-lab").with_name(
            f"pykueue-reconciler-lab-{lane}")),
    }
    if env.get("PYKUEUE_VISIBILITY_PORT"):
        out["PYKUEUE_VISIBILITY_PORT"] = str(int(env["PYKUEUE_VISIBILITY_PORT"]) + off)
    return out


def lanes_check(lanes_dir: Path) -> list[str]:
    """What went wrong with the lanes' run in ``lanes_dir`` (tests/lanes.py's files): a file
    collected by a lane and run by none, or run by both; empty when every file ran once, or
    when the lanes only collected (``--co``: ``<dir>/collect-only``)."""
    if (lanes_dir / "collect-only").exists():
        return []  # ``--co``: the lanes collected and ran nothing (brk32 L2)
    collected: set[str] = set()
    ran: dict[str, int] = {}
    for f in sorted(lanes_dir.glob("collected-*")):
        collected.update(f.read_text().split())
    for f in sorted(lanes_dir.glob("ran-*")):
        for path in f.read_text().split():
            ran[path] = ran.get(path, 0) + 1
    problems = [f"{p}: collected, run by no lane" for p in sorted(collected - set(ran))]
    problems += [f"{p}: run by {n} lanes" for p, n in sorted(ran.items()) if n > 1]
    if not collected:
        problems.append(f"{lanes_dir}: no lane collected a file")
    return problems


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("order", "missing", "lane-env", "lanes-check"))
    p.add_argument("--built", default="", help="the binaries built, space-separated")
    p.add_argument("files", nargs="*")
    a = p.parse_intermixed_args(argv)
    if a.what == "lane-env":
        root = Path(__file__).resolve().parent.parent
        for lane in a.files:
            for k, v in lane_env(lane, os.environ, root).items():
                print(f"{k}={v}")
    elif a.what == "lanes-check":
        problems = lanes_check(Path(a.files[0]))
        for line in problems:
            print(f"lanes: {line}", file=sys.stderr)
        return 1 if problems else 0
    elif a.what == "order":
        print("\n".join(BUILD_ORDER))
    else:
        have = set(a.built.split())
        for f in a.files:
            if lack := sorted(needs(f) - have):
                print(f"{f}: {' '.join(lack)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
