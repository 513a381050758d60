#!/usr/bin/env bash
# Build the training operators GPU teams submit through (issue 18) from the Go module proxy, the way
# hack/build-controlplane.sh builds Kubernetes: one tool module per operator under hack/tools/
# (their Kubernetes and controller-runtime versions differ, so one module would move some of them
# off the versions they were released with), binaries cached per version under
# ~/.cache/pykueue/operators/<name>-<version>/, next to the CRDs copied out of the same module zip.
#
#   jobset             sigs.k8s.io/jobset                          JobSet
#   training-operator  github.com/kubeflow/training-operator        PyTorchJob TFJob XGBoostJob PaddleJob JAXJob
#   mpi-operator       github.com/kubeflow/mpi-operator              MPIJob kubeflow.org/v2beta1
#   kuberay            github.com/ray-project/kuberay/ray-operator  RayJob RayCluster RayService
#   lws                sigs.k8s.io/lws                              LeaderWorkerSet
#   trainer            github.com/kubeflow/trainer/v2               TrainJob TrainingRuntime ClusterTrainingRuntime
#   appwrapper         github.com/project-codeflare/appwrapper      AppWrapper
#   spark-operator     github.com/kubeflow/spark-operator/v2        SparkApplication
#
# The spark-operator runs spark-submit (cluster mode) to create a driver pod: next to it a
# SPARK_HOME is made in ~/.cache/pykueue/operators/spark-<version>/ from Maven Central
# (spark-core and spark-kubernetes with their runtime dependencies, `mvn
# dependency:copy-dependencies` on hack/tools/spark-operator/spark-pom.xml, which pins the
# version) and a bin/spark-submit that runs org.apache.spark.deploy.SparkSubmit on them
# (Spark's own launcher script does more; this is all cluster-mode submission needs). Needs
# java (17+) and mvn.
#
# Versions come from the go.mod files. A no-op for an operator whose folder already holds its
# binary and its crds/. Arguments: the operator names to build (default: all of them).
# With PYKUEUE_BUILD_CHECK=1 nothing is built: exit 0 when every one is built, 3 otherwise.
# The training-operator's module also ships a v1 mpijobs.kubeflow.org CRD that collides with the
# mpi-operator's v2beta1 one (the version Kueue manages): it is not copied.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS="$ROOT/hack/tools"
CACHE="${PYKUEUE_OPERATORS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pykueue/operators}"
export CGO_ENABLED=0 GOFLAGS=-mod=mod

declare -A MOD=(
  [jobset]=sigs.k8s.io/jobset
  [training-operator]=github.com/kubeflow/training-operator
  [mpi-operator]=github.com/kubeflow/mpi-operator
  [kuberay]=github.com/ray-project/kuberay/ray-operator
  [lws]=sigs.k8s.io/lws
  [trainer]=github.com/kubeflow/trainer/v2
  [appwrapper]=github.com/project-codeflare/appwrapper
  [spark-operator]=github.com/kubeflow/spark-operator/v2
)
declare -A MAIN=(
  [jobset]=sigs.k8s.io/jobset
  [training-operator]=github.com/kubeflow/training-operator/cmd/training-operator.v1
  [mpi-operator]=github.com/kubeflow/mpi-operator/cmd/mpi-operator
  [kuberay]=github.com/ray-project/kuberay/ray-operator
  [lws]=sigs.k8s.io/lws/cmd
  [trainer]=github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
  [appwrapper]=github.com/project-codeflare/appwrapper/cmd
  [spark-operator]=github.com/kubeflow/spark-operator/v2/cmd/operator
)
# CRD files inside each module zip (globs relative to the module root).
declare -A CRDS=(
  [jobset]="config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
  [training-operator]="manifests/base/crds/kubeflow.org_pytorchjobs.yaml manifests/base/crds/kubeflow.org_tfjobs.yaml manifests/base/crds/kubeflow.org_xgboostjobs.yaml manifests/base/crds/kubeflow.org_paddlejobs.yaml manifests/base/crds/kubeflow.org_jaxjobs.yaml"
  [mpi-operator]="manifests/base/kubeflow.org_mpijobs.yaml"
  [kuberay]="config/crd/bases/ray.io_rayjobs.yaml config/crd/bases/ray.io_rayclusters.yaml config/crd/bases/ray.io_rayservices.yaml"
  [lws]="config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
  [trainer]="manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml"
  [appwrapper]="config/crd/bases/workload.codeflare.dev_appwrappers.yaml"
  [spark-operator]="config/crd/bases/sparkoperator.k8s.io_sparkapplications.yaml config/crd/bases/sparkoperator.k8s.io_scheduledsparkapplications.yaml config/crd/bases/sparkoperator.k8s.io_sparkconnects.yaml"
)

