#!/usr/bin/env python3
"""The operators on the lab: JobSet, Kubeflow's training-operator, the mpi-operator, KubeRay,
LeaderWorkerSet, Kubeflow Trainer v2 and AppWrapper, each the real controller built from its
Go module by ``hack/build-operators.sh`` (``make operators``), run out of cluster against the
lab's admin kubeconfig as the lab runs kube-scheduler, logs in ``<lab state>/logs/<name>.log``.

    python hack/lab.py operators-up [NAME ...]    # install CRDs, start (default: every built one)
    python hack/lab.py operators-down [NAME ...]  # stop them, unregister their webhooks

What each needs out of cluster (read from each operator's v-pinned source, see docs/operators.md):

- jobset: always serves its webhooks (defaulting/validation of JobSets, and Pods of JobSets).
  Its internal cert management is turned off by a config file; it serves the lab's operator
  certificate from a folder on 127.0.0.1, and the lab registers its webhooks by URL.
- training-operator: always manages its certificate with cert-controller (Secret
  ``kubeflow/training-operator-webhook-cert``, CA injected into the
  ValidatingWebhookConfiguration ``validator.training-operator.kubeflow.org``) and waits for
  ``/tmp/k8s-webhook-server/serving-certs/tls.crt`` to exist before starting its controllers.
  The lab pre-creates that Secret with a certificate valid for both the in-cluster name the
  rotator checks and 127.0.0.1, so the rotator keeps it; the webhook server reads it from
  ``$TMPDIR/k8s-webhook-server/serving-certs`` (TMPDIR per lab). Started with
  ``--enable-scheme`` for PyTorchJob, TFJob, XGBoostJob, PaddleJob and JAXJob only: MPIJob
  (kubeflow.org/v2beta1, the version Kueue manages) belongs to the mpi-operator.
- mpi-operator: no webhook; leader election is always on (Lease in namespace mpi-operator); its
  health endpoint is fixed at :8080 on every interface, so one lab per machine can run it.
- kuberay: webhooks are opt-in (``ENABLE_WEBHOOKS=true``); off, as KubeRay ships.
- lws (LeaderWorkerSet): always serves its webhooks (defaulting/validation of LeaderWorkerSets,
  and of the Pods of LeaderWorkerSets: group index, worker index, env vars). As JobSet: a config
  file turns its internal cert management and leader election off, it serves the lab's operator
  certificate on 127.0.0.1, and the lab registers its webhooks by URL.

- trainer (Kubeflow Trainer v2 controller manager): a config file turns its cert management off
  and puts its webhook on 127.0.0.1 with the lab's operator certificate (read from
  ``$TMPDIR/k8s-webhook-server/serving-certs``, TMPDIR per lab); the lab registers its
  webhooks (TrainJob defaulting/validation, runtime validation) by URL. A TrainJob runs as a
  JobSet, so the jobset operator must run too.

- appwrapper (project-codeflare AppWrapper v1.2.0): its configuration is a ConfigMap
  (``appwrapper-operator-config`` in namespace ``appwrapper-system``, the ``NAMESPACE`` env),
  which the lab writes before starting it. Webhooks off (``webhooksEnabled: false``, the
  project's own out-of-cluster ``config/dev`` setting): its webhook server port is hard-coded
  to 9443 on every interface (one per machine) and its certificates come from cert-controller
  with in-cluster names; pykueue's AppWrapper webhook refuses what its validation refuses of a
  queued AppWrapper (component changes). No default queue name (``defaultQueueName`` unset:
  pykueue is the queue manager), Autopilot's node monitor and anti-affinities off (no GPU
  health labels on the lab's nodes), metrics off; ready when ``/healthz`` answers (its
  ``/readyz`` would start the webhook server on 9443).

- spark-operator (Kubeflow spark-operator v2.5.0): one binary, two processes, as its chart
  runs them. ``controller start`` (leader election, metrics and the Spark UI Service off) runs
  ``spark-submit`` from the SPARK_HOME ``make operators`` made beside it (Spark's jars from
  Maven Central and a launcher script, hack/build-operators.sh) with the lab's API server as
  ``KUBERNETES_SERVICE_HOST``/``PORT`` (its master URL) and the admin kubeconfig (the
  submission client's credentials). ``webhook start`` (``spark-operator-webhook``, a link to
  the same binary) mutates the operator's pods (driver and executors: the SparkApplication's
  nodeSelector, tolerations, ... of each role, which is how an admission's flavor reaches
  them) and defaults/validates SparkApplications. Its certificate provider keeps a Secret
  (``spark-operator-webhook-certs`` in namespace ``spark-operator``) whose server certificate
  verifies for ``<svc>.<svc namespace>.svc``: the lab pre-creates it with the lab's operator
  certificate and names the training-operator's Service (the DNS name that certificate
  carries), and registers the webhook configurations (``spark-operator-webhook``, whose CA
  bundle the webhook then keeps) by URL. Its webhook port has no host flag (every interface).

Ports: the lab's port base + 20 (jobset webhook), +21 (jobset probes), +22
(training-operator webhook, every interface: the operator has no host flag), +23
(training-operator probes), +24 (kuberay probes), +25 (lws webhook), +26 (lws probes), +27
(appwrapper probes; +28, +29 kept for it), +30 (trainer webhook), +31 (trainer probes), +32
(trainer status server), +33 (spark-operator controller probes), +34 (spark-operator webhook,
every interface), +35 (spark-operator webhook probes); 8080 (mpi-operator health).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import lab as labmod

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "hack" / "tools"
CACHE = Path(
    os.environ.get("PYKUEUE_OPERATORS_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pykueue" / "operators"
)
PART_OF = "pykueue-lab-operators"  # label on the webhook configurations the lab registers
MPI_HEALTH_PORT = 8080  # hard-coded in mpi-operator v0.8.0 (cmd/mpi-operator/app/server.go)
# The training-operator's cert rotator stats this path (pkg/cert/cert.go); it never reads it.
TRAINING_ROTATOR_CERT = Path("/tmp/k8s-webhook-server/serving-certs/tls.crt")
TRAINING_NAMESPACE = "kubeflow"  # the rotator's Secret lives there (MY_POD_NAMESPACE unset)
TRAINING_SECRET = "training-operator-webhook-cert"
TRAINING_DNS = f"training-operator.{TRAINING_NAMESPACE}.svc"
TRAINING_CA_NAME = "training-operator-ca"  # the rotator checks its CA has this DNS SAN
TRAINING_WEBHOOK = "validator.training-operator.kubeflow.org"
TRAINER_MUTATING = "defaulter.trainer.kubeflow.org"
TRAINER_VALIDATING = "validator.trainer.kubeflow.org"
APPWRAPPER_NAMESPACE = "appwrapper-system"
APPWRAPPER_CONFIG = "appwrapper-operator-config"  # its --config default
SPARK_NAMESPACE = "spark-operator"  # its webhook's Secret (--webhook-secret-namespace default)
SPARK_SECRET = "spark-operator-webhook-certs"  # --webhook-secret-name default
SPARK_WEBHOOK = "spark-operator-webhook"  # --mutating/--validating-webhook-name default
SPARK_WEBHOOK_PROCESS = "spark-operator-webhook"
SPARK_SUBMITTER = "spark-submit"  # the ServiceAccount spark-submit authenticates as


@dataclass(frozen=True)
class Operator:
    """One operator: its tool module under hack/tools/<name>, its binary and CRDs in the cache."""

    name: str
    module: str
    kinds: tuple[str, ...]

    @property
    def version(self) -> str:
        """The version pinned in ``hack/tools/<name>/go.mod`` (``require <module> <version>``)."""
        for line in (TOOLS / self.name / "go.mod").read_text().splitlines():
            words = line.split()
            if words[:1] == ["require"]:
                words = words[1:]
            if len(words) >= 2 and words[0] == self.module:
                return words[1]
        raise SystemExit(f"operators: {self.module} not required in hack/tools/{self.name}/go.mod")

    @property
    def folder(self) -> Path:
        return CACHE / f"{self.name}-{self.version}"

    @property
    def binary(self) -> Path:
        return self.folder / self.name

    @property
    def built(self) -> bool:
        extra = self.name != "spark-operator" or (spark_home() / "bin" / "spark-submit").exists()
        return self.binary.exists() and (self.folder / "crds").is_dir() and extra

    def crds(self) -> list[Path]:
        return sorted((self.folder / "crds").glob("*.yaml"))


def spark_home() -> Path:
    """The SPARK_HOME the spark-operator submits from: ``<cache>/spark-<version>``, the version
    pinned in hack/tools/spark-operator/spark-pom.xml (hack/build-operators.sh makes it)."""
    pom = (TOOLS / "spark-operator" / "spark-pom.xml").read_text()
    version = pom.split("<spark.version>", 1)[1].split("</spark.version>", 1)[0].strip()
    return CACHE / f"spark-{version}"


OPERATORS = {
    o.name: o
    for o in (
        Operator("jobset", "sigs.k8s.io/jobset", ("JobSet",)),
        Operator("training-operator", "github.com/kubeflow/training-operator",
                 ("PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob")),
        Operator("mpi-operator", "github.com/kubeflow/mpi-operator", ("MPIJob",)),
        Operator("kuberay", "github.com/ray-project/kuberay/ray-operator",
                 ("RayJob", "RayCluster", "RayService")),
        Operator("lws", "sigs.k8s.io/lws", ("LeaderWorkerSet",)),
        Operator("trainer", "github.com/kubeflow/trainer/v2",
                 ("TrainJob", "TrainingRuntime", "ClusterTrainingRuntime")),
        Operator("appwrapper", "github.com/project-codeflare/appwrapper", ("AppWrapper",)),
        Operator("spark-operator", "github.com/kubeflow/spark-operator/v2",
                 ("SparkApplication", "ScheduledSparkApplication", "SparkConnect")),
    )
}


def ports(lab: labmod.Lab) -> dict[str, int]:
    """The operators' local ports in this lab's block (see the module docstring)."""
    b = lab.port_base
    return {"jobset-webhook": b + 20, "jobset-probe": b + 21, "training-webhook": b + 22,
            "training-probe": b + 23, "kuberay-probe": b + 24, "lws-webhook": b + 25,
            "lws-probe": b + 26, "appwrapper-probe": b + 27, "trainer-webhook": b + 30,
            "trainer-probe": b + 31, "trainer-status": b + 32, "spark-probe": b + 33,
            "spark-webhook": b + 34, "spark-webhook-probe": b + 35,
            "mpi-health": MPI_HEALTH_PORT}


def _folder(lab: labmod.Lab) -> Path:
    return lab.state / "operators"


# ---------------------------------------------------------------- webhook certificate


def certs(lab: labmod.Lab) -> Path:
    """A CA and a serving certificate for the operators' webhook servers in
    ``<state>/operators/certs`` (ca.crt, ca.key, tls.crt, tls.key; made once per lab).

    RSA, with the CA key in PKCS#1: the training-operator's cert-controller v0.12 parses the
    Secret's ``ca.key`` with ParsePKCS1PrivateKey and keeps a Secret only when the CA verifies
    for the DNS name ``training-operator-ca`` and the leaf for ``training-operator.kubeflow.svc``
    (serverAuth) at 90 days ahead; the leaf also names 127.0.0.1, the URL the lab registers."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d = _folder(lab) / "certs"
    if (d / "tls.key").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    pem = serialization.Encoding.PEM

    def key_pem(key: rsa.RSAPrivateKey, fmt: serialization.PrivateFormat) -> bytes:
        return key.private_bytes(pem, fmt, serialization.NoEncryption())

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TRAINING_CA_NAME)])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                       critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(TRAINING_CA_NAME)]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TRAINING_DNS)]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName(TRAINING_DNS), x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    for name, data in (("ca.crt", ca.public_bytes(pem)), ("tls.crt", leaf.public_bytes(pem)),
                       ("ca.key", key_pem(ca_key, serialization.PrivateFormat.TraditionalOpenSSL)),
                       ("tls.key", key_pem(key, serialization.PrivateFormat.TraditionalOpenSSL))):
        (d / name).write_bytes(data)
        if name.endswith(".key"):
            (d / name).chmod(0o600)
    return d


