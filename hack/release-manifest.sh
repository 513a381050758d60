#!/usr/bin/env bash
# The one-file installs, as Kueue releases manifests.yaml: `kubectl kustomize` of
# manifests/default into dist/pykueue.yaml and of manifests/overlays/cert-manager into
# dist/pykueue-cert-manager.yaml, each with a header saying what the user still provides
# (docs/helm.md). Applied with `kubectl apply --server-side -f`. KUBECTL: the lab's kubectl.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
KUBECTL="${KUBECTL:-$ROOT/.k8sbin/current/kubectl}"
VERSION="$(awk -F'"' '/^version/{print $2; exit}' "$ROOT/pyproject.toml")"
mkdir -p "$ROOT/dist"

header() { # $1: the kustomization, $2: how the serving certificate comes
  cat <<HDR
# pykueue $VERSION: \`kubectl kustomize $1\`. Install: kubectl apply --server-side -f THIS_FILE
# The webhooks' serving certificate: $2
# Also: patch the NetworkPolicy's pod CIDR to your cluster's in both rules (port 9443, and 8082 of
# the visibility API's listener, which the APIServices reach through the Service's port 8082;
# docs/security.md) and give kube-scheduler the extender
# (manifests/scheduler/kube-scheduler-config.yaml).
HDR
}

{ header manifests/default "create the Secret pykueue-webhook-server-cert (tls.crt, tls.key,
#   ca.crt) in pykueue-system and set the caBundle of both webhook configurations and of both
#   visibility APIServices (manifests/README.md, docs/helm.md);
#   until then the pods wait and the webhooks refuse queued jobs (unlabelled ones never wait)."
  "$KUBECTL" kustomize "$ROOT/manifests/default"; } > "$ROOT/dist/pykueue.yaml.tmp"
{ header manifests/overlays/cert-manager "cert-manager (installed first) issues it and injects
#   its CA into both webhook configurations and both visibility APIServices."
  "$KUBECTL" kustomize "$ROOT/manifests/overlays/cert-manager"; } > "$ROOT/dist/pykueue-cert-manager.yaml.tmp"
mv "$ROOT/dist/pykueue.yaml.tmp" "$ROOT/dist/pykueue.yaml"
mv "$ROOT/dist/pykueue-cert-manager.yaml.tmp" "$ROOT/dist/pykueue-cert-manager.yaml"
echo "release-manifest: dist/pykueue.yaml ($(grep -c '^kind:' "$ROOT/dist/pykueue.yaml") objects)," \
  "dist/pykueue-cert-manager.yaml ($(grep -c '^kind:' "$ROOT/dist/pykueue-cert-manager.yaml") objects)"
