#!/usr/bin/env python3
"""pykueue's lab: a real, container-less Kubernetes control plane on 127.0.0.1.

Processes (binaries built from Go modules by hack/build-controlplane.sh into .k8sbin/current):
etcd, kube-apiserver (RBAC + admission on), kube-controller-manager, kube-scheduler, and kwok
managing fake nodes with the stages in hack/lab/stages.yaml. State lives in a git-ignored folder
(default .lab/): PKI, kubeconfig, etcd data, logs, pid files.

    python hack/lab.py up        # start (a no-op when already up), create nodes, apply CRDs
    python hack/lab.py down      # stop every process it started and remove the state (idempotent)
    python hack/lab.py status    # which components run (exit 1 if any is down)
    python hack/lab.py dra       # (re)publish the DRA DeviceClass and ResourceSlices (up does it)
    python hack/lab.py scheduler --config FILE   # restart kube-scheduler with another config
    python hack/lab.py sa-token NAMESPACE NAME   # print a token of a ServiceAccount
    python hack/lab.py sa-kubeconfig [--out F]   # pykueue's SA + RBAC; kubeconfig with its token
    python hack/lab.py operators-up [NAME...]    # JobSet, training-, mpi-operator, KubeRay, ...
    python hack/lab.py operators-down [NAME...]  # (hack/operators.py; make operators builds)
    python hack/lab.py operators-crds NAME...    # their CRDs only (a MultiKueue manager)

Options (before the verb): --state-dir DIR, --port-base N (etcd N, N+1; apiserver N+3).
Env: LAB_STATE_DIR, LAB_PORT_BASE, LAB_BIN_DIR; pykueue's ports PYKUEUE_PORT (default 9443)
and PYKUEUE_VISIBILITY_PORT (its visibility API; default PYKUEUE_PORT + 1).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


@dataclass(frozen=True)
class Lab:
    """Paths and ports of one lab instance."""

    state: Path
    port_base: int
    bin_dir: Path

    @property
    def etcd_port(self) -> int:
        return self.port_base

    @property
    def etcd_peer_port(self) -> int:
        return self.port_base + 1

    @property
    def kwok_port(self) -> int:
        return self.port_base + 2

    @property
    def apiserver_port(self) -> int:
        return self.port_base + 3

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    def pidfile(self, name: str) -> Path:
        return self.state / "pids" / f"{name}.pid"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name


# ---------------------------------------------------------------- PKI (certs/pki.py)

# kube-apiserver's serving names: loopback (the lab) and the in-cluster ones (10.0.0.1: the
# first address of the default service CIDR, the `kubernetes` Service).
APISERVER_HOSTS = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                   "kubernetes.default.svc.cluster.local", "127.0.0.1", "10.0.0.1")


def _pki(lab: Lab) -> None:
    """Create CA, serving certs (kube-apiserver, kwok), the admin's client cert (group
    system:masters) and the service-account key pair (once), with pykueue's one generator."""
    if str(ROOT) not in sys.path:  # run as `python hack/lab.py`: certs/ is at the repo root
        sys.path.insert(0, str(ROOT))
    from certs.pki import ensure_ca, ensure_leaf, ensure_signing_key_pair

    d = lab.pki
    if (d / "done").exists():
        return
    ensure_ca(d, common_name="pykueue-lab-ca")
    ensure_leaf(d, "apiserver", "kube-apiserver", server=True, hosts=APISERVER_HOSTS)
    ensure_leaf(d, "admin", "lab-admin", server=False, organizations=["system:masters"])
    ensure_leaf(d, "kwok", "kwok", server=True, hosts=APISERVER_HOSTS)
    ensure_signing_key_pair(d, "sa")
    (d / "done").write_text("ok\n")


# kube-apiserver -> aggregated API servers (pykueue's visibility API): the front-proxy CA
# (kube-apiserver's --requestheader-client-ca-file, published in the ConfigMap
# kube-system/extension-apiserver-authentication) and the client certificate kube-apiserver
# presents when it proxies a request (--proxy-client-cert-file), CN FRONT_PROXY_CLIENT.
FRONT_PROXY_CLIENT = "front-proxy-client"


def _front_proxy_pki(lab: Lab) -> Path:
    """The front-proxy CA and kube-apiserver's proxy client certificate in
    ``<pki>/front-proxy/`` (kept while valid); returns that folder."""
    from certs.pki import ensure_ca, ensure_leaf

    d = lab.pki / "front-proxy"
    ensure_ca(d, common_name="pykueue-lab-front-proxy-ca")
    ensure_leaf(d, "front-proxy-client", FRONT_PROXY_CLIENT, server=False)
    return d


