"""Issue 18: a CRD installed after pykueue starts is managed without a restart (Kueue v0.17
sets an integration up once its API appears: kueue-integrations.md 1.7). On the lab, with the
training-operator's XGBoostJob CRD (from `make operators`; no operator needs to run, pykueue's
own decisions are under test): pykueue starts without it (one log line), the CRD is installed,
pykueue says it now manages XGBoostJobs, and a queued XGBoostJob is suspended by the webhook,
gets its Workload, is admitted and started with the A100 flavor in its templates."""

from __future__ import annotations

import json
import sys

import pytest

from tests.e2e.test_jobset import A100, QUEUE, condition, drop, owned_workload
from tests.e2e.test_kubeflow import template
from tests.e2e.test_workload_kinds import gpu_queue
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import operators as ops  # noqa: E402
import scenario  # noqa: E402

pytestmark = pytest.mark.lab
CRD = "xgboostjobs.kubeflow.org"


def xgboostjob(name: str, ns: str) -> str:
    """An XGBoostJob queued in ``lq``: Master 1 + Worker 1, 1 GPU each."""
    def replica() -> dict:
        return {"replicas": 1, "restartPolicy": "OnFailure",
                "template": template(1, name="xgboost")}
    return json.dumps({"apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob",
                       "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "lq"}},
                       "spec": {"xgbReplicaSpecs": {"Master": replica(), "Worker": replica()}}})


def test_a_crd_installed_after_pykueue_starts_is_managed_without_a_restart(
        lab: LabHandle) -> None:
    op = ops.OPERATORS["training-operator"]
    if not op.built:
        pytest.skip(f"training-operator {op.version} not built: run `make operators`")
    handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
    if labmod._pid(handle, "training-operator"):
        pytest.skip("the training-operator runs in this lab: its XGBoostJob CRD is not removed "
                    "from under it")
    crd_file = next(p for p in op.crds() if p.name.endswith("_xgboostjobs.yaml"))
    log = handle.logs / "pykueue.log"
    labmod.pykueue_down(handle)
    ns = cq = ""
    try:
        lab.kubectl("delete", "crd", CRD, "--ignore-not-found", "--wait=true")
        scenario.prepare(handle)  # the samples' flavors (a100-flavor)
        start = log.stat().st_size if log.exists() else 0
        labmod.pykueue_up(handle)

        def logged(text: str) -> bool:
            with log.open("rb") as f:
                f.seek(start)
                return text in f.read().decode(errors="replace")

        assert logged("xgboostjobs kubeflow.org/v1 not served by the API server")
        lab.kubectl("apply", "--server-side", "-f", str(crd_file))
        wait_for(lambda: any(c["type"] == "Established" and c["status"] == "True" for c in (
            lab.get("crd", CRD).get("status") or {}).get("conditions") or []), 60,
            f"{CRD} Established")
        # pykueue asks discovery at 1 s doubling (Kueue's backoff): a few seconds here.
        wait_for(lambda: logged("xgboostjobs kubeflow.org/v1 now served (its CRD was "
                                "installed): managing XGBoostJob objects"), 60,
                 "pykueue managing XGBoostJobs")
        ns, cq = gpu_queue(lab, "crd-later", 2)
        lab.apply(xgboostjob("xgb", ns))
        wl = wait_for(lambda: (w := owned_workload(lab, ns, "XGBoostJob", "xgb"))
                      and (c := condition(w, "Admitted")) and c["status"] == "True" and w,
                      60, "xgb's Workload admitted")
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
            ("master", 1), ("worker", 1)]
        job = wait_for(lambda: (j := lab.get("xgboostjob", "xgb", "-n", ns))["spec"][
            "runPolicy"].get("suspend") is False and j, 60, "xgb started")
        for rt in ("Master", "Worker"):
            spec = job["spec"]["xgbReplicaSpecs"][rt]["template"]["spec"]
            assert spec["nodeSelector"] == A100, spec
    finally:
        if ns:
            drop(lab, ns, cq)
        labmod.pykueue_down(handle)
        labmod.pykueue_up(handle)
