#!/usr/bin/env python3
"""Three labs for MultiKueue on one machine: a manager and two workers, each a lab of its own
(hack/lab.py, its own state dir and port block) with pykueue on it (docs/multikueue.md).

    python hack/multikueue_lab.py up      # labs up, the JobSet operator and KubeRay (when
                                          # built) and pykueue on each, worker Secrets on the
                                          # manager
    python hack/multikueue_lab.py down    # pykueue (or Kueue's manager) and the labs stopped,
                                          # state removed

Options: --state-dir DIR (default $LAB_STATE_DIR or .lab, as hack/lab.py) and --port-base N
(default $LAB_PORT_BASE or 16440) for the manager; worker ``worker<i>`` lives in
``<dir's parent>/.lab-w<i>`` at port base N + 100*i. pykueue's port on each lab is its port
base + 443 (visibility + 444).

On the manager, ``up`` writes for each worker a Secret ``<worker>-kubeconfig`` in
pykueue-system (key ``kubeconfig``: the worker's API server with its CA and the lab admin's
client certificate, all as ``-data`` fields, as MultiKueue requires; with
``MULTIKUEUE_LAB_LEAST_PRIVILEGE=1`` a token of the worker's ServiceAccount
``pykueue-system/pykueue-multikueue-manager`` bound to the ClusterRole
``pykueue-multikueue-worker`` only, manifests/rbac/multikueue_worker_role.yaml) and a
MultiKueueCluster ``<worker>`` naming it. Queues are the caller's. For pykueue's soonest
dispatcher the MultiKueueCluster also names the worker's pykueue status API (annotation
``pykueue.dev/status-api: https://127.0.0.1:<its pykueue port>``) and the Secret holds a token
of the worker's ``pykueue-status-viewer`` ServiceAccount (key ``status-api-token``) and the CA
of pykueue's serving certificate (``status-api-ca.crt``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))
LAB = ROOT / "hack" / "lab.py"
WORKERS = 2


@dataclass(frozen=True)
class Site:
    """One lab: ``name`` (manager, worker1, ...), state dir and port base."""

    name: str
    state: Path
    port_base: int

    @property
    def pykueue_port(self) -> int:
        return self.port_base + 443

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(LAB_STATE_DIR=str(self.state), LAB_PORT_BASE=str(self.port_base),
                   PYKUEUE_PORT=str(self.pykueue_port),
                   PYKUEUE_VISIBILITY_PORT=str(self.pykueue_port + 1),
                   KUBECONFIG=str(self.state / "kubeconfig"))
        return env

    def lab(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(LAB), "--state-dir", str(self.state),
                               "--port-base", str(self.port_base), *args], cwd=ROOT,
                              env=self.env(), check=check, capture_output=True, text=True)

    def kubectl(self, *args: str, input: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        kubectl = os.environ.get("KUBECTL") or str(ROOT / ".k8sbin" / "current" / "kubectl")
        return subprocess.run([kubectl, "--kubeconfig", str(self.state / "kubeconfig"), *args],
                              input=input, env=self.env(), check=check, capture_output=True,
                              text=True)

    def server(self) -> str:
        return json.loads((self.state / "kubeconfig").read_text())["clusters"][0]["cluster"][
            "server"]


def sites(state_dir: str | None = None, port_base: int | None = None) -> list[Site]:
    """The manager and the workers (see the module doc)."""
    state = Path(state_dir or os.environ.get("LAB_STATE_DIR") or ROOT / ".lab").resolve()
    base = port_base or int(os.environ.get("LAB_PORT_BASE") or 16440)
    return [Site("manager", state, base)] + [
        Site(f"worker{i}", state.parent / f".lab-w{i}", base + 100 * i)
        for i in range(1, WORKERS + 1)]


# With MULTIKUEUE_LAB_LEAST_PRIVILEGE=1 the manager reaches each worker as this ServiceAccount
# of the worker, bound to manifests/rbac/multikueue_worker_role.yaml only (default: the lab's
# admin), which proves that role is all a manager needs there.
MANAGER_SA = "pykueue-multikueue-manager"
WORKER_ROLE = ROOT / "manifests" / "rbac" / "multikueue_worker_role.yaml"


def least_privilege() -> bool:
    return os.environ.get("MULTIKUEUE_LAB_LEAST_PRIVILEGE", "") not in ("", "0")


def manager_token(worker: Site) -> str:
    """A token (a day) of ``MANAGER_SA`` on ``worker``, which this makes and binds (a
    ClusterRoleBinding) to the ClusterRole ``pykueue-multikueue-worker`` only."""
    worker.kubectl("apply", "-f", str(WORKER_ROLE))
    sa = {"apiVersion": "v1", "kind": "ServiceAccount",
          "metadata": {"name": MANAGER_SA, "namespace": "pykueue-system"}}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": MANAGER_SA},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "pykueue-multikueue-worker"},
               "subjects": [{"kind": "ServiceAccount", "name": MANAGER_SA,
                             "namespace": "pykueue-system"}]}
    worker.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [sa, binding]}))
    return worker.kubectl("create", "token", "-n", "pykueue-system", MANAGER_SA,
                          "--duration=86400s").stdout.strip()


def worker_kubeconfig(worker: Site) -> dict:
    """A kubeconfig for ``worker`` with every credential inline (no file paths): the lab
    admin's client certificate, or (``least_privilege()``) a token of ``MANAGER_SA``."""
    pki = worker.state / "pki"

    def data(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    user = {"token": manager_token(worker)} if least_privilege() else {
        "client-certificate-data": data("admin.crt"), "client-key-data": data("admin.key")}
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": worker.name,
        "clusters": [{"name": worker.name, "cluster": {
            "server": worker.server(), "certificate-authority-data": data("ca.crt")}}],
        "users": [{"name": "admin", "user": user}],
        "contexts": [{"name": worker.name,
                      "context": {"cluster": worker.name, "user": "admin"}}],
    }