def _webhook(name: str, url: str, ca: str, group: str, version: str, resource: str,
             operations: list[str], object_selector: dict | None = None) -> dict:
    """One admission webhook entry called by URL (the lab has no Services with endpoints)."""
    hook = {
        "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": "Fail", "clientConfig": {"url": url, "caBundle": ca},
        "rules": [{"apiGroups": [group], "apiVersions": [version], "operations": operations,
                   "resources": [resource]}],
    }
    if object_selector:
        hook["objectSelector"] = object_selector
    return hook


def _webhook_configuration(kind: str, name: str, hooks: list[dict]) -> dict:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": PART_OF}},
            "webhooks": hooks}


def _ca_bundle(lab: labmod.Lab) -> str:
    import base64

    return base64.b64encode((certs(lab) / "ca.crt").read_bytes()).decode()


# ---------------------------------------------------------------- per operator


@dataclass(frozen=True)
class Launch:
    """How to start one operator: arguments, extra environment, readiness URL."""

    args: list[str]
    env: dict[str, str]
    ready_url: str


def _jobset(lab: labmod.Lab) -> Launch:
    """JobSet v0.11.1: config file without internal cert management, webhooks by URL
    (paths and rules as its config/components/webhook, pod hooks limited to JobSet pods by the
    objectSelector of its kustomize patches)."""
    p = ports(lab)
    cfg = _folder(lab) / "jobset-config.yaml"
    cert_dir = certs(lab)
    cfg.write_text(json.dumps({
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": p["jobset-webhook"], "host": "127.0.0.1", "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{p['jobset-probe']}"},
        "metrics": {"bindAddress": "0", "certDir": str(cert_dir)},
        "clientConnection": {"qps": 50, "burst": 100},
    }, indent=2) + "\n")
    base = f"https://127.0.0.1:{p['jobset-webhook']}"
    ca = _ca_bundle(lab)
    pods = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
    g, v = "jobset.x-k8s.io", "v1alpha2"
    docs = [
        _webhook_configuration("MutatingWebhookConfiguration", "jobset-mutating-webhook", [
            _webhook("mjobset.kb.io", f"{base}/mutate-jobset-x-k8s-io-v1alpha2-jobset", ca,
                     g, v, "jobsets", ["CREATE"]),
            _webhook("mpod.kb.io", f"{base}/mutate--v1-pod", ca, "", "v1", "pods", ["CREATE"],
                     pods),
        ]),
        _webhook_configuration("ValidatingWebhookConfiguration", "jobset-validating-webhook", [
            _webhook("vjobset.kb.io", f"{base}/validate-jobset-x-k8s-io-v1alpha2-jobset", ca,
                     g, v, "jobsets", ["CREATE", "UPDATE"]),
            _webhook("vpod.kb.io", f"{base}/validate--v1-pod", ca, "", "v1", "pods", ["CREATE"],
                     pods),
        ]),
    ]
    _apply(lab, docs)
    return Launch([f"--config={cfg}", "--zap-log-level=info"], {},
                  f"http://127.0.0.1:{p['jobset-probe']}/readyz")


