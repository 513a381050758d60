#!/usr/bin/env bash
# Build the lab's control plane from Go modules into ~/.cache/pykueue/controlplane/<versions>/,
# linked as .k8sbin/current (git-ignored).
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl: k8s.io/kubernetes (hack/tools/k8s)
# etcd: go.etcd.io/etcd/server/v3 (hack/tools/etcd); kwok: sigs.k8s.io/kwok (hack/tools/kwok).
# A no-op when the stamped folder already holds every binary. Versions come from the go.mod files.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS="$ROOT/hack/tools"
K8S_V="$(awk '$1=="require" && $2=="k8s.io/kubernetes"{print $3} $1=="k8s.io/kubernetes"{print $2}' "$TOOLS/k8s/go.mod" | head -1)"
ETCD_V="$(awk '$1=="require" && $2=="go.etcd.io/etcd/server/v3"{print $3} $1=="go.etcd.io/etcd/server/v3"{print $2}' "$TOOLS/etcd/go.mod" | head -1)"
KWOK_V="$(awk '$1=="require" && $2=="sigs.k8s.io/kwok"{print $3} $1=="sigs.k8s.io/kwok"{print $2}' "$TOOLS/kwok/go.mod" | head -1)"
# Binaries are kept per version in a machine-wide cache so every clone on this machine shares them.
CACHE="${PYKUEUE_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pykueue/controlplane}"
OUT="$CACHE/k8s-$K8S_V-etcd-$ETCD_V-kwok-$KWOK_V"
BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok)
export CGO_ENABLED=0 GOFLAGS=-mod=mod
missing=0
for b in "${BINS[@]}"; do [[ -x "$OUT/$b" ]] || missing=1; done
if [[ $missing == 0 ]]; then
  echo "controlplane: up to date in $OUT"
else
  mkdir -p "$OUT"
  start=$(date +%s)
  if [[ ! -x "$OUT/etcd" ]]; then
    echo "controlplane: building etcd $ETCD_V"
    (cd "$TOOLS/etcd" && go build -trimpath -ldflags "-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3)
  fi
  if [[ ! -x "$OUT/kwok" ]]; then
    echo "controlplane: building kwok $KWOK_V"
    (cd "$TOOLS/kwok" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_V#v}" \
      -o "$OUT/kwok" sigs.k8s.io/kwok/cmd/kwok)
  fi
  minor="$(echo "$K8S_V" | cut -d. -f2)"
  LDF="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDF="$LDF -X $p.gitVersion=$K8S_V -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    LDF="$LDF -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  # One `go build` for the four: the packages are loaded once and the links overlap the
  # compiles (the binaries are the same as four separate builds give).
  todo=()
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    [[ -x "$OUT/$b" ]] || todo+=("k8s.io/kubernetes/cmd/$b")
  done
  if [[ ${#todo[@]} -gt 0 ]]; then
    echo "controlplane: building ${todo[*]##*/} $K8S_V"
    (cd "$TOOLS/k8s" && go build -trimpath -tags=selinux,notest -ldflags "$LDF" -o "$OUT/" "${todo[@]}")
  fi
  echo "controlplane: built in $(( $(date +%s) - start ))s into $OUT"
fi
mkdir -p "$ROOT/.k8sbin"
ln -sfn "$OUT" "$ROOT/.k8sbin/current"