version() { # the operator module's version pinned in its tool module's go.mod
  awk -v m="$2" '$1=="require" && $2==m{print $3} $1==m{print $2}' "$TOOLS/$1/go.mod" | head -1
}

ldflags() { # the version strings each project's own Makefile stamps
  local v=$2
  case $1 in
    jobset) echo "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$v" ;;
    lws) echo "-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=$v" ;;
    mpi-operator) echo "-s -w -X github.com/kubeflow/mpi-operator/pkg/version.Version=$v" ;;
    appwrapper) echo "-s -w -X main.BuildVersion=$v" ;;
    spark-operator) echo "-s -w -X k8s.io/component-base/version.gitVersion=$v" ;;
    *) echo "-s -w" ;;
  esac
}

spark_home() { # the SPARK_HOME the spark-operator runs spark-submit from (header)
  local pom="$TOOLS/spark-operator/spark-pom.xml" sv home start
  sv="$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' "$pom")"
  home="$CACHE/spark-$sv"
  if [[ -x "$home/bin/spark-submit" && -d "$home/jars" ]]; then
    echo "operators: spark $sv up to date in $home"
    return
  fi
  [[ -z "${PYKUEUE_BUILD_CHECK:-}" ]] || exit 3
  command -v mvn >/dev/null && command -v java >/dev/null \
    || { echo "operators: spark $sv needs java and mvn on PATH" >&2; exit 1; }
  start=$(date +%s)
  echo "operators: fetching spark $sv jars"
  rm -rf "$home.tmp.$$" && mkdir -p "$home.tmp.$$/bin"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$home.tmp.$$/jars"
  cat > "$home.tmp.$$/bin/spark-submit" <<'SUBMIT'
#!/usr/bin/env bash
# spark-submit for the lab (hack/build-operators.sh): Spark's SparkSubmit on the jars beside it.
SPARK_HOME="$(cd "$(dirname "$0")/.." && pwd)"
export SPARK_HOME
exec java ${SPARK_SUBMIT_OPTS:-} -cp "$SPARK_HOME/jars/*" org.apache.spark.deploy.SparkSubmit "$@"
SUBMIT
  chmod +x "$home.tmp.$$/bin/spark-submit"
  rm -rf "$home"
  mv -T "$home.tmp.$$" "$home" 2>/dev/null || rm -rf "$home.tmp.$$"
  [[ -x "$home/bin/spark-submit" ]]
  echo "operators: fetched spark $sv in $(( $(date +%s) - start ))s into $home"
}

names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(jobset training-operator mpi-operator kuberay lws trainer appwrapper spark-operator)
for n in "${names[@]}"; do
  [[ "$n" != spark-operator ]] || spark_home
  [[ -n "${MOD[$n]:-}" ]] || { echo "operators: unknown operator '$n' (one of: ${!MOD[*]})" >&2; exit 2; }
  v="$(version "$n" "${MOD[$n]}")"
  out="$CACHE/$n-$v"
  if [[ -x "$out/$n" && -d "$out/crds" ]]; then
    echo "operators: $n $v up to date in $out"
    continue
  fi
  [[ -z "${PYKUEUE_BUILD_CHECK:-}" ]] || exit 3
  mkdir -p "$out"
  start=$(date +%s)
  echo "operators: building $n $v"
  (cd "$TOOLS/$n" && go build -trimpath -ldflags "$(ldflags "$n" "$v")" -o "$out/$n.tmp.$$" "${MAIN[$n]}")
  dir="$(cd "$TOOLS/$n" && go list -m -f '{{.Dir}}' "${MOD[$n]}")"
  rm -rf "$out/crds.tmp.$$" && mkdir -p "$out/crds.tmp.$$"
  for f in ${CRDS[$n]}; do cp "$dir/$f" "$out/crds.tmp.$$/"; done
  chmod u+w "$out"/crds.tmp.$$/*  # the module cache is read-only
  # Two builds of one version (two runs on one machine) each write their own .tmp.$$; the
  # second to finish finds the first's CRDs in place and drops its own copy.
  rm -rf "$out/crds"
  mv -T "$out/crds.tmp.$$" "$out/crds" 2>/dev/null || rm -rf "$out/crds.tmp.$$"
  [[ -d "$out/crds" ]]
  mv "$out/$n.tmp.$$" "$out/$n"
  echo "operators: built $n $v in $(( $(date +%s) - start ))s into $out"
done