def _training_operator(lab: labmod.Lab) -> Launch:
    """training-operator v1.9.3: pre-made rotator Secret, webhook configuration by URL (paths and
    rules as its manifests/base/webhook), certificate served from a per-lab TMPDIR."""
    p = ports(lab)
    d = certs(lab)
    tmp = _folder(lab) / "training-operator-tmp"
    serving = tmp / "k8s-webhook-server" / "serving-certs"
    serving.mkdir(parents=True, exist_ok=True)
    for f in ("tls.crt", "tls.key"):
        (serving / f).write_bytes((d / f).read_bytes())
    if not TRAINING_ROTATOR_CERT.exists():
        # Only its existence is checked; the content is this lab's certificate (never read).
        TRAINING_ROTATOR_CERT.parent.mkdir(parents=True, exist_ok=True)
        TRAINING_ROTATOR_CERT.write_bytes((d / "tls.crt").read_bytes())
    import base64

    def b64(name: str) -> str:
        return base64.b64encode((d / name).read_bytes()).decode()

    base = f"https://127.0.0.1:{p['training-webhook']}"
    ca = _ca_bundle(lab)
    hooks = [
        _webhook(f"validator.{k.lower()}.training-operator.kubeflow.org",
                 f"{base}/validate-kubeflow-org-v1-{k.lower()}", ca, "kubeflow.org", "v1",
                 f"{k.lower()}s", ["CREATE", "UPDATE"])
        for k in OPERATORS["training-operator"].kinds
    ]
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TRAINING_NAMESPACE}},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": TRAINING_SECRET, "namespace": TRAINING_NAMESPACE},
         "data": {"ca.crt": b64("ca.crt"), "ca.key": b64("ca.key"),
                  "tls.crt": b64("tls.crt"), "tls.key": b64("tls.key")}},
        _webhook_configuration("ValidatingWebhookConfiguration", TRAINING_WEBHOOK, hooks),
    ]
    _apply(lab, docs)
    args = [f"--enable-scheme={k.lower()}" for k in OPERATORS["training-operator"].kinds]
    args += ["--metrics-bind-address=0", f"--health-probe-bind-address=127.0.0.1:"
             f"{p['training-probe']}", f"--webhook-server-port={p['training-webhook']}",
             "--leader-elect=false", "--kube-api-qps=50", "--kube-api-burst=100",
             "--controller-threads=2"]
    return Launch(args, {"TMPDIR": str(tmp)}, f"http://127.0.0.1:{p['training-probe']}/readyz")


