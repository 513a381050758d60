#!/usr/bin/env bash
# `make test`: every test under tests/, with the binaries only the later tests start built behind
# the first tests. `make test` builds the control plane first (every lab test needs it); the
# operators, Helm and kueuectl (`make operators helm kueuectl`) then build in the background at a
# low CPU priority, one after the other in hack/test_waves.py's BUILD_ORDER, while the tests that
# need only the control plane run (tests/conformance, tests/integration, tests/unit and the e2e
# files in FIRST_E2E below). The tests that start those binaries (LATER below) then run in
# waves, each one pytest on a fresh lab: as soon as the first run ends, the LATER files whose
# binaries are all built (hack/test_waves.py NEEDS) while the rest keep building; then those
# built by the time that wave ends; and so on (with none ready, the next wave waits for the next
# build). When those binaries are already built, everything runs in two lanes (run_lanes).
# On a fresh machine this spends the cores the lab tests leave idle on the Go builds, and the
# builds' last minutes on tests (docs/ci.md has the measured figures). Once every binary is
# built, the tests left run in two lanes (run_lanes below). Arguments go to pytest
# (e.g. -x, -k NAME; every run gets them).
# Exit status: the build's when a build failed (the files needing what it did not build are
# listed, not run; the others still run), else pytest's: the first failing run's, 5 when no run
# collected a test.
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
# runs in the waves unless it is listed here.
FIRST_E2E=(tests/e2e/test_dashboard_seed.py tests/e2e/test_kinds_preemption.py
  tests/e2e/test_visibility.py tests/e2e/test_workload_kinds.py tests/e2e/test_unqueued_pods.py
  tests/e2e/test_job_being_deleted_stopped.py tests/e2e/test_multikueue_crds_absent.py
  tests/e2e/test_deleted_job_quota_held.py tests/e2e/test_deleted_pod_workload_held.py
  tests/e2e/test_pod_owner_reference_escape.py tests/e2e/test_workload_finalizer.py
  tests/e2e/test_owner_reference_release.py)
LATER=()
for f in tests/e2e/test_*.py; do
  [[ " ${FIRST_E2E[*]} " == *" $f "* ]] || LATER+=("$f")
done
LATER+=(tests/integration/test_operators.py tests/integration/test_manifests.py
  tests/unit/test_chart.py)
