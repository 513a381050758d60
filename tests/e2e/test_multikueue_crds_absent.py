"""pykueue without the MultiKueue CRDs (MultiKueueCluster, MultiKueueConfig), on the lab:
Kueue v0.17.1 does not start without them; pykueue's documented behaviour (docs/multikueue.md)
is MultiKueue off until they are served. Their kinds are optional, as a job kind whose CRD is
absent (``app.controllers.manager`` ``OptionalApi``): no informer of them, so readiness does
not wait for them and a queued Job is admitted; once the CRDs are applied, pykueue's discovery
poll (1 s doubling to 2 min) sees them, their informers list and the MultiKueue controller
starts, which sets a new MultiKueueCluster's ``Active`` condition (here a cluster whose
kubeconfig Secret points back at the lab itself: Active True, "Connected"). A MultiKueue
AdmissionCheck says meanwhile why it is not active: its ``Active`` condition False,
``BadConfig``, "... MultiKueue is off until they are", also when an earlier run left it True;
once MultiKueue is on, its controller sets it from the check's MultiKueueConfig.

The module deletes the two CRDs (and so any MultiKueue object in the lab) with pykueue
stopped, creates that check (its status Active True, as an earlier run with MultiKueue on
would have left it), starts pykueue, and at the end leaves the CRDs installed, the check
deleted and pykueue restarted."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import multikueue_lab as mk  # noqa: E402

pytestmark = pytest.mark.lab
CRDS = {"multikueueclusters.kueue.x-k8s.io": "kueue.x-k8s.io_multikueueclusters.yaml",
        "multikueueconfigs.kueue.x-k8s.io": "kueue.x-k8s.io_multikueueconfigs.yaml"}
CLUSTER, SECRET = "crds-absent-self", "crds-absent-self-kubeconfig"
CHECK, CONFIG = "crds-absent-mk", "crds-absent-cfg"
K = "kueue.x-k8s.io/v1beta2"


def _stale_check(lab: LabHandle) -> None:
    """MultiKueue AdmissionCheck ``CHECK`` (config ``CONFIG``) with status Active True."""
    lab.apply(json.dumps({
        "apiVersion": K, "kind": "AdmissionCheck", "metadata": {"name": CHECK},
        "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {
            "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": CONFIG}}}))
    lab.kubectl("patch", "admissioncheck", CHECK, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"conditions": [{
                    "type": "Active", "status": "True", "reason": "Active",
                    "message": "The admission check is active",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))


def _check_active(lab: LabHandle) -> dict[str, str] | None:
    return next((c for c in (lab.get("admissioncheck", CHECK).get("status") or {}).get(
        "conditions") or [] if c["type"] == "Active"), None)


def _crds_installed(lab: LabHandle) -> None:
    """Apply the two CRDs (manifests/crds, as ``hack/lab.py up``) and wait for Established."""
    for name, file in CRDS.items():
        lab.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                    str(ROOT / "manifests" / "crds" / file))
        lab.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")


class Log:
    """pykueue's log in the lab from the moment this is made."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.start = path.stat().st_size if path.exists() else 0

    def has(self, text: str) -> bool:
        with self.path.open("rb") as f:
            f.seek(self.start)
            return text in f.read().decode(errors="replace")


@pytest.fixture(scope="module")
def without_mk_crds(lab: LabHandle) -> Iterator[Log]:
    """pykueue started on the lab with the MultiKueue CRDs deleted; afterwards the CRDs are
    applied again (whatever the tests did) and pykueue restarted."""
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    labmod.pykueue_down(handle)
    try:
        lab.kubectl("delete", "crd", *CRDS, "--ignore-not-found", "--wait=true")
        _stale_check(lab)
        log = Log(handle.logs / "pykueue.log")
        t0 = time.monotonic()
        labmod.pykueue_up(handle)  # waits for /readyz (90 s)
        print(f"pykueue ready without the MultiKueue CRDs in {time.monotonic() - t0:.1f}s")
        yield log
    finally:
        labmod.pykueue_down(handle)
        _crds_installed(lab)
        lab.kubectl("delete", "secret", SECRET, "-n", "pykueue-system", "--ignore-not-found",
                    check=False)
        lab.kubectl("delete", "admissioncheck", CHECK, "--ignore-not-found", check=False)
        labmod.pykueue_up(handle)