def _mpi_operator(lab: labmod.Lab) -> Launch:
    """mpi-operator v0.8.0: no webhook; its Lease namespace must exist."""
    _apply(lab, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mpi-operator"}}])
    if not _port_free(MPI_HEALTH_PORT):
        raise SystemExit(
            f"operators: 127.0.0.1:{MPI_HEALTH_PORT} is in use; mpi-operator v0.8.0 serves its "
            "health check there (hard-coded), so only one lab per machine can run it")
    return Launch([f"--kubeConfig={lab.kubeconfig}", "--lock-namespace=mpi-operator",
                   "--monitoring-port=0", "--threadiness=2", "--kube-api-qps=50",
                   "--kube-api-burst=100"], {},
                  f"http://127.0.0.1:{MPI_HEALTH_PORT}/healthz")


def _kuberay(lab: labmod.Lab) -> Launch:
    """KubeRay v1.6.0: webhooks stay off (its default; only RayCluster has one, opt-in)."""
    p = ports(lab)
    return Launch(["--metrics-addr=0", f"--health-probe-bind-address=127.0.0.1:"
                   f"{p['kuberay-probe']}", "--enable-leader-election=false",
                   "--log-stdout-encoder=console", "--qps=50", "--burst=100"], {},
                  f"http://127.0.0.1:{p['kuberay-probe']}/readyz")


def _lws(lab: labmod.Lab) -> Launch:
    """LeaderWorkerSet v0.8.0: as JobSet, a config file without internal cert management or
    leader election, webhooks by URL (paths and rules as its config/webhook, the pod hooks
    limited to LeaderWorkerSet pods by the objectSelector of its kustomize patches)."""
    p = ports(lab)
    cfg = _folder(lab) / "lws-config.yaml"
    cert_dir = certs(lab)
    cfg.write_text(json.dumps({
        "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": p["lws-webhook"], "host": "127.0.0.1", "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{p['lws-probe']}"},
        "metrics": {"bindAddress": "0"},
        "clientConnection": {"qps": 50, "burst": 100},
    }, indent=2) + "\n")
    base = f"https://127.0.0.1:{p['lws-webhook']}"
    ca = _ca_bundle(lab)
    pods = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name",
                                  "operator": "Exists"}]}
    g, v = "leaderworkerset.x-k8s.io", "v1"
    docs = [
        _webhook_configuration("MutatingWebhookConfiguration", "lws-mutating-webhook", [
            _webhook("mleaderworkerset.kb.io",
                     f"{base}/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset", ca,
                     g, v, "leaderworkersets", ["CREATE", "UPDATE"]),
            _webhook("mpod.kb.io", f"{base}/mutate--v1-pod", ca, "", "v1", "pods", ["CREATE"],
                     pods),
        ]),
        _webhook_configuration("ValidatingWebhookConfiguration", "lws-validating-webhook", [
            _webhook("vleaderworkerset.kb.io",
                     f"{base}/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset", ca,
                     g, v, "leaderworkersets", ["CREATE", "UPDATE"]),
            _webhook("vpod.kb.io", f"{base}/validate--v1-pod", ca, "", "v1", "pods",
                     ["CREATE", "UPDATE"], pods),
        ]),
    ]
    _apply(lab, docs)
    return Launch([f"--config={cfg}", "--zap-log-level=info"], {},
                  f"http://127.0.0.1:{p['lws-probe']}/readyz")