def secret(name: str, kubeconfig: dict | str, extra: dict[str, str] | None = None) -> dict:
    """A Secret ``name`` in pykueue-system holding ``kubeconfig`` (YAML/JSON text or dict)
    and the ``extra`` keys (text)."""
    text = kubeconfig if isinstance(kubeconfig, str) else json.dumps(kubeconfig)
    data = {"kubeconfig": text, **(extra or {})}
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "pykueue-system"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def cluster(name: str, location: str, location_type: str = "Secret",
            status_api: str | None = None) -> dict:
    """A MultiKueueCluster reading its kubeconfig from ``location`` (``status_api``: the
    base URL of its worker's pykueue status API, for the soonest dispatcher)."""
    meta: dict[str, Any] = {"name": name}
    if status_api:
        meta["annotations"] = {"pykueue.dev/status-api": status_api}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
            "metadata": meta,
            "spec": {"clusterSource": {"kubeConfig": {"location": location,
                                                      "locationType": location_type}}}}


def status_api_keys(worker: Site) -> dict[str, str]:
    """The Secret keys for ``worker``'s pykueue status API: a token of its
    ``pykueue-status-viewer`` ServiceAccount (made by ``hack/lab.py pykueue-up``; a day) and
    the CA of pykueue's serving certificate; {} when the worker has no such ServiceAccount."""
    r = worker.kubectl("create", "token", "-n", "pykueue-system", "pykueue-status-viewer",
                       "--duration=86400s", check=False)
    ca = ROOT / "certs" / "out" / "ca.crt"
    if r.returncode != 0 or not ca.exists():
        return {}
    return {"status-api-token": r.stdout.strip(), "status-api-ca.crt": ca.read_text()}


def wait_until(what: str, fn: Callable[[], Any], timeout: float, period: float = 0.25,
               error: type[Exception] = TimeoutError) -> Any:
    """``fn()``'s first truthy value, asked every ``period`` seconds; raises ``error`` naming
    ``what`` and the last value after ``timeout`` seconds (the scripts on these labs)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(period)
    raise error(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def is_up(site: Site) -> bool:
    """The lab answers and pykueue runs on it (its pid file names a live process)."""
    if site.lab("status", check=False).returncode != 0:
        return False
    try:
        pid = int((site.state / "pids" / "pykueue.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def start(site: Site, operators: tuple[str, ...] = ("jobset",), crds: tuple[str, ...] = ()
          ) -> None:
    """Start ``site``'s lab, the ``operators`` that are built (``make operators``; before
    pykueue, which sets a kind up only when its CRD is there), the CRDs alone of the operators
    ``crds`` (a manager's: its objects of those kinds run on a worker), and pykueue on it (each
    a no-op when running)."""
    site.lab("up")
    built = [o for o in operators if operator_built(o)]
    if built:
        site.lab("operators-up", *built)
    crds_built = [o for o in crds if operator_built(o)]
    if crds_built:
        site.lab("operators-crds", *crds_built)
    site.lab("pykueue-up")
    print(f"multikueue-lab: {site.name} up ({site.state}, pykueue :{site.pykueue_port})")


def operator_built(name: str = "jobset") -> bool:
    """Whether operator ``name`` is built (hack/operators.py)."""
    sys.path.insert(0, str(ROOT / "hack"))
    import operators
    return bool(operators.OPERATORS[name].built)


def register_workers(manager: Site, workers: list[Site]) -> None:
    """A kubeconfig Secret and a MultiKueueCluster on ``manager`` for each worker."""
    items = []
    for w in workers:
        keys = status_api_keys(w)
        items += [secret(f"{w.name}-kubeconfig", worker_kubeconfig(w), keys),
                  cluster(w.name, f"{w.name}-kubeconfig", status_api=f"https://127.0.0.1:"
                          f"{w.pykueue_port}" if keys else None)]
    manager.kubectl("apply", "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    print("multikueue-lab: MultiKueueClusters " + ", ".join(w.name for w in workers)
          + f" on the manager (KUBECONFIG={manager.state / 'kubeconfig'})")


def up(all_sites: list[Site]) -> None:
    for s in all_sites:
        start(s, ("jobset", "kuberay"))
    register_workers(all_sites[0], all_sites[1:])


def stop_kueue(site: Site) -> bool:
    """Stop Kueue's manager on ``site``'s lab (hack/kueue_lab.py's pid file, as
    hack/multikueue_interop.py starts it there); False when none ran."""
    import kueue_lab

    return kueue_lab.stop_manager(site.state)


def down(all_sites: list[Site]) -> None:
    for s in all_sites:
        stop_kueue(s)
        s.lab("pykueue-down", check=False)
        s.lab("down", check=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state-dir")
    p.add_argument("--port-base", type=int)
    p.add_argument("verb", choices=["up", "down"])
    args = p.parse_args(argv)
    all_sites = sites(args.state_dir, args.port_base)
    up(all_sites) if args.verb == "up" else down(all_sites)
    return 0


if __name__ == "__main__":
    sys.exit(main())
