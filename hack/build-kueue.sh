#!/usr/bin/env bash
# Build real Kueue from the Go module proxy for the side-by-side benchmark (make bench-versus)
# and the kueuectl tests: the manager (cmd/kueue), its kubectl plugin (cmd/kueuectl), Kueue's
# scheduler performance harness (minimalkueue, the runner) and the checker's test binary
# (go test -c), into ~/.cache/pykueue/kueue/<version>/.
# The version comes from hack/tools/kueue/go.mod. A no-op when every binary is there.
# Arguments name the binaries to build (default: all): `hack/build-kueue.sh kueuectl` is what
# `make test` needs (`make kueuectl`). With PYKUEUE_BUILD_CHECK=1 nothing is built: exit 0 when
# every binary asked for is there, 3 otherwise.
# Not part of `make test`: about 12 minutes cold on 2 cores.
# The runner and the checker read files below PROJECT_DIR (they panic when it is unset): run them
# with PROJECT_DIR=<Kueue module dir>/ as printed at the end (the module zip holds the configs).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOL="$ROOT/hack/tools/kueue"
V="$(awk '$1=="require" && $2=="sigs.k8s.io/kueue"{print $3} $1=="sigs.k8s.io/kueue"{print $2}' "$TOOL/go.mod" | head -1)"
CACHE="${PYKUEUE_KUEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pykueue/kueue}"
OUT="$CACHE/$V"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
PERF=sigs.k8s.io/kueue/test/performance/scheduler
declare -A PKG=(
  [kueue]=sigs.k8s.io/kueue/cmd/kueue
  [kueuectl]=sigs.k8s.io/kueue/cmd/kueuectl
  [minimalkueue]=$PERF/minimalkueue
  [runner]=$PERF/runner
)
WANT=("$@")
[[ ${#WANT[@]} -gt 0 ]] || WANT=(kueue kueuectl minimalkueue runner checker.test)
missing=0
for b in "${WANT[@]}"; do [[ -x "$OUT/$b" ]] || missing=1; done
[[ -z "${PYKUEUE_BUILD_CHECK:-}" ]] || exit $(( missing * 3 ))
if [[ $missing == 0 ]]; then
  echo "kueue: up to date in $OUT"
else
  mkdir -p "$OUT"
  start=$(date +%s)
  LDF="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$V"
  for b in kueue kueuectl minimalkueue runner; do
    if [[ " ${WANT[*]} " == *" $b "* && ! -x "$OUT/$b" ]]; then
      echo "kueue: building $b $V"
      (cd "$TOOL" && go build -trimpath -ldflags "$LDF" -o "$OUT/$b.tmp.$$" "${PKG[$b]}") && mv "$OUT/$b.tmp.$$" "$OUT/$b"
    fi
  done
  if [[ " ${WANT[*]} " == *" checker.test "* && ! -x "$OUT/checker.test" ]]; then
    echo "kueue: building the checker (go test -c) $V"
    (cd "$TOOL" && go test -c -trimpath -ldflags "-s -w" -o "$OUT/checker.test.tmp.$$" "$PERF/checker") \
      && mv "$OUT/checker.test.tmp.$$" "$OUT/checker.test"
  fi
  echo "kueue: built in $(( $(date +%s) - start ))s into $OUT"
fi
# Only the runner and the checker read PROJECT_DIR: a kueuectl-only build has nothing to print.
if [[ " ${WANT[*]} " == *" runner "* || " ${WANT[*]} " == *" checker.test "* ]]; then
  echo "kueue: PROJECT_DIR=$(cd "$TOOL" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)/"
fi