def _trainer(lab: labmod.Lab) -> Launch:
    """Kubeflow Trainer v2.2.0: config file without cert management, webhook on 127.0.0.1
    serving the lab's operator certificate from a per-lab TMPDIR, webhooks by URL (paths and
    rules as its ``+kubebuilder:webhook`` markers in pkg/webhooks). Its TrainJobs run as
    JobSets: start the jobset operator with it."""
    p = ports(lab)
    d = certs(lab)
    tmp = _folder(lab) / "trainer-tmp"
    serving = tmp / "k8s-webhook-server" / "serving-certs"
    serving.mkdir(parents=True, exist_ok=True)
    for f in ("tls.crt", "tls.key"):
        (serving / f).write_bytes((d / f).read_bytes())
    cfg = _folder(lab) / "trainer-config.yaml"
    cfg.write_text(json.dumps({
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
        "webhook": {"port": p["trainer-webhook"], "host": "127.0.0.1"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{p['trainer-probe']}"},
        "metrics": {"bindAddress": "0"},
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False},
        "statusServer": {"port": p["trainer-status"]},
        "clientConnection": {"qps": 50, "burst": 100},
    }))
    base = f"https://127.0.0.1:{p['trainer-webhook']}"
    ca = _ca_bundle(lab)
    g, v = "trainer.kubeflow.org", "v1alpha1"
    _apply(lab, [
        _webhook_configuration("MutatingWebhookConfiguration", TRAINER_MUTATING, [
            _webhook("defaulter.trainjob.trainer.kubeflow.org",
                     f"{base}/mutate-trainer-kubeflow-org-v1alpha1-trainjob", ca, g, v,
                     "trainjobs", ["CREATE", "UPDATE"]),
        ]),
        _webhook_configuration("ValidatingWebhookConfiguration", TRAINER_VALIDATING, [
            _webhook(f"validator.{r}.trainer.kubeflow.org",
                     f"{base}/validate-trainer-kubeflow-org-v1alpha1-{r}", ca, g, v, f"{r}s",
                     ["CREATE", "UPDATE"])
            for r in ("clustertrainingruntime", "trainingruntime", "trainjob")
        ]),
    ])
    return Launch([f"--config={cfg}", "--zap-log-level=info"], {"TMPDIR": str(tmp)},
                  f"http://127.0.0.1:{p['trainer-probe']}/readyz")