# kube-apiserver -> pykueue's webhooks: the client certificate the API server presents (lab CA),
# and the common name pykueue's webhook routes answer (webhook.client_names).
WEBHOOK_CLIENT = "kube-apiserver-webhook-client"


AUDIT_GROUPS = ("kueue.x-k8s.io", "batch", "ray.io", "jobset.x-k8s.io", "kubeflow.org",
                "trainer.kubeflow.org", "leaderworkerset.x-k8s.io", "apps")


def _audit_flags(lab: Lab) -> list[str]:
    """kube-apiserver's audit flags when ``LAB_AUDIT=1`` (a debugging aid, off by default):
    every write (create, update, patch, delete) to the job kinds, Workloads and pods is
    logged at level Metadata (who, what, when, response code) to ``logs/audit.log``, one JSON
    event a line, e.g. to find who deleted an object a test lost (``LAB_KEEP_LOGS=<dir>``
    keeps the logs when the lab goes down)."""
    if os.environ.get("LAB_AUDIT") != "1":
        return []
    policy = lab.state / "audit-policy.json"
    policy.write_text(json.dumps({
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata",
                   "verbs": ["create", "update", "patch", "delete", "deletecollection"],
                   "resources": [{"group": g} for g in AUDIT_GROUPS]
                   + [{"group": "", "resources": ["pods"]}]},
                  {"level": "None"}]}))
    return [f"--audit-policy-file={policy}", f"--audit-log-path={lab.logs / 'audit.log'}",
            "--audit-log-maxsize=200"]


def _admission_config(lab: Lab) -> Path:
    """kube-apiserver's ``--admission-control-config-file``: its webhook admission plugins
    present the lab CA's ``webhook-client`` certificate (CN ``WEBHOOK_CLIENT``) to every
    webhook that asks for one (kubeconfig user ``*``)."""
    from certs.pki import ensure_leaf

    ensure_leaf(lab.pki, "webhook-client", WEBHOOK_CLIENT, server=False)
    kubeconfig = lab.state / "webhook-client.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "users": [{"name": "*", "user": {
            "client-certificate": str(lab.pki / "webhook-client.crt"),
            "client-key": str(lab.pki / "webhook-client.key")}}],
    }, indent=2) + "\n")
    plugin = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
              "kubeConfigFile": str(kubeconfig)}
    config = lab.state / "admission-config.yaml"
    config.write_text(json.dumps({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
        "plugins": [{"name": name, "configuration": plugin}
                    for name in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")],
    }, indent=2) + "\n")
    return config


def _kubeconfig(lab: Lab, path: Path | None = None, user: str = "lab-admin",
                cert: str = "admin") -> None:
    """Write a kubeconfig for the lab's API server to ``path`` (default ``lab.kubeconfig``)
    that authenticates as ``user`` with the client certificate ``<pki>/<cert>.crt``."""
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "pykueue-lab",
                "cluster": {"server": lab.server, "certificate-authority": str(lab.pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(lab.pki / f"{cert}.crt"),
                    "client-key": str(lab.pki / f"{cert}.key"),
                },
            }
        ],
        "contexts": [
            {"name": "pykueue-lab", "context": {"cluster": "pykueue-lab", "user": user}}
        ],
        "current-context": "pykueue-lab",
    }
    (path or lab.kubeconfig).write_text(json.dumps(cfg, indent=2) + "\n")


# kube-controller-manager's own identity, as kubeadm gives it (CN system:kube-controller-manager;
# with --use-service-account-credentials=false every controller, the garbage collector's
# orphaning included, writes as it: pykueue's webhook.owner_reference_releasers names it). In
# system:masters, as the admin, so that its rights and API priority (exempt) stay the admin's.
KCM_USER = "system:kube-controller-manager"


def _controller_manager_kubeconfig(lab: Lab) -> Path:
    """The client certificate (kept while valid) and kubeconfig of kube-controller-manager."""
    from certs.pki import ensure_leaf

    ensure_leaf(lab.pki, "controller-manager", KCM_USER, server=False,
                organizations=["system:masters"])
    path = lab.state / "controller-manager.kubeconfig"
    _kubeconfig(lab, path, KCM_USER, "controller-manager")
    return path


# ---------------------------------------------------------------- processes