# Where every binary is built, the tests run in two lanes (tests/lanes.py): two pytests, each on
# a lab of its own (hack/test_waves.py lane-env), taking whole files from one list, so one
# lane's tests run while the other's wait on their labs. TEST_LANES=1 runs one pytest instead.
LANES="${TEST_LANES:-2}"
run_lanes() {
  if [[ $LANES == 1 ]]; then
    "${PYTEST[@]}" "$@"
    return
  fi
  mkdir -p "$ROOT/build"
  # pykueue's certificates (certs/out) once, before the lanes: each lane's lab would make them
  # when missing, and two at once can leave tls.crt signed by the other's CA (brk31 L1).
  make -s certs >/dev/null || return
  local dir lane rc=5 r pids=()
  dir="$(mktemp -d "$ROOT/build/lanes.XXXXXX")"
  echo "test: two lanes at $(date -u +%T) (tests/lanes.py; $dir), each line marked [a] or [b]"
  for lane in a b; do
    (
      mapfile -t extra < <(.venv/bin/python hack/test_waves.py lane-env "$lane")
      env "${extra[@]}" PYKUEUE_TEST_LANE="$lane" PYKUEUE_TEST_LANES="$dir" \
        "${PYTEST[@]}" "$@" 2>&1
      echo $? >"$dir/rc-$lane"
    ) | sed -u "s/^/[$lane] /" &
    pids+=($!)
  done
  wait "${pids[@]}"
  # The first failing lane's status (not 5, "no tests collected"); else 0 when a lane ran one.
  for lane in a b; do
    r="$(cat "$dir/rc-$lane" 2>/dev/null || echo 1)"
    if [[ $r != 0 && $r != 5 ]]; then
      rc=$r
      break
    fi
    [[ $r == 5 ]] || rc=0
  done
  if [[ $rc == 0 ]] && ! .venv/bin/python hack/test_waves.py lanes-check "$dir"; then
    rc=1
  fi
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
# "NAME EXIT TIME" to $STATUS, which the waves below read. A failed build does not stop the
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
build_pid=$!
set +m
trap 'kill -TERM -- -"$build_pid" 2>/dev/null' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
echo "test: building ${ORDER[*]} behind the first tests (log: $LOG)"
ignore=()
for p in "${LATER[@]}"; do ignore+=("--ignore=$p"); done
PYKUEUE_TEST_BINARIES_PENDING=1 "${PYTEST[@]}" "$@" tests "${ignore[@]}"
rcs=($?)

# The second run, in waves: each wave is one pytest (on a lab of its own) over the LATER files
# not run yet whose binaries are all built (hack/test_waves.py NEEDS; a file not listed there
# waits for every build). With none ready it waits for the next build to finish. A wave started
# while the build goes on has PYKUEUE_TEST_WAVE set: a test there skipped because a binary is
# "not built" fails instead (tests/conftest.py), its file's NEEDS entry lacks that binary.
pending=("${LATER[@]}")
build_rc=""
seen=-1
wave=0
have=""
while ((${#pending[@]})); do
  done_now=$(wc -l <"$STATUS")
  # Over when every build wrote its line, or when the loop died on the way (killed).
  if [[ -z $build_rc ]] && { ((done_now == ${#ORDER[@]})) || ! kill -0 "$build_pid" 2>/dev/null; }; then
    wait "$build_pid"
    build_rc=$?
    echo "test: the build finished (exit $build_rc); its log:"
    cat "$LOG"
  fi
  if [[ $done_now == "$seen" && -z $build_rc ]]; then
    sleep 5
    continue
  fi
  seen=$done_now
  have="$(awk '$2 == 0 {printf "%s ", $1}' "$STATUS")"
  mapfile -t ready < <(.venv/bin/python hack/test_waves.py ready --built "$have" "${pending[@]}")
  if ((${#ready[@]} == 0)); then
    [[ -z $build_rc ]] || break
    continue
  fi
  wave=$((wave + 1))
  echo "test: wave $wave at $(date -u +%T) (built: ${have:-none}): ${ready[*]}"
  if [[ -z $build_rc ]]; then
    PYKUEUE_TEST_WAVE=1 "${PYTEST[@]}" "$@" "${ready[@]}"
  else  # every binary built: the rest in two lanes
    run_lanes "$@" "${ready[@]}"
  fi
  rcs+=($?)
  left=()
  for f in "${pending[@]}"; do
    [[ " ${ready[*]} " == *" $f "* ]] || left+=("$f")
  done
  pending=("${left[@]}")
done
if [[ -z $build_rc ]]; then  # every file ran before the last build ended
  wait "$build_pid"
  build_rc=$?
  echo "test: the build finished (exit $build_rc); its log:"
  cat "$LOG"
fi
if [[ $build_rc != 0 || ${#pending[@]} != 0 ]]; then
  echo "test: building the operators, Helm or kueuectl failed (exit $build_rc)" >&2
  if ((${#pending[@]})); then
    echo "test: not run, their binaries not built:" >&2
    .venv/bin/python hack/test_waves.py missing --built "$have" "${pending[@]}" | sed 's/^/  /' >&2
  fi
  [[ $build_rc == 0 ]] && exit 1  # a NEEDS entry names no binary of BUILD_ORDER
  exit "$build_rc"
fi
# 5 is pytest's "no tests collected": a run may select none (-k NAME).
status=5
for r in "${rcs[@]}"; do
  [[ $r == 5 ]] && continue
  [[ $r == 0 ]] || exit "$r"
  status=0
done
exit "$status"