def _appwrapper(lab: labmod.Lab) -> Launch:
    """AppWrapper v1.2.0: its ConfigMap (module doc), then the controller alone."""
    p = ports(lab)
    config = {
        "appwrapper": {"autopilot": {"injectAntiAffinities": False, "monitorNodes": False},
                       "userRBACAdmissionCheck": False},
        "controllerManager": {"health": {"bindAddress": f"127.0.0.1:{p['appwrapper-probe']}"},
                              "metrics": {"bindAddress": "0"}, "leaderElection": False},
        "webhooksEnabled": False,
    }
    _apply(lab, [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APPWRAPPER_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": APPWRAPPER_CONFIG, "namespace": APPWRAPPER_NAMESPACE},
         "data": {"config.yaml": json.dumps(config, indent=2) + "\n"}},
    ])
    return Launch([f"--config={APPWRAPPER_CONFIG}", "--zap-log-level=info"],
                  {"NAMESPACE": APPWRAPPER_NAMESPACE},
                  f"http://127.0.0.1:{p['appwrapper-probe']}/healthz")


def _spark_operator(lab: labmod.Lab) -> Launch:
    """spark-operator v2.5.0: its webhook process first (module doc), then the controller."""
    import base64

    p = ports(lab)
    d = certs(lab)
    data = {key: base64.b64encode((d / f).read_bytes()).decode()
            for key, f in (("ca-cert.pem", "ca.crt"), ("ca-key.pem", "ca.key"),
                           ("server-cert.pem", "tls.crt"), ("server-key.pem", "tls.key"))}
    base = f"https://127.0.0.1:{p['spark-webhook']}"
    ca = _ca_bundle(lab)
    g, v = "sparkoperator.k8s.io", "v1beta2"
    pods = {"matchLabels": {"sparkoperator.k8s.io/launched-by-spark-operator": "true"}}
    _apply(lab, [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SPARK_NAMESPACE}},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": SPARK_SECRET, "namespace": SPARK_NAMESPACE}, "data": data},
        _webhook_configuration("MutatingWebhookConfiguration", SPARK_WEBHOOK, [
            _webhook("mutate--v1-pod.sparkoperator.k8s.io", f"{base}/mutate--v1-pod", ca,
                     "", "v1", "pods", ["CREATE"], pods),
            _webhook("mutate-sparkapplication.sparkoperator.k8s.io",
                     f"{base}/mutate-sparkoperator-k8s-io-v1beta2-sparkapplication", ca, g, v,
                     "sparkapplications", ["CREATE", "UPDATE"]),
        ]),
        _webhook_configuration("ValidatingWebhookConfiguration", SPARK_WEBHOOK, [
            _webhook("validate-sparkapplication.sparkoperator.k8s.io",
                     f"{base}/validate-sparkoperator-k8s-io-v1beta2-sparkapplication", ca, g, v,
                     "sparkapplications", ["CREATE", "UPDATE"]),
        ]),
    ])
    op = OPERATORS["spark-operator"]
    link = _folder(lab) / "bin" / SPARK_WEBHOOK_PROCESS
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(op.binary)
    cert_dir = _folder(lab) / "spark-webhook-certs"
    env = {**os.environ, "KUBECONFIG": str(lab.kubeconfig)}
    labmod._start(lab, SPARK_WEBHOOK_PROCESS, [
        "webhook", "start", f"--webhook-port={p['spark-webhook']}",
        f"--webhook-cert-dir={cert_dir}", "--webhook-svc-name=training-operator",
        f"--webhook-svc-namespace={TRAINING_NAMESPACE}",
        f"--health-probe-bind-address=127.0.0.1:{p['spark-webhook-probe']}",
        "--metrics-bind-address=0", "--leader-election=false", "--zap-log-level=info"],
        exe=link, env=env)
    labmod._wait_http(f"http://127.0.0.1:{p['spark-webhook-probe']}/readyz", None,
                      SPARK_WEBHOOK_PROCESS, 120, lab,
                      alive=lambda: bool(labmod._started_pid(lab, SPARK_WEBHOOK_PROCESS)))
    # spark-submit's Kubernetes client (fabric8) cannot read the lab's EC client key ("Invalid
    # DER: object is not integer"): it submits with a ServiceAccount token instead (the
    # ``kubeconfig`` system property, through SPARK_SUBMIT_OPTS, as in cluster it would use its
    # pod's token). cluster-admin: the lab's operators run as the lab's admin.
    _apply(lab, [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SPARK_SUBMITTER, "namespace": SPARK_NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"pykueue-lab-{SPARK_SUBMITTER}"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "cluster-admin"},
         "subjects": [{"kind": "ServiceAccount", "name": SPARK_SUBMITTER,
                       "namespace": SPARK_NAMESPACE}]},
    ])
    cfg = json.loads(lab.kubeconfig.read_text())
    cfg["users"] = [{"name": SPARK_SUBMITTER, "user": {
        "token": labmod.sa_token(lab, SPARK_NAMESPACE, SPARK_SUBMITTER, 86400)}}]
    cfg["contexts"][0]["context"]["user"] = SPARK_SUBMITTER
    submit_cfg = _folder(lab) / "spark-submit.kubeconfig"
    submit_cfg.touch(mode=0o600, exist_ok=True)
    submit_cfg.write_text(json.dumps(cfg, indent=2) + "\n")
    return Launch(["controller", "start", "--enable-ui-service=false",
                   f"--health-probe-bind-address=127.0.0.1:{p['spark-probe']}",
                   "--metrics-bind-address=0", "--leader-election=false",
                   "--driver-pod-creation-grace-period=30s", "--zap-log-level=info"],
                  {"SPARK_HOME": str(spark_home()), "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                   "SPARK_SUBMIT_OPTS": f"-Dkubeconfig={submit_cfg}",
                   "KUBERNETES_SERVICE_PORT": str(lab.apiserver_port)},
                  f"http://127.0.0.1:{p['spark-probe']}/readyz")


