#!/usr/bin/env bash
# `make test`: every test under tests/, in two lanes (run_lanes below, tests/lanes.py): two
# pytests, each on a lab of its own, taking whole files from one list, so that one lane's tests
# run while the other's wait on their labs. `make test` builds the control plane first (every
# lab test needs it). On a fresh machine the operators, Helm and kueuectl (`make operators helm
# kueuectl`) then build in the background at a low CPU priority, one after the other in
# hack/test_waves.py's BUILD_ORDER, beside the lanes: a file that starts one of them (LATER
# below) is taken only once its binaries are all built (hack/test_waves.py NEEDS), the other
# files at once; a lane with nothing left to take but files waiting for a build waits for it.
# This spends the cores the lab tests leave idle on the Go builds, and the builds' minutes on
# tests (docs/ci.md has the measured figures). Arguments go to pytest (e.g. -x, -k NAME; both
# lanes get them). TEST_LANES=1 runs one lane (one pytest).
# Exit status: the build's when a build failed (the files needing what it did not build are
# listed, not run; the others still run), else pytest's: the first failing lane's, 5 when no
# lane collected a test.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PYTEST=(.venv/bin/pytest -q)
# The tests that start the operators (tests/e2e, tests/integration/test_operators.py), kueuectl
# (tests/e2e/test_kueuectl.py) or Helm (tests/unit/test_chart.py,
# tests/integration/test_manifests.py): LATER, the files that wait for the build on a fresh
# machine. A test elsewhere that finds an operator, kueuectl or Helm "not built" while the build
# goes on fails instead of being skipped (tests/conftest.py, tests/install_support.py): its file
# must leave FIRST_E2E and get a NEEDS entry. The e2e files that start none of them are listed
# here, so that they run while the build goes on; a new e2e file waits for its NEEDS entry's
# binaries (every one when it has none) unless it is listed here.
FIRST_E2E=(tests/e2e/test_kinds_preemption.py
  tests/e2e/test_visibility.py tests/e2e/test_workload_kinds.py tests/e2e/test_unqueued_pods.py
  tests/e2e/test_job_being_deleted_stopped.py tests/e2e/test_multikueue_crds_absent.py
  tests/e2e/test_deleted_job_quota_held.py tests/e2e/test_deleted_pod_workload_held.py
  tests/e2e/test_pod_owner_reference_escape.py tests/e2e/test_workload_finalizer.py
  tests/e2e/test_owner_reference_release.py tests/e2e/test_adjusted_resources.py
  tests/e2e/test_pod_replacement_policy.py tests/e2e/test_forged_job_pods.py)
LATER=()
for f in tests/e2e/test_*.py; do
  [[ " ${FIRST_E2E[*]} " == *" $f "* ]] || LATER+=("$f")
done
LATER+=(tests/integration/test_operators.py tests/integration/test_manifests.py
  tests/unit/test_chart.py)
