"""Issue 14.1: a Job changed after admission (parallelism raised, requests changed) no longer
matches its Workload; the Job controller stops it (Kueue ``EquivalentToWorkload``)."""

from __future__ import annotations

import copy
from dataclasses import replace

from app.core.types import ClusterQueueName, FlavorName, ResourceName
from app.core.workload import Admission, PodSetAssignment, admission_excess, admission_mismatch
from app.wire.workload import workload_from_job, workload_from_object, workload_object_for_job
from tests.unit.test_job_to_workload import container, job

GPU = ResourceName("nvidia.com/gpu")


def _admitted(job_obj: dict, count: int | None = None):
    wl = workload_from_object(workload_object_for_job(job_obj))
    ps = wl.pod_sets[0]
    n = ps.count if count is None else count
    adm = Admission(ClusterQueueName("cq"), (PodSetAssignment(
        ps.name, {GPU: FlavorName("a100")}, {GPU: ps.requests[GPU] * n}, n),))
    return replace(wl, admission=adm)


def _gpu_job(parallelism: int, gpus: str = "1") -> dict:
    return job(container(requests={"nvidia.com/gpu": gpus}), parallelism=parallelism,
               labels={"kueue.x-k8s.io/queue-name": "lq"})


def test_the_job_as_admitted_matches():
    j = _gpu_job(1)
    assert admission_mismatch(workload_from_job(j).pod_sets, _admitted(j)) is None


def test_raised_parallelism_does_not_match_and_says_the_numbers():
    j = _gpu_job(1)
    wl = _admitted(j)
    scaled = copy.deepcopy(j)
    scaled["spec"]["parallelism"] = 64
    why = admission_mismatch(workload_from_job(scaled).pod_sets, wl)
    assert why == "podSet main: 64 pods, admitted for 1"


def test_lowered_parallelism_does_not_match_either_as_kueue():
    j = _gpu_job(4)
    scaled = copy.deepcopy(j)
    scaled["spec"]["parallelism"] = 2
    assert "2 pods, admitted for 4" in admission_mismatch(
        workload_from_job(scaled).pod_sets, _admitted(j))


def test_the_admitted_count_is_what_counts_not_the_spec_count():
    # Partial admission: the Workload asked for 4, was admitted for 2, the Job runs 2.
    j4 = _gpu_job(4)
    wl = _admitted(j4, count=2)
    assert admission_mismatch(workload_from_job(_gpu_job(2)).pod_sets, wl) is None
    assert "4 pods, admitted for 2" in admission_mismatch(workload_from_job(j4).pod_sets, wl)


def test_changed_requests_do_not_match():
    j = _gpu_job(2)
    bigger = _gpu_job(2, gpus="8")
    why = admission_mismatch(workload_from_job(bigger).pod_sets, _admitted(j))
    assert why is not None and "nvidia.com/gpu" in why
    with_cpu = copy.deepcopy(j)
    with_cpu["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    why = admission_mismatch(workload_from_job(with_cpu).pod_sets, _admitted(j))
    assert why is not None and "cpu" in why


def test_admission_excess_lets_fewer_or_smaller_pods_through_and_names_more_or_bigger():
    """``admission_excess`` (an operator's child, e.g. a TrainJob's JobSet, against its
    parent's admission): equal, fewer or smaller pods fit; more pods, bigger ones or a podSet
    the admission lacks do not."""
    wl = _admitted(_gpu_job(2, "2"))
    assert admission_excess(workload_from_job(_gpu_job(2, "2")).pod_sets, wl) is None
    assert admission_excess(workload_from_job(_gpu_job(1, "1")).pod_sets, wl) is None
    assert admission_excess(workload_from_job(_gpu_job(3, "2")).pod_sets, wl) == \
        "podSet main: 3 pods, admitted for 2"
    assert admission_excess(workload_from_job(_gpu_job(2, "3")).pod_sets, wl) == \
        "podSet main: per-pod requests of nvidia.com/gpu above the admitted ones"
    other = [replace(ps, name="other") for ps in workload_from_job(_gpu_job(1)).pod_sets]
    assert "not in the admitted podSets ['main']" in admission_excess(other, wl)
