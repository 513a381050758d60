#!/usr/bin/env bash
# Build Helm's command line (helm.sh/helm/v4/cmd/helm) from the Go module proxy, the way
# hack/build-kueue.sh builds Kueue, into ~/.cache/pykueue/helm/<version>/helm, for
# `make chart-lint` and the chart tests (tests/unit/test_chart.py). The version comes from
# hack/tools/helm/go.mod. A no-op when the binary is there. With PYKUEUE_BUILD_CHECK=1 nothing is
# built: exit 0 when the binary is there, 3 otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOL="$ROOT/hack/tools/helm"
V="$(awk '$1=="require" && $2=="helm.sh/helm/v4"{print $3} $1=="helm.sh/helm/v4"{print $2}' "$TOOL/go.mod" | head -1)"
CACHE="${PYKUEUE_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pykueue/helm}"
OUT="$CACHE/$V"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
if [[ -x "$OUT/helm" ]]; then
  echo "helm: $V up to date in $OUT"
  exit 0
fi
[[ -z "${PYKUEUE_BUILD_CHECK:-}" ]] || exit 3
mkdir -p "$OUT"
start=$(date +%s)
echo "helm: building $V"
# Helm's own Makefile stamps the version this way (internal/version).
LDF="-s -w -X helm.sh/helm/v4/internal/version.version=$V"
(cd "$TOOL" && go build -trimpath -ldflags "$LDF" -o "$OUT/helm.tmp.$$" helm.sh/helm/v4/cmd/helm)
mv "$OUT/helm.tmp.$$" "$OUT/helm"
echo "helm: built $V in $(( $(date +%s) - start ))s into $OUT"