LAUNCH: dict[str, Callable[[labmod.Lab], Launch]] = {
    "jobset": _jobset, "training-operator": _training_operator,
    "mpi-operator": _mpi_operator, "kuberay": _kuberay, "lws": _lws,
    "trainer": _trainer, "appwrapper": _appwrapper, "spark-operator": _spark_operator,
}
WEBHOOKS = {  # what operators-down unregisters, per operator
    "jobset": [("mutatingwebhookconfiguration", "jobset-mutating-webhook"),
               ("validatingwebhookconfiguration", "jobset-validating-webhook")],
    "training-operator": [("validatingwebhookconfiguration", TRAINING_WEBHOOK)],
    "lws": [("mutatingwebhookconfiguration", "lws-mutating-webhook"),
            ("validatingwebhookconfiguration", "lws-validating-webhook")],
    "trainer": [("mutatingwebhookconfiguration", TRAINER_MUTATING),
                ("validatingwebhookconfiguration", TRAINER_VALIDATING)],
    "spark-operator": [("mutatingwebhookconfiguration", SPARK_WEBHOOK),
                       ("validatingwebhookconfiguration", SPARK_WEBHOOK)],
}
# Processes an operator runs beside its own (stopped with it).
COMPANIONS = {"spark-operator": [SPARK_WEBHOOK_PROCESS]}


# ---------------------------------------------------------------- helpers


def _apply(lab: labmod.Lab, docs: list[dict]) -> None:
    labmod.kubectl(lab, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                "items": docs}))


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))  # noqa: S104 - probing, never listening
        except OSError:
            return False
    return True


def _wait_ready(lab: labmod.Lab, name: str, url: str, timeout: float) -> None:
    labmod._wait_http(url, None, name, timeout, lab,
                      alive=lambda: bool(labmod._started_pid(lab, name)))


def _select(names: list[str] | None, *, built_only: bool) -> list[Operator]:
    unknown = sorted(set(names or []) - set(OPERATORS))
    if unknown:
        raise SystemExit(f"operators: unknown {unknown}; known: {sorted(OPERATORS)}")
    ops = [OPERATORS[n] for n in (names or OPERATORS)]
    if built_only:
        missing = [o.name for o in ops if not o.built]
        if missing and names:
            raise SystemExit(f"operators: {missing} not built; run `make operators`")
        ops = [o for o in ops if o.built]
    return ops


# ---------------------------------------------------------------- verbs


