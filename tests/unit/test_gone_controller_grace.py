"""brk27 (M2): a pod counted only while it is being deleted because what controlled it is
gone (a Spark executor whose driver pod went, a TrainJob's, AppWrapper's or MPIJob
launcher's pod whose Job went) counts only through a grace period no longer than its
Workload's templates allow: a tenant's pod with a grace period of years held a preempted
Workload's quota for as long as it liked."""

from __future__ import annotations

from typing import Any

from app.integrations.appwrapper.appwrapper import APPWRAPPER_LABEL
from app.integrations.appwrapper.appwrapper import KIND as APPWRAPPER
from app.integrations.framework import pod_of
from app.integrations.jobset.jobset import JOBSETS
from app.integrations.kubeflow.kubeflow import MPIJOB, ROLE_LABEL
from app.integrations.sparkapplication.sparkapplication import APP_NAME_LABEL
from app.integrations.sparkapplication.sparkapplication import KIND as SPARK
from app.integrations.trainjob.trainjob import CHILD_JOBSETS, CLUSTER_RUNTIMES, RUNTIMES
from app.integrations.trainjob.trainjob import KIND as TRAINJOB
from app.kube.client import JOBS, PODS, WORKLOADS
from app.kube.context import CHILD_JOBS, OTHER_JOBS, POD, WL
from tests.unit.fake_ctx import FakeCtx
from tests.unit.test_self_controlled_pods import _released
from tests.unit.test_sparkapplication import app
from tests.unit.test_trainjob import composed, runtime, trainjob

YEARS = 315360000


def _killed(labels: dict[str, str], api_version: str, kind: str, owner: str,
            grace: int) -> dict[str, Any]:
    """A Running pod being deleted with ``grace`` seconds, its controller ``owner`` gone."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "decoy", "namespace": "ns", "uid": "decoy-uid", "labels": labels,
        "deletionTimestamp": "2026-12-06T09:00:30Z", "deletionGracePeriodSeconds": grace,
        "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": owner,
                             "uid": "no-such-uid", "controller": True}]},
        "spec": {"nodeName": "cpu-0", "terminationGracePeriodSeconds": grace},
        "status": {"phase": "Running"}}


def _held(kind: Any, gvk: str, obj: dict[str, Any], pod: dict[str, Any], *,
          wl_obj: dict[str, Any] | None = None, **kw: Any) -> bool:
    """Whether the preempted, stopped ``obj``'s Workload keeps its quota with ``pod``."""
    stopped = {**obj, "status": {}, "spec": {**obj["spec"], "suspend": True}}
    return not _released(kind, gvk, stopped, pod, wl_obj=wl_obj, **kw)


def test_an_executor_of_a_gone_driver_counts_only_through_the_templates_grace() -> None:
    labels = {APP_NAME_LABEL: "pi", "spark-role": "executor"}
    gvk = "sparkoperator.k8s.io/sparkapplication"
    assert not _held(SPARK, gvk, app(), _killed(labels, "v1", "Pod", "nobody", YEARS))
    assert _held(SPARK, gvk, app(), _killed(labels, "v1", "Pod", "nobody", 30))


def test_a_trainjobs_pod_of_a_gone_job_counts_only_through_the_templates_grace() -> None:
    tj = trainjob(suspend=True)
    rt = runtime()
    rt["metadata"]["namespace"] = "ns"
    kw: dict[str, Any] = {"wl_obj": composed(tj, rt), "objects": {RUNTIMES: [rt]},
                          "extra": (RUNTIMES, CLUSTER_RUNTIMES),
                          "resources": {CHILD_JOBSETS: JOBSETS, CHILD_JOBS: JOBS,
                                        OTHER_JOBS: JOBS}}
    labels = {"jobset.sigs.k8s.io/jobset-name": "tj"}
    gvk = "trainer.kubeflow.org/trainjob"
    assert not _held(TRAINJOB, gvk, tj, _killed(labels, "batch/v1", "Job", "tj-x", YEARS),
                     **kw)
    assert _held(TRAINJOB, gvk, tj, _killed(labels, "batch/v1", "Job", "tj-x", 30), **kw)


def test_an_appwrapper_or_launcher_pod_of_a_gone_job_counts_within_its_workloads_grace() -> None:
    """The bound is the Workload's longest template grace period (here 600 s)."""
    mpi_labels = {"training.kubeflow.org/job-name": "m", ROLE_LABEL: "launcher"}
    for kind, name, labels, job in ((APPWRAPPER, "aw", {APPWRAPPER_LABEL: "aw"}, "anything"),
                                    (MPIJOB, "m", mpi_labels, "m-launcher")):
        wl = {"metadata": {"name": kind.workload_name(
            {"metadata": {"name": name, "uid": "u-1", "namespace": "ns"}}), "namespace": "ns"},
            "spec": {"podSets": [
                {"name": "a", "template": {"spec": {}}},
                {"name": "b", "template": {"spec": {"terminationGracePeriodSeconds": 600}}}]}}
        ctx = FakeCtx({POD: PODS, WL: WORKLOADS, "job": JOBS, CHILD_JOBS: JOBS,
                       OTHER_JOBS: JOBS}, {WL: [wl]})
        for grace, counts in ((YEARS, False), (601, False), (600, True), (30, True)):
            pod = _killed(labels, "batch/v1", "Job", job, grace)
            assert pod_of(kind, pod, name, "u-1", ctx=ctx) is counts, (kind.kind, grace)