def _pid(lab: Lab, name: str) -> int | None:
    try:
        pid = int(lab.pidfile(name).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    # A zombie or a reused pid of another program is not ours.
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    if stat.split(") ", 1)[-1].startswith("Z") or Path(cmd).name != name:
        return None
    return pid


def _start(lab: Lab, name: str, args: list[str], *, exe: Path | None = None,
           env: dict[str, str] | None = None) -> None:
    """Start ``exe`` (default: the lab binary ``name``) in its own session, logs in
    ``<logs>/<name>.log``; a no-op when ``name`` already runs."""
    if _pid(lab, name):
        return
    lab.logs.mkdir(parents=True, exist_ok=True)
    lab.pidfile(name).parent.mkdir(parents=True, exist_ok=True)
    log = open(lab.logs / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(
        [str(exe or lab.binary(name)), *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        cwd=lab.state,
    )
    lab.pidfile(name).write_text(f"{proc.pid}\n")


def _stop(lab: Lab, name: str, timeout: float = 10.0,
          pid_of: Callable[[Lab, str], int | None] | None = None) -> None:
    """SIGTERM the process group of ``name``, SIGKILL after ``timeout`` s; drop its pid file.
    ``pid_of`` finds the live pid (default ``_pid``, which checks the binary's name)."""
    find = pid_of or _pid
    pid = find(lab, name)
    if pid:
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and find(lab, name):
                time.sleep(0.1)
            if not find(lab, name):
                break
    lab.pidfile(name).unlink(missing_ok=True)


def _ssl_context(lab: Lab) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(lab.pki / "ca.crt"))
    ctx.load_cert_chain(str(lab.pki / "admin.crt"), str(lab.pki / "admin.key"))
    return ctx


def _wait_http(url: str, ctx: ssl.SSLContext | None, what: str, timeout: float, lab: Lab,
               alive: Callable[[], bool] | None = None) -> None:
    """Poll ``url`` until HTTP 200; SystemExit after ``timeout`` s, or at once (with the tail of
    ``<logs>/<what>.log``) when ``alive`` says the process serving it has exited."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if alive and not alive():
            tail = (lab.logs / f"{what}.log").read_text(errors="replace")[-2000:]
            raise SystemExit(f"lab: {what} exited; last log lines:\n{tail}")
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=3) as r:  # noqa: S310
                if r.status == 200:
                    return
                last = f"HTTP {r.status}"
        except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
            last = str(exc)
        time.sleep(0.3)
    raise SystemExit(f"lab: {what} not ready after {timeout:.0f}s ({last}); see {lab.logs}")


def kubectl(lab: Lab, *args: str, input: str | None = None, check: bool = True):
    """Run the lab's kubectl against the lab's kubeconfig."""
    return subprocess.run(
        [str(lab.binary("kubectl")), "--kubeconfig", str(lab.kubeconfig), *args],
        input=input,
        text=True,
        capture_output=True,
        check=check,
    )


# DRA (issue 21): no device driver runs in the lab, so this plays the driver's part of
# publishing ResourceSlices: DRA_DEVICES devices of DeviceClass DRA_CLASS per kwok GPU node, each
# with the node's GPU model as attribute `model`. Kubernetes >= 1.34 serves resource.k8s.io/v1
# by default (DRA is GA, its gate locked on); kube-scheduler's DynamicResources plugin allocates
# the claims and kube-controller-manager's resource-claim controller makes them from templates,
# so no flag is needed. docs/dra.md.
DRA_CLASS = "gpu.example.com"
DRA_DEVICES = {"a100-0": "NVIDIA-A100-SXM4-80GB", "l4-0": "NVIDIA-L4"}
DRA_PER_NODE = 8


def dra_objects() -> list[dict]:
    """The DeviceClass ``gpu.example.com`` (devices of driver ``gpu.example.com``) and one
    ResourceSlice per GPU node (pool = node, devices ``gpu-0``..``gpu-7``)."""
    objs: list[dict] = [{
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": DRA_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRA_CLASS}'"}}]},
    }]
    for node, model in DRA_DEVICES.items():
        objs.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRA_CLASS}"},
            "spec": {
                "driver": DRA_CLASS, "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"gpu-{i}",
                             "attributes": {"model": {"string": model}, "index": {"int": i}}}
                            for i in range(DRA_PER_NODE)],
            },
        })
    return objs


def dra_up(lab: Lab) -> None:
    """Apply ``dra_objects`` (idempotent: server-side apply)."""
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": dra_objects()})
    kubectl(lab, "apply", "--server-side", "--force-conflicts", "-f", "-", input=doc)


EXTENDER_CLIENT = "kube-scheduler-client"  # certs/out/<this>.crt: kube-scheduler -> extender


def _scheduler_config(lab: Lab, source: Path) -> Path:
    """Copy a KubeSchedulerConfiguration, substituting ${KUBECONFIG}, ${PYKUEUE_CA_FILE},
    kube-scheduler's client certificate for the extender (${EXTENDER_CLIENT_CERT}/_KEY) and
    the extender's port (PYKUEUE_PORT)."""
    text = source.read_text()
    text = text.replace("${KUBECONFIG}", str(lab.kubeconfig))
    ca = os.environ.get("PYKUEUE_CA_FILE", str(ROOT / "certs" / "out" / "ca.crt"))
    text = text.replace("${PYKUEUE_CA_FILE}", ca)
    client = ROOT / "certs" / "out" / EXTENDER_CLIENT
    # The template's extender URL is 127.0.0.1:9443; a lab with another PYKUEUE_PORT serves
    # pykueue there, and 9443 may be another developer's pykueue.
    text = text.replace("https://127.0.0.1:9443/", f"https://127.0.0.1:{PYKUEUE_PORT}/")
    text = text.replace("${EXTENDER_CLIENT_CERT}", f"{client}.crt")
    text = text.replace("${EXTENDER_CLIENT_KEY}", f"{client}.key")
    out = lab.state / "kube-scheduler-config.yaml"
    out.write_text(text)
    return out


def _start_scheduler(lab: Lab, config: Path) -> None:
    _start(
        lab,
        "kube-scheduler",
        [
            f"--config={_scheduler_config(lab, config)}",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
        ],
    )


def up(lab: Lab, scheduler_config: Path) -> None:
    """Start every component (those already running are kept), then nodes and CRDs."""
    t0 = time.monotonic()
    for b in (*COMPONENTS, "kubectl"):
        if not lab.binary(b).exists():
            raise SystemExit(f"lab: {lab.binary(b)} missing; run `make controlplane` first")
    if not _pid(lab, "etcd") and not _pid(lab, "kube-apiserver"):
        import socket

        for port in (lab.etcd_port, lab.etcd_peer_port, lab.kwok_port, lab.apiserver_port):
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    raise SystemExit(
                        f"lab: 127.0.0.1:{port} is in use by another program (another lab?); "
                        "stop it or choose other ports with LAB_PORT_BASE"
                    ) from None
    lab.state.mkdir(parents=True, exist_ok=True)
    _pki(lab)
    front_proxy = _front_proxy_pki(lab)
    _kubeconfig(lab)
    kcm_kubeconfig = _controller_manager_kubeconfig(lab)
    pki = lab.pki
    _start(
        lab,
        "etcd",
        [
            "--name=lab",
            f"--data-dir={lab.state / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{lab.etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{lab.etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{lab.etcd_peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{lab.etcd_peer_port}",
            f"--initial-cluster=lab=http://127.0.0.1:{lab.etcd_peer_port}",
            "--unsafe-no-fsync",
            "--quota-backend-bytes=4294967296",
            "--auto-compaction-retention=1",
            "--log-level=warn",
        ],
    )
    _wait_http(f"http://127.0.0.1:{lab.etcd_port}/health", None, "etcd", 30, lab)
    _start(
        lab,
        "kube-apiserver",
        [
            f"--etcd-servers=http://127.0.0.1:{lab.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={lab.apiserver_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,DefaultTolerationSeconds,"
            "MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy,"
            "ResourceQuota,Priority",
            f"--admission-control-config-file={_admission_config(lab)}",
            # The aggregation layer (APIService v1beta2.visibility.kueue.x-k8s.io -> pykueue):
            # kube-apiserver authenticates the user, then proxies with its front-proxy client
            # certificate and the user in X-Remote-* headers.
            f"--requestheader-client-ca-file={front_proxy / 'ca.crt'}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={front_proxy / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={front_proxy / 'front-proxy-client.key'}",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
            *_audit_flags(lab),
        ],
    )
    _wait_http(f"{lab.server}/readyz", _ssl_context(lab), "kube-apiserver", 120, lab)
    _start(
        lab,
        "kube-controller-manager",
        [
            f"--kubeconfig={kcm_kubeconfig}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=false",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--controllers=*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--concurrent-job-syncs=10",
        ],
    )
    _start_scheduler(lab, scheduler_config)
    _start(
        lab,
        "kwok",
        [
            f"--kubeconfig={lab.kubeconfig}",
            "--manage-all-nodes=true",
            f"--config={ROOT / 'hack' / 'lab' / 'stages.yaml'}",
            f"--server-address=127.0.0.1:{lab.kwok_port}",
            "--node-ip=127.0.0.1",
            "--cidr=10.244.0.0/16",
            f"--tls-cert-file={pki / 'kwok.crt'}",
            f"--tls-private-key-file={pki / 'kwok.key'}",
        ],
    )
    # The API server may still be bootstrapping RBAC for a moment after /readyz.
    deadline = time.monotonic() + 60
    while True:
        r = kubectl(lab, "apply", "-f", str(ROOT / "hack" / "lab" / "nodes.yaml"), check=False)
        if r.returncode == 0:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"lab: creating nodes failed: {r.stderr}")
        time.sleep(1)
    dra_up(lab)
    crds = ROOT / "manifests" / "crds"
    if (crds / "kustomization.yaml").exists():
        kubectl(lab, "apply", "--server-side", "--force-conflicts", "-k", str(crds))
        kubectl(lab, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    r = kubectl(
        lab, "wait", "--for=condition=Ready", "--timeout=60s", "node", "--all", check=False
    )
    if r.returncode != 0:
        raise SystemExit(f"lab: nodes not Ready: {r.stderr}")
    kubectl(lab, "wait", "--for=jsonpath={.metadata.name}=default", "--timeout=60s", "sa/default")
    print(f"lab: up in {time.monotonic() - t0:.1f}s; state in {lab.state}")
    print(f"lab: export KUBECONFIG={lab.kubeconfig}")
    print(f"lab: kubectl is {lab.binary('kubectl')}")


def down(lab: Lab) -> None:
    """Stop pykueue, the operators and every component (reverse order), remove the state folder.
    Idempotent."""
    import operators

    pid = _pykueue_pid(lab)
    if pid:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for name in operators.OPERATORS:
        _stop(lab, name)
        # A companion process (the spark-operator's webhook) too: left running, it keeps
        # the lab's ports and answers the next lab's readiness probe with this one's TLS.
        for companion in operators.COMPANIONS.get(name, []):
            _stop(lab, companion)
    for name in reversed(COMPONENTS):
        _stop(lab, name)
    if lab.state.exists():
        import shutil

        keep = os.environ.get("LAB_KEEP_LOGS")
        if keep and lab.logs.exists():
            # A debugging aid: the logs (and LAB_AUDIT's audit.log) outlive the lab.
            dest = Path(keep) / f"{lab.state.name}-{time.strftime('%H%M%S')}"
            shutil.copytree(lab.logs, dest, dirs_exist_ok=True)
            print(f"lab: logs kept in {dest}")
        shutil.rmtree(lab.state, ignore_errors=True)
    print("lab: down")


def status(lab: Lab) -> int:
    bad = 0
    for name in COMPONENTS:
        pid = _pid(lab, name)
        print(f"{name:26s} {'running pid ' + str(pid) if pid else 'stopped'}")
        bad += pid is None
    # pykueue is optional in a lab (make pykueue-up): shown, not counted as missing.
    pid = _pykueue_pid(lab)
    print(f"{'pykueue':26s} "
          f"{'running pid ' + str(pid) if pid else 'not started (make pykueue-up)'}")
    import operators  # optional too (make operators-up)

    for name, state in operators.status(lab):
        print(f"{name:26s} {state}")
    return 1 if bad else 0


def sa_token(lab: Lab, namespace: str, name: str, seconds: int = 86400) -> str:
    r = kubectl(lab, "create", "token", "-n", namespace, name, f"--duration={seconds}s")
    return r.stdout.strip()


PYKUEUE_NAMESPACE = "pykueue-system"
PYKUEUE_SERVICE_ACCOUNT = "pykueue"


def sa_kubeconfig(lab: Lab, out: Path | None = None, seconds: int = 86400) -> Path:
    """Apply pykueue's Namespace, ServiceAccount and RBAC exactly as deployed
    (manifests/default/namespace.yaml, the kustomization manifests/rbac) and write a kubeconfig
    (mode 0600, default ``<state>/pykueue-sa.kubeconfig``) that authenticates with a token of
    ``system:serviceaccount:pykueue-system:pykueue`` valid ``seconds``, so pykueue runs in the
    lab under its own identity. Returns the kubeconfig path."""
    kubectl(lab, "apply", "-f", str(ROOT / "manifests" / "default" / "namespace.yaml"))
    kubectl(lab, "apply", "-k", str(ROOT / "manifests" / "rbac"))
    token = sa_token(lab, PYKUEUE_NAMESPACE, PYKUEUE_SERVICE_ACCOUNT, seconds)
    user = f"system:serviceaccount:{PYKUEUE_NAMESPACE}:{PYKUEUE_SERVICE_ACCOUNT}"
    cfg = json.loads(lab.kubeconfig.read_text())  # same cluster entry as the admin's
    cfg["users"] = [{"name": user, "user": {"token": token}}]
    cfg["contexts"] = [{"name": "pykueue", "context": {"cluster": "pykueue-lab", "user": user}}]
    cfg["current-context"] = "pykueue"
    out = out or lab.state / "pykueue-sa.kubeconfig"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.touch(mode=0o600, exist_ok=True)
    out.chmod(0o600)
    out.write_text(json.dumps(cfg, indent=2) + "\n")
    return out


PYKUEUE_PORT = int(os.environ.get("PYKUEUE_PORT", "9443"))
# The visibility API's listener (visibility.port; Kueue's and the manifests' 8082): the port
# after PYKUEUE_PORT, outside the lab's own block (base..base+35) as PYKUEUE_PORT is.
PYKUEUE_VISIBILITY_PORT = int(os.environ.get("PYKUEUE_VISIBILITY_PORT") or PYKUEUE_PORT + 1)


def _started_pid(lab: Lab, name: str) -> int | None:
    """The pid in ``name``'s pid file while that process lives (not a zombie), whatever it
    runs: unlike ``_pid`` it holds from fork on, before the child has exec'd its binary."""
    try:
        pid = int(lab.pidfile(name).read_text().strip())
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    return None if stat.split(") ", 1)[-1].startswith("Z") else pid


def _pykueue_pid(lab: Lab) -> int | None:
    return _started_pid(lab, "pykueue")


def pykueue_up(lab: Lab, *, admin: bool = False, extra_env: dict[str, str] | None = None,
               unlabelled: bool = False) -> None:
    """Start pykueue in the lab as a real user would deploy it, on 127.0.0.1:PYKUEUE_PORT
    (its visibility API on PYKUEUE_VISIBILITY_PORT).

    1. certificates (``certs/out``, kept while valid, with kube-scheduler's client certificate
    for the extender, which pykueue verifies against the same CA); 2. ``pykueue serve`` under
    its own ServiceAccount (``--admin``: the lab admin) with logs in ``<state>/logs/pykueue.log``;
    3. wait for ``/readyz``; 4. register the lab webhooks (caBundle = our CA; ``unlabelled``:
    those of Jobs, Pods, Deployments and StatefulSets see unlabelled objects, as the overlay
    manifests/overlays/unlabelled-jobs, for ``PYKUEUE_JOBS__MANAGE_JOBS_WITHOUT_QUEUE_NAME``)
    and the visibility API's APIServices (``_visibility_up``, waited for Available);
    5. restart kube-scheduler with the extender (manifests/scheduler/kube-scheduler-config.yaml).
    A no-op for the process when it already runs.
    """
    py = sys.executable
    subprocess.run([py, "-m", "certs.generate", "--out", str(ROOT / "certs" / "out"),
                    "--client", f"{EXTENDER_CLIENT}=system:kube-scheduler"],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    ca = ROOT / "certs" / "out" / "ca.crt"
    if not _pykueue_pid(lab):
        kubeconfig = lab.kubeconfig if admin else sa_kubeconfig(lab)
        env = dict(os.environ)
        env.update({
            "PYKUEUE_CLIENT__KUBECONFIG": str(kubeconfig),
            "PYKUEUE_SERVER__HOST": "127.0.0.1",
            "PYKUEUE_SERVER__PORT": str(PYKUEUE_PORT),
            "PYKUEUE_VISIBILITY__PORT": str(PYKUEUE_VISIBILITY_PORT),
            "PYKUEUE_SERVER__CERT_FILE": str(ROOT / "certs" / "out" / "tls.crt"),
            "PYKUEUE_SERVER__KEY_FILE": str(ROOT / "certs" / "out" / "tls.key"),
            "PYKUEUE_SERVER__CA_FILE": str(ca),
            # The extender answers only kube-scheduler's client certificate (made above).
            "PYKUEUE_SERVER__CLIENT_CA_FILE": str(ca),
        })
        if (lab.pki / "webhook-client.crt").exists():
            # The webhooks answer only kube-apiserver's certificate (lab CA, _admission_config):
            # both CAs are trusted for client certificates, each route checks its names.
            bundle = lab.state / "client-ca.crt"
            bundle.write_text(ca.read_text() + (lab.pki / "ca.crt").read_text())
            env.update({"PYKUEUE_SERVER__CLIENT_CA_FILE": str(bundle),
                        "PYKUEUE_WEBHOOK__CLIENT_NAMES": json.dumps([WEBHOOK_CLIENT])})
        env.update(extra_env or {})
        lab.logs.mkdir(parents=True, exist_ok=True)
        lab.pidfile("pykueue").parent.mkdir(parents=True, exist_ok=True)
        log = open(lab.logs / "pykueue.log", "ab")  # noqa: SIM115 - owned by the child
        exe = Path(py).parent / "pykueue"
        proc = subprocess.Popen([str(exe), "serve"], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=ROOT, env=env)
        lab.pidfile("pykueue").write_text(f"{proc.pid}\n")
    ctx = ssl.create_default_context(cafile=str(ca))
    _wait_http(f"https://127.0.0.1:{PYKUEUE_PORT}/readyz", ctx, "pykueue", 90, lab)
    out = lab.state / "webhooks.yaml"
    subprocess.run([py, str(ROOT / "hack" / "render_webhooks.py"), "--variant", "lab",
                    "--port", str(PYKUEUE_PORT), "--ca", str(ca), "--out", str(out),
                    *(["--unlabelled"] if unlabelled else [])],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    kubectl(lab, "apply", "-f", str(out))
    _visibility_up(lab, ca)
    # A viewer for the status API (`hack/lab.py sa-token pykueue-system pykueue-status-viewer`).
    kubectl(lab, "apply", "-f", str(ROOT / "hack" / "lab" / "status-viewer.yaml"))
    _stop(lab, "kube-scheduler")
    _start_scheduler(lab, ROOT / "manifests" / "scheduler" / "kube-scheduler-config.yaml")
    print(f"lab: pykueue serving on https://127.0.0.1:{PYKUEUE_PORT} (logs {lab.logs}/pykueue.log)")


VISIBILITY_APISERVICES = ROOT / "manifests" / "visibility" / "apiservices.yaml"


def _visibility_up(lab: Lab, ca: Path) -> None:
    """Register Kueue's visibility API with kube-apiserver's aggregation layer, pointing at
    the pykueue process's visibility listener on 127.0.0.1:PYKUEUE_VISIBILITY_PORT: the
    APIServices of manifests/visibility (caBundle: our CA, port: PYKUEUE_VISIBILITY_PORT)
    and, in place of the Deployment's Service, an
    ExternalName Service ``localhost`` of the same name (kube-apiserver refuses loopback
    endpoints, and without --enable-aggregator-routing it dials an ExternalName Service's
    name at the APIService's port). kube-apiserver verifies pykueue's certificate for
    ``pykueue-webhook-service.pykueue-system.svc``, one of its SANs."""
    import base64

    import yaml

    service = {"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "pykueue-webhook-service", "namespace": PYKUEUE_NAMESPACE,
        "labels": {"app.kubernetes.io/name": "pykueue"}},
        "spec": {"type": "ExternalName", "externalName": "localhost"}}
    docs = [d for d in yaml.safe_load_all(VISIBILITY_APISERVICES.read_text()) if d]
    for d in docs:
        d["spec"]["caBundle"] = base64.b64encode(ca.read_bytes()).decode()
        d["spec"]["service"]["port"] = PYKUEUE_VISIBILITY_PORT
    kubectl(lab, "apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [service, *docs]}))
    for d in docs:
        kubectl(lab, "wait", "--for=condition=Available", "--timeout=60s",
                f"apiservice/{d['metadata']['name']}")


def _visibility_down(lab: Lab) -> None:
    """Unregister the visibility API: an APIService whose server is gone makes discovery
    fail, which holds namespace deletion (kube-controller-manager) until it answers."""
    kubectl(lab, "delete", "apiservice", "-l", "app.kubernetes.io/name=pykueue",
            "--ignore-not-found", check=False)


def pykueue_down(lab: Lab) -> None:
    """Stop pykueue, unregister its webhooks and give kube-scheduler its plain config."""
    _stop(lab, "pykueue", pid_of=lambda lab, _name: _pykueue_pid(lab))
    if _pid(lab, "kube-apiserver"):
        _visibility_down(lab)
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            kubectl(lab, "delete", kind, "-l", "app.kubernetes.io/name=pykueue",
                    "--ignore-not-found", check=False)
        _stop(lab, "kube-scheduler")
        _start_scheduler(
            lab, ROOT / "manifests" / "scheduler" / "kube-scheduler-config-plain.yaml"
        )


def from_args(state_dir: str | None, port_base: int | None, bin_dir: str | None) -> Lab:
    state = Path(state_dir or os.environ.get("LAB_STATE_DIR") or ROOT / ".lab").resolve()
    port = int(port_base or os.environ.get("LAB_PORT_BASE") or 16440)
    bins = Path(bin_dir or os.environ.get("LAB_BIN_DIR") or ROOT / ".k8sbin" / "current").resolve()
    return Lab(state=state, port_base=port, bin_dir=bins)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--state-dir")
    p.add_argument("--port-base", type=int)
    p.add_argument("--bin-dir")
    sub = p.add_subparsers(dest="verb", required=True)
    u = sub.add_parser("up")
    u.add_argument(
        "--scheduler-config",
        default=str(ROOT / "manifests" / "scheduler" / "kube-scheduler-config-plain.yaml"),
    )
    sub.add_parser("down")
    sub.add_parser("dra", help="(re)publish the DRA DeviceClass and ResourceSlices")
    sub.add_parser("status")
    s = sub.add_parser("scheduler")
    s.add_argument("--config", required=True)
    t = sub.add_parser("sa-token")
    t.add_argument("namespace")
    t.add_argument("name")
    k = sub.add_parser("sa-kubeconfig")
    k.add_argument("--out", help="default: <state>/pykueue-sa.kubeconfig")
    k.add_argument("--duration", type=int, default=86400, help="token lifetime, seconds")
    pu = sub.add_parser("pykueue-up", help="start pykueue, register webhooks and extender")
    pu.add_argument("--admin", action="store_true", help="run with the admin kubeconfig")
    sub.add_parser("pykueue-down", help="stop pykueue and unregister it")
    ou = sub.add_parser("operators-up", help="install the operators' CRDs and start them "
                        "(hack/operators.py; default: every built one)")
    ou.add_argument("names", nargs="*")
    ou.add_argument("--skip-busy", action="store_true", help="leave mpi-operator out (one "
                    "line) when its hard-coded port 8080 is taken, instead of failing")
    od = sub.add_parser("operators-down", help="stop the operators, unregister their webhooks")
    od.add_argument("names", nargs="*")
    oc = sub.add_parser("operators-crds", help="install the named operators' CRDs only, no "
                        "controller (a MultiKueue manager: its objects run on a worker)")
    oc.add_argument("names", nargs="+")
    a = p.parse_args(argv)
    lab = from_args(a.state_dir, a.port_base, a.bin_dir)
    if a.verb == "up":
        up(lab, Path(a.scheduler_config))
    elif a.verb == "down":
        down(lab)
    elif a.verb == "dra":
        dra_up(lab)
    elif a.verb == "status":
        return status(lab)
    elif a.verb == "scheduler":
        _stop(lab, "kube-scheduler")
        _start_scheduler(lab, Path(a.config))
        print(f"lab: kube-scheduler restarted with {a.config}")
    elif a.verb == "pykueue-up":
        pykueue_up(lab, admin=a.admin)
    elif a.verb == "pykueue-down":
        pykueue_down(lab)
    elif a.verb in ("operators-up", "operators-down", "operators-crds"):
        import operators

        if a.verb == "operators-up":
            operators.up(lab, a.names or None, skip_busy=a.skip_busy)
        elif a.verb == "operators-crds":
            operators.install_crds(lab, operators._select(a.names, built_only=True))
        else:
            operators.down(lab, a.names or None)
    elif a.verb == "sa-token":
        try:
            print(sa_token(lab, a.namespace, a.name))
        except subprocess.CalledProcessError as exc:
            print(f"lab: sa-token: {exc.stderr.strip() or exc}", file=sys.stderr)
            return 1
    elif a.verb == "sa-kubeconfig":
        print(sa_kubeconfig(lab, Path(a.out).resolve() if a.out else None, a.duration))
    return 0


if __name__ == "__main__":
    sys.exit(main())
