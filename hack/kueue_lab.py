#!/usr/bin/env python3
"""Real Kueue (v0.17.1, built by `make kueue`) on a lab of hack/lab.py, out of cluster.

    python hack/kueue_lab.py up      # lab up, Kueue's CRDs instead of pykueue's, the manager
    python hack/kueue_lab.py down    # stop the manager and the lab, remove the state
    python hack/kueue_lab.py status
    python hack/kueue_lab.py restart --fair-sharing  # only the manager, with other options

Env (as hack/lab.py): LAB_STATE_DIR, LAB_PORT_BASE, LAB_BIN_DIR; the manager's webhook server
listens on 127.0.0.1:<port base + 5>, its health probes on + 6 (the lab uses base .. base + 3).

What running Kueue's manager outside a cluster needs, and how it is given here:

* Kueue's CRDs (config/components/crd/bases of the module) instead of pykueue's: both projects
  define the same group and names, so pykueue's CRDs and its ValidatingAdmissionPolicy are
  deleted first (a lab runs one or the other);
* its webhooks, which default and validate Workloads and queues: the server gets a certificate
  made by certs/generate.py (SAN 127.0.0.1), and Kueue's webhook configurations
  (config/components/webhook/manifests.yaml, the rules for kueue.x-k8s.io and batch) are
  registered with ``url: https://127.0.0.1:<port><path>`` and that CA;
* a configuration file: Kueue's shipped one (config/components/manager/controller_manager_config
  .yaml) with internal cert management off, waitForPodsReady as asked (off unless
  ``--wait-for-pods-ready-timeout``), fair sharing as asked (off unless ``--fair-sharing``:
  a ``fairSharing`` section with the strategies given, by default Kueue's list; in
  v0.17.1's v1beta2 Configuration the section's presence turns it on), the Lease's namespace
  given (controller-runtime
  cannot guess it out of cluster), metrics off, integrations batch/job only (the other
  frameworks' CRDs are absent) and the VisibilityOnDemand feature off (its API server reads its
  certificate from /visibility, a path with no option);
* /etc/kueue/metrics/certs, which the manager reads whenever internal cert management is off
  (even with metrics off): it runs in a private mount namespace (``unshare -m``, root) where
  /etc is an overlay whose upper layer holds that certificate. The host's /etc is untouched.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
KUEUE_VERSION = "v0.17.1"
NAMESPACE = "kueue-system"
# Kueue's default preemptionStrategies (S2-a then S2-b), as pykueue's fair_sharing default.
FAIR_SHARING_STRATEGIES = ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]


def module_dir() -> Path:
    """Kueue's module directory in the Go module cache (PROJECT_DIR of its test tools)."""
    r = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue"],
                       cwd=ROOT / "hack" / "tools" / "kueue", text=True, capture_output=True,
                       env={**os.environ, "GOFLAGS": "-mod=mod"}, timeout=300)
    d = r.stdout.strip()
    if r.returncode != 0 or not d:
        raise SystemExit(f"kueue: sigs.k8s.io/kueue not in the module cache: {r.stderr}")
    return Path(d)


def bin_dir() -> Path:
    """The binaries `make kueue` built (exits with a hint when one is missing)."""
    cache = os.environ.get("PYKUEUE_KUEUE_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pykueue" / "kueue")
    d = Path(cache) / KUEUE_VERSION
    for b in ("kueue", "minimalkueue", "runner", "checker.test"):
        if not (d / b).exists():
            raise SystemExit(f"kueue: {d / b} missing; run `make kueue` first")
    return d