def install_crds(lab: labmod.Lab, ops: list[Operator], timeout: float = 90) -> None:
    """Apply each operator's CRDs (server-side: they exceed the client-side annotation limit)
    and wait until each is Established. Raises SystemExit naming the CRD and what kubectl said.
    CRD names follow the files' kubebuilder names ``<group>_<plural>.yaml``."""
    files = [f for o in ops for f in o.crds()]
    if not files:
        return
    labmod.kubectl(lab, "apply", "--server-side", "--force-conflicts",
                   *[a for f in files for a in ("-f", str(f))])
    deadline = time.monotonic() + timeout
    for f in files:
        group, _, plural = f.stem.partition("_")
        name = f"{plural}.{group}"
        while True:
            r = labmod.kubectl(lab, "get", "crd", name, "-o", "jsonpath={.status.conditions"
                               "[?(@.type==\"Established\")].status}", check=False)
            if r.returncode == 0 and r.stdout.strip() == "True":
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"operators: CRD {name} not Established after {timeout:.0f}s "
                                 f"({(r.stderr or r.stdout).strip() or 'no condition yet'})")
            time.sleep(0.3)


def up(lab: labmod.Lab, names: list[str] | None = None, timeout: float = 120, *,
       skip_busy: bool = False) -> list[str]:
    """Install the CRDs of the chosen operators (default: every built one) into the running lab,
    start each (a no-op for one already running) and wait for its health endpoint.
    Returns the names started or found running. Raises SystemExit with the reason (not built,
    port taken, exited with its log tail, not ready in ``timeout`` s). ``skip_busy`` (``make
    run``): leave mpi-operator out with one line when its fixed port 8080 is taken, instead of
    failing (another lab on this machine runs one)."""
    if not labmod._pid(lab, "kube-apiserver"):
        raise SystemExit("operators: the lab is not up (python hack/lab.py up)")
    ops = _select(names, built_only=True)
    if skip_busy and any(o.name == "mpi-operator" for o in ops) \
            and not labmod._pid(lab, "mpi-operator") and not _port_free(MPI_HEALTH_PORT):
        print(f"operators: mpi-operator left out: 127.0.0.1:{MPI_HEALTH_PORT} is in use (its "
              "health port is hard-coded; another lab on this machine runs one)")
        ops = [o for o in ops if o.name != "mpi-operator"]
    if not ops:
        raise SystemExit("operators: none built; run `make operators`")
    t0 = time.monotonic()
    _folder(lab).mkdir(parents=True, exist_ok=True)
    install_crds(lab, ops)
    started = []
    for o in ops:
        if labmod._pid(lab, o.name):
            started.append(o.name)
            continue
        launch = LAUNCH[o.name](lab)
        env = dict(os.environ)
        env.update({"KUBECONFIG": str(lab.kubeconfig), **launch.env})
        labmod._start(lab, o.name, launch.args, exe=o.binary, env=env)
        _wait_ready(lab, o.name, launch.ready_url, timeout)
        started.append(o.name)
        print(f"operators: {o.name} {o.version} ready (logs {lab.logs / (o.name + '.log')})")
    print(f"operators: up in {time.monotonic() - t0:.1f}s: {', '.join(started)}")
    return started


def down(lab: labmod.Lab, names: list[str] | None = None) -> None:
    """Stop the chosen operators (default: all) and unregister their webhooks; CRDs and objects
    stay (as after uninstalling an operator). Idempotent."""
    for o in _select(names, built_only=False):
        labmod._stop(lab, o.name)
        for companion in COMPANIONS.get(o.name, []):
            labmod._stop(lab, companion)
        if labmod._pid(lab, "kube-apiserver"):
            for kind, name in WEBHOOKS.get(o.name, []):
                labmod.kubectl(lab, "delete", kind, name, "--ignore-not-found", check=False)


def status(lab: labmod.Lab) -> list[tuple[str, str]]:
    """(name, state) per operator: running pid N / stopped / not built."""
    rows = []
    for o in OPERATORS.values():
        pid = labmod._pid(lab, o.name)
        state = (f"running pid {pid}" if pid else "stopped") if o.built else \
            "not built (make operators)"
        rows.append((f"{o.name} {o.version}", state))
        for companion in COMPANIONS.get(o.name, []):
            if (cpid := labmod._pid(lab, companion)):
                rows.append((f"{companion}", f"running pid {cpid}"))
    return rows


def built() -> list[str]:
    """Names of the operators whose binary and CRDs are in the cache."""
    return [o.name for o in OPERATORS.values() if o.built]


if __name__ == "__main__":
    raise SystemExit("operators: use `python hack/lab.py operators-up|operators-down`")