def test_without_the_multikueue_crds_pykueue_is_ready_and_admits(
        lab: LabHandle, without_mk_crds: Log) -> None:
    assert without_mk_crds.has("MultiKueue is off until they are")
    for crd in CRDS:
        assert lab.kubectl("get", "crd", crd, check=False).returncode != 0, crd
    suffix = uuid.uuid4().hex[:6]
    ns, cq, rf = f"crds-absent-{suffix}", f"crds-absent-cq-{suffix}", f"crds-absent-{suffix}"
    lab.create_namespace(ns)
    try:
        lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": K, "kind": "ResourceFlavor", "metadata": {"name": rf}},
            {"apiVersion": K, "kind": "ClusterQueue", "metadata": {"name": cq},
             "spec": {"namespaceSelector": {}, "resourceGroups": [
                 {"coveredResources": ["cpu"], "flavors": [
                     {"name": rf, "resources": [{"name": "cpu", "nominalQuota": 2}]}]}]}},
            {"apiVersion": K, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns},
             "spec": {"clusterQueue": cq}},
            {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "j", "namespace": ns,
                          "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
             "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                 "restartPolicy": "Never", "containers": [{
                     "name": "c", "image": "busybox",
                     "resources": {"requests": {"cpu": "1"}}}]}}}},
        ]}))

        def admitted() -> bool:
            for w in lab.get("workloads.kueue.x-k8s.io", "-n", ns)["items"]:
                for c in (w.get("status") or {}).get("conditions") or []:
                    if c["type"] == "Admitted" and c["status"] == "True":
                        return True
            return False
        wait_for(admitted, 60, "the Job's Workload admitted")
        wait_for(lambda: lab.get("job", "j", "-n", ns)["spec"].get("suspend") is False, 60,
                 "the Job started")
    finally:
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueue", cq, "--wait=false", check=False)
        lab.kubectl("delete", "resourceflavor", rf, "--wait=false", check=False)


def test_while_off_a_multikueue_check_left_active_says_why(
        lab: LabHandle, without_mk_crds: Log) -> None:
    """Before small24 nothing wrote the check while MultiKueue was off: it stayed True."""
    t0 = time.monotonic()
    off = wait_for(lambda: (c := _check_active(lab)) and c["status"] == "False" and c, 30,
                   f"AdmissionCheck {CHECK} Active False")
    print(f"{CHECK}: Active {off['status']} {off['reason']} after "
          f"{time.monotonic() - t0:.1f}s: {off['message']}")
    assert off["reason"] == "BadConfig", off
    assert off["message"].startswith("Cannot load the AdmissionChecks parameters: "), off
    assert "MultiKueue is off until they are" in off["message"], off


def test_once_the_crds_are_applied_multikueue_sets_a_clusters_active_condition(
        lab: LabHandle, without_mk_crds: Log) -> None:
    """The lab's own API server as the worker: a kubeconfig with the lab admin's credentials
    inline (``hack/multikueue_lab.py`` ``worker_kubeconfig``) in a Secret in pykueue-system."""
    site = mk.sites(str(lab.state), lab.port_base)[0]
    t0 = time.monotonic()
    _crds_installed(lab)
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        mk.secret(SECRET, mk.worker_kubeconfig(site)), mk.cluster(CLUSTER, SECRET),
        {"apiVersion": K, "kind": "MultiKueueConfig", "metadata": {"name": CONFIG},
         "spec": {"clusters": [CLUSTER]}}]}))
    try:
        # The discovery poll: 1 s doubling to 2 min since pykueue started.
        wait_for(lambda: without_mk_crds.has("MultiKueue is on"), 150,
                 "pykueue turning MultiKueue on")
        on = time.monotonic() - t0
        active = wait_for(lambda: next((c for c in (lab.get("multikueuecluster", CLUSTER).get(
            "status") or {}).get("conditions") or [] if c["type"] == "Active"), None), 30,
            f"MultiKueueCluster {CLUSTER} Active condition")
        print(f"MultiKueue on {on:.1f}s after the CRDs were applied; Active {active['status']} "
              f"{active['reason']} after {time.monotonic() - t0:.1f}s")
        assert (active["status"], active["reason"], active["message"]) == (
            "True", "Active", "Connected"), active
        # The check: from its config now (its one cluster active), by the controller alone.
        check = wait_for(lambda: (c := _check_active(lab)) and c["status"] == "True" and c,
                         30, f"AdmissionCheck {CHECK} Active True")
        assert (check["reason"], check["message"]) == (
            "Active", "The admission check is active"), check
    finally:
        lab.kubectl("delete", "multikueueconfig", CONFIG, "--ignore-not-found", check=False)
        lab.kubectl("delete", "multikueuecluster", CLUSTER, "--ignore-not-found", check=False)