class KueueLab:
    """One lab (hack/lab.py) meant to run Kueue: its state, ports and kubectl."""

    def __init__(self, state: Path, port_base: int, lab_bin_dir: Path,
                 env: dict[str, str] | None = None) -> None:
        self.state, self.port_base, self.lab_bin_dir = state, port_base, lab_bin_dir
        self.kubeconfig = state / "kubeconfig"
        self.webhook_port, self.health_port = port_base + 5, port_base + 6
        self.env = {**(env or os.environ), "LAB_STATE_DIR": str(state),
                    "LAB_PORT_BASE": str(port_base), "LAB_BIN_DIR": str(lab_bin_dir)}

    def lab(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([sys.executable, str(ROOT / "hack" / "lab.py"), *cmd], env=self.env,
                           text=True, capture_output=True, timeout=900, cwd=ROOT)
        if check and r.returncode != 0:
            raise RuntimeError(f"lab {' '.join(cmd)}: {r.stdout}\n{r.stderr}")
        return r

    def kubectl(self, *cmd: str, input: str | None = None, check: bool = True,
                timeout: float = 300) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([str(self.lab_bin_dir / "kubectl"), "--kubeconfig",
                            str(self.kubeconfig), *cmd], input=input, text=True,
                           capture_output=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(cmd)}: {r.stderr.strip()}")
        return r

    def use_kueue_crds(self, kdir: Path) -> None:
        """Replace pykueue's CRDs and ValidatingAdmissionPolicy (applied by `lab up`) with
        Kueue's CRDs."""
        # A CRD deleted while its storage is still initializing keeps its cleanup finalizer
        # for minutes ("could not list instances: storage is (re)initializing", retried with
        # backoff): wait until every one of pykueue's kinds can be listed first.
        self.wait_established()
        kinds = self.kubectl("get", "crd", "-o", "name").stdout.split()
        resources = ",".join(k.removeprefix("customresourcedefinition.apiextensions.k8s.io/")
                             for k in kinds if k.endswith(".kueue.x-k8s.io"))
        deadline = time.monotonic() + 120
        while resources and self.kubectl("get", resources, "-A", check=False).returncode != 0:
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.kubectl("delete", "-k", str(ROOT / "manifests" / "crds"), "--ignore-not-found",
                     "--wait=true")
        self.kubectl("create", "-f", str(kdir / "config" / "components" / "crd" / "bases"))
        self.wait_established()

    def wait_established(self, timeout: float = 120) -> None:
        """Every CRD Established. ``kubectl wait`` fails at once on a CRD created so recently
        that it has no status yet ("<nil> is of the type <nil>"): asked again until
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(1, int(deadline - time.monotonic()))
            r = self.kubectl("wait", "--for=condition=Established", f"--timeout={left}s", "crd",
                             "--all", check=False, timeout=left + 30)
            if r.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRDs not Established after {timeout:.0f}s: "
                                   f"{r.stderr.strip()}")
            time.sleep(1)

    def manager_config(self, kdir: Path, certs: Path, qps: int | None = None,
                       pods_ready_timeout: float | None = None,
                       leader_elect: bool = True, fair_sharing: list[str] | None = None
                       ) -> dict:
        """Kueue's shipped configuration with the changes of the module doc.
        ``pods_ready_timeout`` (seconds): a ``waitForPodsReady`` section with that timeout
        (Kueue v0.17.1 defaults the rest); None: no section, so waitForPodsReady is off (in
        v0.17.1's v1beta2 Configuration the section's presence turns it on)."""
        shipped = yaml.safe_load(
            (kdir / "config/components/manager/controller_manager_config.yaml").read_text())
        # ``leader_elect`` False: ``leaderElection.leaderElect: false`` (a labelled variant:
        # Kueue's Lease renewal shares its client's rate limiter with its writes).
        cfg = dict(shipped)
        cfg.pop("waitForPodsReady", None)
        if pods_ready_timeout is not None:
            cfg["waitForPodsReady"] = {"timeout": f"{pods_ready_timeout:g}s"}
        cfg.pop("fairSharing", None)
        if fair_sharing:  # the preemptionStrategies list
            cfg["fairSharing"] = {"preemptionStrategies": fair_sharing}
        cfg.update({
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": self.webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
            "internalCertManagement": {"enable": False},
            "leaderElection": {**shipped.get("leaderElection", {}),
                               "resourceNamespace": NAMESPACE,
                               **({} if leader_elect else {"leaderElect": False})},
            "featureGates": {"VisibilityOnDemand": False},
            "integrations": {"frameworks": ["batch/job"]},
        })
        if qps:
            cfg["clientConnection"] = {"qps": qps, "burst": 2 * qps}
        return cfg

    def webhooks(self, kdir: Path, ca: Path) -> str:
        """Kueue's webhook configurations (kueue.x-k8s.io and batch rules) pointed at
        127.0.0.1:<webhook port> with ``ca``, named as Kueue's kustomization names them."""
        bundle = base64.b64encode(ca.read_bytes()).decode()
        docs = [d for d in yaml.safe_load_all(
            (kdir / "config/components/webhook/manifests.yaml").read_text()) if d]
        for d in docs:
            d["metadata"]["name"] = "kueue-" + d["metadata"]["name"]
            keep = []
            for w in d.get("webhooks", []):
                groups = {g for r in w.get("rules", []) for g in r.get("apiGroups", [])}
                if not groups & {"kueue.x-k8s.io", "batch"}:
                    continue
                path = w["clientConfig"]["service"]["path"]
                w["clientConfig"] = {"url": f"https://127.0.0.1:{self.webhook_port}{path}",
                                     "caBundle": bundle}
                keep.append(w)
            d["webhooks"] = keep
        return yaml.safe_dump_all(docs, sort_keys=False)

    def start_manager(self, kdir: Path, kbin: Path, out: Path, qps: int | None = None,
                      pods_ready_timeout: float | None = None,
                      leader_elect: bool = True,
                      fair_sharing: list[str] | None = None) -> subprocess.Popen[bytes]:
        """Start Kueue's manager (log ``out/kueue.log``; configuration ``manager_config``),
        register its webhooks, and return once they answer. The process leads its own process
        group."""
        out.mkdir(parents=True, exist_ok=True)
        certs = self.state / "kueue-certs"
        subprocess.run([sys.executable, "-m", "certs.generate", "--out", str(certs), "--host",
                        "127.0.0.1", "--service", "kueue-webhook-service", "--namespace",
                        NAMESPACE], cwd=ROOT, check=True, capture_output=True, timeout=120)
        upper, work = self.state / "etc-upper", self.state / "etc-work"
        mcerts = upper / "kueue" / "metrics" / "certs"
        mcerts.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        for f in ("tls.crt", "tls.key", "ca.crt"):
            shutil.copy(certs / f, mcerts / f)
        config = out / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(self.manager_config(kdir, certs, qps, pods_ready_timeout,
                                                             leader_elect, fair_sharing),
                                         sort_keys=False))
        self.kubectl("create", "namespace", NAMESPACE, check=False)
        script = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
                  f" && exec {kbin / 'kueue'} --config {config} --kubeconfig {self.kubeconfig}")
        log = open(out / "kueue.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=out, env=self.env)
        self._wait_ready(proc, out / "kueue.log", 120)
        hooks = self.webhooks(kdir, certs / "ca.crt")
        (out / "kueue-webhooks.yaml").write_text(hooks)
        self.kubectl("apply", "-f", "-", input=hooks)
        probe = json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                            "metadata": {"name": "kueue-lab-probe"}})
        deadline = time.monotonic() + 60
        while True:  # a server-side dry run goes through the mutating webhook
            r = self.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False)
            if r.returncode == 0:
                return proc
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"Kueue's webhooks do not answer: {r.stderr.strip()}")
            time.sleep(1)

    def _wait_ready(self, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"Kueue's manager exited ({proc.returncode}):\n{tail}")
            try:
                url = f"http://127.0.0.1:{self.health_port}/readyz"
                with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - local probe
                    if r.status == 200:
                        return
            except Exception as exc:  # noqa: BLE001 - not up yet
                last = str(exc)
            time.sleep(0.5)
        raise RuntimeError(f"Kueue's manager not ready after {timeout:.0f}s ({last})")


