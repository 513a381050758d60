"""The lab as a test fixture: a handle on a running control plane (see hack/lab.py)."""

from __future__ import annotations

import copy
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
LAB_PY = ROOT / "hack" / "lab.py"


@dataclass
class LabHandle:
    """A running lab: kubeconfig, binaries, and small kubectl helpers for tests."""

    state: Path
    port_base: int
    bin_dir: Path

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port_base + 3}"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}:{env.get('PATH', '')}"
        return env

    def lab_cmd(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``hack/lab.py`` for this instance."""
        return subprocess.run(
            [sys.executable, str(LAB_PY), "--state-dir", str(self.state),
             "--port-base", str(self.port_base), "--bin-dir", str(self.bin_dir), *args],
            text=True, capture_output=True, check=check, timeout=600,
        )

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the lab; raises CalledProcessError (with stderr) when ``check``."""
        r = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, text=True, capture_output=True, timeout=timeout,
        )
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {r.stderr.strip()}")
        return r

    def apply(self, manifest: str, *extra: str) -> subprocess.CompletedProcess[str]:
        """``kubectl apply -f -`` of a YAML or JSON text."""
        return self.kubectl("apply", "-f", "-", *extra, input=manifest)

    def get(self, *args: str) -> dict[str, Any]:
        """``kubectl get ... -o json`` parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def sa_kubeconfig(self) -> Path:
        """Apply pykueue's ServiceAccount and RBAC (manifests/rbac) and return a kubeconfig that
        authenticates as system:serviceaccount:pykueue-system:pykueue (``hack/lab.py
        sa-kubeconfig``); run pykueue with ``PYKUEUE_CLIENT__KUBECONFIG`` set to it."""
        return Path(self.lab_cmd("sa-kubeconfig").stdout.strip().splitlines()[-1])

    def create_namespace(self, name: str) -> None:
        """Create a namespace (if absent) and wait for its default ServiceAccount."""
        self.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": name}}))
        wait_for(lambda: self.kubectl("get", "sa", "default", "-n", name, check=False)
                 .returncode == 0, 30, f"default ServiceAccount in {name}")


def wait_for(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll ``cond`` until it returns a truthy value; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


WORKLOAD_GC_PROBE: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "spec": {"podSets": [
        {"name": "main", "count": 1, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}]}}
"""A ``wait_gc_watches`` probe: a Workload without a queue (nothing admits or runs it)."""


def wait_gc_watches(kubectl: Callable[..., subprocess.CompletedProcess[str]], ns: str,
                    *probes: dict[str, Any], timeout: float = 120) -> None:
    """Wait until the lab's garbage collector watches the kinds of ``probes`` (manifests of
    objects that start nothing: a Workload without a queue, a suspended RayJob, ...): each is
    created in ``ns`` owned by a fresh ConfigMap, the ConfigMap is deleted, and the probe must
    then be deleted by the collector (gone or a deletionTimestamp), within ``timeout`` s.

    Why: kube-controller-manager's collector takes in kinds from discovery every 30 s
    (``garbageCollectorController.Run``, Kubernetes v1.36), so for up to a minute after a CRD
    is installed it does not watch that kind. A ``kubectl delete --cascade=orphan`` in that
    window strips the owner reference only from dependents it already knows; once it watches
    their kind it deletes the others as garbage (owner gone), and an owner of an unwatched
    kind keeps its ``orphan`` finalizer meanwhile: a Kubernetes race on a lab just started,
    not the orphan case a test means. ``kubectl`` is a ``LabHandle.kubectl``-like callable
    (``*args, input=``); raises AssertionError naming the kind when a probe outlives
    ``timeout``."""
    for probe in probes:
        name = f"gc-probe-{os.urandom(3).hex()}"
        uid = kubectl("create", "configmap", name, "-n", ns, "-o",
                      "jsonpath={.metadata.uid}").stdout.strip()
        obj = copy.deepcopy(probe)
        obj["metadata"] = {**obj.get("metadata", {}), "name": name, "namespace": ns,
                           "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                "name": name, "uid": uid}]}
        kubectl("create", "-f", "-", input=json.dumps(obj))
        kubectl("delete", "configmap", name, "-n", ns, "--wait=false")
        resource = f"{obj['kind'].lower()}.{obj['apiVersion'].rpartition('/')[0]}".rstrip(".")

        def collected(resource: str = resource, name: str = name) -> bool:
            # Only NotFound says it is gone: another failure (the API server restarting, a
            # timeout) proves nothing about the collector.
            r = kubectl("get", resource, name, "-n", ns, "-o", "json", check=False)
            if r.returncode != 0:
                return "(NotFound)" in r.stderr
            return bool(json.loads(r.stdout)["metadata"].get("deletionTimestamp"))
        wait_for(collected, timeout, f"the garbage collector deleting a probe {obj['kind']} "
                 f"owned by a deleted ConfigMap (it does not watch {resource} yet)")


def start_lab(state: Path, port_base: int, bin_dir: Path) -> tuple[LabHandle, bool]:
    """Start the lab unless it already runs; returns (handle, started_here)."""
    lab = LabHandle(state=state, port_base=port_base, bin_dir=bin_dir)
    if not (bin_dir / "kube-apiserver").exists():
        raise RuntimeError(f"{bin_dir}/kube-apiserver missing: run `make controlplane` first")
    if lab.lab_cmd("status", check=False).returncode == 0:
        return lab, False
    r = lab.lab_cmd("up", check=False)
    if r.returncode != 0:
        raise RuntimeError(f"lab up failed:\n{r.stdout}\n{r.stderr}")
    return lab, True