# The lanes (tests/lanes.py): two pytests, each on a lab of its own (hack/test_waves.py
# lane-env). With BUILD_PID set (the build still runs), the LATER files wait for their binaries.
# TEST_LANES=1: one pytest (pytest's own loop when nothing is being built, else lane a alone).
LANES="${TEST_LANES:-2}"
BUILD_PID=""
run_lanes() {
  if [[ $LANES == 1 && -z $BUILD_PID ]]; then
    "${PYTEST[@]}" "$@"
    return
  fi
  mkdir -p "$ROOT/build"
  # pykueue's certificates (certs/out) once, before the lanes: each lane's lab would make them
  # when missing, and two at once can leave tls.crt signed by the other's CA (brk31 L1).
  make -s certs >/dev/null || return
  local dir lane rc=5 r pids=() lanes=(a b) build=()
  [[ $LANES == 1 ]] && lanes=(a)
  dir="$(mktemp -d "$ROOT/build/lanes.XXXXXX")"
  if [[ -n $BUILD_PID ]]; then
    printf '%s\n' "${LATER[@]}" >"$dir/later"
    build=(PYKUEUE_TEST_BUILD_STATUS="$STATUS" PYKUEUE_TEST_BUILD_PID="$BUILD_PID" PYKUEUE_TEST_WAVE=1)
  fi
  echo "test: ${#lanes[@]} lane(s) at $(date -u +%T) (tests/lanes.py; $dir), each line marked [a] or [b]"
  for lane in "${lanes[@]}"; do
    (
      mapfile -t extra < <(.venv/bin/python hack/test_waves.py lane-env "$lane")
      env "${extra[@]}" "${build[@]}" PYKUEUE_TEST_LANE="$lane" PYKUEUE_TEST_LANES="$dir" \
        "${PYTEST[@]}" "$@" 2>&1
      echo $? >"$dir/rc-$lane"
    ) | sed -u "s/^/[$lane] /" &
    pids+=($!)
  done
  wait "${pids[@]}"
  # The first failing lane's status (not 5, "no tests collected"); else 0 when a lane ran one.
  for lane in "${lanes[@]}"; do
    r="$(cat "$dir/rc-$lane" 2>/dev/null || echo 1)"
    if [[ $r != 0 && $r != 5 ]]; then
      rc=$r
      break
    fi
    [[ $r == 5 ]] || rc=0
  done
  # Files a failed build left unrun are named by the caller instead.
  if [[ $rc == 0 && -z $BUILD_PID ]] && ! .venv/bin/python hack/test_waves.py lanes-check "$dir"; then
    rc=1
  fi
  LANES_DIR="$dir"
  echo "test: lanes done at $(date -u +%T) (exit $rc)"
  return "$rc"
}

LOG="$ROOT/build/test-binaries.log"
STATUS="$ROOT/build/test-binaries.status"
BUILDS=("hack/build-operators.sh" "hack/build-helm.sh" "hack/build-kueue.sh kueuectl")

built=1
for b in "${BUILDS[@]}"; do
  PYKUEUE_BUILD_CHECK=1 bash $b >/dev/null || built=0
done
if [[ $built == 1 ]]; then
  for b in "${BUILDS[@]}"; do bash $b || exit $?; done  # each prints "up to date"
  run_lanes "$@" tests
  exit
fi

mkdir -p "$(dirname "$LOG")"
# One build command per binary, in hack/test_waves.py's BUILD_ORDER; each finished build adds
# "NAME EXIT TIME" to $STATUS, which the lanes read (tests/lanes.py). A failed build does not stop the
# others: the files that do not need it still run, and the build's exit status is the script's.
mapfile -t ORDER < <(.venv/bin/python hack/test_waves.py order)
build_cmd() {
  case $1 in
    helm) echo "hack/build-helm.sh" ;;
    kueuectl) echo "hack/build-kueue.sh kueuectl" ;;
    *) echo "hack/build-operators.sh $1" ;;
  esac
}
: >"$STATUS"
# The build runs in its own process group (job control), so that it is stopped with this script
# (Ctrl-C, a CI timeout) instead of going on alone: background jobs ignore SIGINT.
set -m
(
  rc=0
  for n in "${ORDER[@]}"; do
    # shellcheck disable=SC2046 # the command's words
    nice -n 10 bash $(build_cmd "$n")
    r=$?
    echo "$n $r $(date -u +%T)" >>"$STATUS"
    [[ $r == 0 || $rc != 0 ]] || rc=$r
  done
  exit "$rc"
) >"$LOG" 2>&1 &
BUILD_PID=$!
set +m
trap 'kill -TERM -- -"$BUILD_PID" 2>/dev/null' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
echo "test: building ${ORDER[*]} beside the lanes (log: $LOG)"
LANES_DIR=""
run_lanes "$@" tests
rc=$?
wait "$BUILD_PID"
build_rc=$?
echo "test: the build finished (exit $build_rc); its log:"
cat "$LOG"
have="$(awk '$2 == 0 {printf "%s ", $1}' "$STATUS")"
if [[ $build_rc != 0 ]]; then
  echo "test: building the operators, Helm or kueuectl failed (exit $build_rc)" >&2
  echo "test: not run, their binaries not built:" >&2
  .venv/bin/python hack/test_waves.py missing --built "$have" "${LATER[@]}" | sed 's/^/  /' >&2
  exit "$build_rc"
fi
if [[ $rc == 0 && -n $LANES_DIR ]] && ! .venv/bin/python hack/test_waves.py lanes-check "$LANES_DIR"; then
  rc=1
fi
exit "$rc"