def _pid(state: Path) -> int | None:
    try:
        pid = int((state / "pids" / "kueue-manager.pid").read_text().strip())
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    return None if stat.split(") ", 1)[-1].startswith("Z") else pid


def stop_manager(state: Path) -> bool:
    """Stop the Kueue manager whose pid file is in ``state`` (SIGTERM to its process group,
    SIGKILL after 10 s); False when none ran."""
    import signal

    pid = _pid(state)
    if not pid:
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
        for _ in range(100):
            if not _pid(state):
                break
            time.sleep(0.1)
        else:
            os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("verb", choices=("up", "down", "status", "restart"),
                   help="restart: stop the running manager and start it with these options "
                        "(the lab and its objects stay)")
    p.add_argument("--qps", type=int, help="the manager's client QPS (default: Kueue's, 50)")
    p.add_argument("--wait-for-pods-ready-timeout", type=float, metavar="SECONDS",
                   help="turn waitForPodsReady on with this timeout (default: off, as Kueue "
                        "v0.17.1 ships it)")
    p.add_argument("--fair-sharing", nargs="?", const=",".join(FAIR_SHARING_STRATEGIES),
                   metavar="STRATEGY,...",
                   help="turn fair sharing on: a fairSharing section with these "
                        "preemptionStrategies (default: Kueue's, "
                        f"{','.join(FAIR_SHARING_STRATEGIES)}); without the option off, as "
                        "Kueue v0.17.1 ships it")
    a = p.parse_args(argv)
    state = Path(os.environ.get("LAB_STATE_DIR") or ROOT / ".lab-kueue").resolve()
    port = int(os.environ.get("LAB_PORT_BASE") or 20640)
    bins = Path(os.environ.get("LAB_BIN_DIR") or ROOT / ".k8sbin" / "current").resolve()
    kl = KueueLab(state, port, bins)
    if a.verb == "status":
        pid = _pid(state)
        print(f"{'kueue-manager':26s} {'running pid ' + str(pid) if pid else 'stopped'}")
        return kl.lab("status", check=False).returncode or (0 if pid else 1)
    if a.verb == "down":
        stop_manager(state)
        print(kl.lab("down", check=False).stdout.strip())
        return 0
    if a.verb == "restart":
        if not stop_manager(state):
            print("kueue: no manager running (kueue_lab.py up first)", file=sys.stderr)
            return 1
    elif _pid(state):
        print(f"kueue: already running (pid {_pid(state)})")
        return 0
    kdir, kbin = module_dir(), bin_dir()
    if a.verb == "up":
        print(kl.lab("up").stdout.strip())
        kl.use_kueue_crds(kdir)
    proc = kl.start_manager(kdir, kbin, state / "logs", qps=a.qps,
                            pods_ready_timeout=a.wait_for_pods_ready_timeout,
                            fair_sharing=a.fair_sharing.split(",") if a.fair_sharing else None)
    (state / "pids").mkdir(parents=True, exist_ok=True)
    (state / "pids" / "kueue-manager.pid").write_text(f"{proc.pid}\n")
    print(f"kueue: manager {KUEUE_VERSION} pid {proc.pid}, webhooks on "
          f"https://127.0.0.1:{kl.webhook_port} (logs {state / 'logs' / 'kueue.log'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
