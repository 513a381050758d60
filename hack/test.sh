#!/usr/bin/env bash
# `make test`: every test under tests/, with the binaries only the later tests start built behind
# the first tests. `make test` builds the control plane first (every lab test needs it); the
# operators, Helm and kueuectl (`make operators helm kueuectl`) then build in the background at a
# low CPU priority while the tests that need only the control plane run (tests/conformance,
# tests/integration, tests/unit and the e2e files in FIRST_E2E below); the tests that start
# those binaries (LATER below) run after them on a fresh lab. When those binaries are already built, one pytest runs everything.
# On a fresh machine this spends the cores the lab tests leave idle on the Go builds
# (docs/ci.md has the measured figures). Arguments go to pytest (e.g. -x, -k NAME).
# Exit status: pytest's (the first failing run's), or the build's when a build failed.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PYTEST=(.venv/bin/pytest -q)
# The tests that start the operators (tests/e2e, tests/integration/test_operators.py), kueuectl
# (tests/e2e/test_kueuectl.py) or Helm (tests/unit/test_chart.py,
# tests/integration/test_manifests.py).
# A test that asks for Helm in the first run fails (PYKUEUE_TEST_BINARIES_PENDING) instead of
# being skipped; the operators' and kueuectl's tests all live under tests/e2e and in
# test_operators.py.
# The e2e files that start none of them run in the first run too, so that the build has their
# idle time as well; a test there that finds an operator or kueuectl "not built" fails
# (tests/conftest.py), so a file that comes to need one must leave this list. A new e2e file
# runs in the second run unless it is listed here.
FIRST_E2E=(tests/e2e/test_dashboard_seed.py tests/e2e/test_kinds_preemption.py
  tests/e2e/test_visibility.py tests/e2e/test_workload_kinds.py tests/e2e/test_unqueued_pods.py
  tests/e2e/test_job_being_deleted_stopped.py tests/e2e/test_multikueue_crds_absent.py
  tests/e2e/test_deleted_job_quota_held.py)
LATER=()
for f in tests/e2e/test_*.py; do
  [[ " ${FIRST_E2E[*]} " == *" $f "* ]] || LATER+=("$f")
done
LATER+=(tests/integration/test_operators.py tests/integration/test_manifests.py
  tests/unit/test_chart.py)
LOG="$ROOT/build/test-binaries.log"
BUILDS=("hack/build-operators.sh" "hack/build-helm.sh" "hack/build-kueue.sh kueuectl")

built=1
for b in "${BUILDS[@]}"; do
  PYKUEUE_BUILD_CHECK=1 bash $b >/dev/null || built=0
done
if [[ $built == 1 ]]; then
  for b in "${BUILDS[@]}"; do bash $b || exit $?; done  # each prints "up to date"
  exec "${PYTEST[@]}" "$@" tests
fi

mkdir -p "$(dirname "$LOG")"
# The build runs in its own process group (job control), so that it is stopped with this script
# (Ctrl-C, a CI timeout) instead of going on alone: background jobs ignore SIGINT.
set -m
(
  for b in "${BUILDS[@]}"; do nice -n 10 bash $b || exit $?; done
) >"$LOG" 2>&1 &
build_pid=$!
set +m
trap 'kill -TERM -- -"$build_pid" 2>/dev/null' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
echo "test: building the operators, Helm and kueuectl behind the first tests (log: $LOG)"
ignore=()
for p in "${LATER[@]}"; do ignore+=("--ignore=$p"); done
PYKUEUE_TEST_BINARIES_PENDING=1 "${PYTEST[@]}" "$@" tests "${ignore[@]}"
rc1=$?
echo "test: waiting for the operators, Helm and kueuectl"
wait "$build_pid"
build_rc=$?
cat "$LOG"
if [[ $build_rc != 0 ]]; then
  echo "test: building the operators, Helm or kueuectl failed (exit $build_rc)" >&2
  exit "$build_rc"
fi
"${PYTEST[@]}" "$@" "${LATER[@]}"
rc2=$?
# 5 is pytest's "no tests collected": one of the two runs may select none (-k NAME).
if [[ $rc1 == 5 && $rc2 == 5 ]]; then exit 5; fi
[[ $rc1 == 0 || $rc1 == 5 ]] || exit "$rc1"
[[ $rc2 == 0 || $rc2 == 5 ]] || exit "$rc2"
exit 0
