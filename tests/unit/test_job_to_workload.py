"""batch/v1 Job -> Workload (app.wire.workload): per-pod requests as Kubernetes computes them
(KQ-01, KQ-04), count, queue, priority, scheduling constraints, errors naming the field,
deterministic names, the Workload object JSON, and reading a Workload object back."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from app.core.workload import NodeSelectorRequirement, Toleration
from app.wire.fields import WorkloadSpecError
from app.wire.names import JOB_UID_LABEL
from app.wire.podtemplate import pod_requests
from app.wire.workload import (
    workload_from_job,
    workload_from_object,
    workload_name_for_job,
    workload_object_for_job,
)
from tests import crdschema

MI = 2**20
GI = 2**30


def container(
    name: str = "main",
    requests: dict | None = None,
    limits: dict | None = None,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    if resources:
        c["resources"] = resources
    if restart_policy is not None:
        c["restartPolicy"] = restart_policy
    return c


def job(
    *containers: dict,
    init: tuple[dict, ...] = (),
    name: str = "train",
    ns: str = "research",
    parallelism: int | None = None,
    completions: int | None = None,
    labels: dict | None = None,
    pod_spec: dict | None = None,
    uid: str = "uid-1",
) -> dict:
    """A batch/v1 Job JSON, as the API server returns it."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": list(containers or [container()]),
    }
    if init:
        spec["initContainers"] = list(init)
    spec.update(pod_spec or {})
    job_spec: dict[str, Any] = {
        "template": {
            "metadata": {
                "labels": {
                    "batch.kubernetes.io/controller-uid": uid,
                    "controller-uid": uid,
                    "job-name": name,
                    "app": "trainer",
                }
            },
            "spec": spec,
        }
    }
    if parallelism is not None:
        job_spec["parallelism"] = parallelism
    if completions is not None:
        job_spec["completions"] = completions
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": uid,
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"kueue.x-k8s.io/queue-name": "team-queue", **(labels or {})},
        },
        "spec": job_spec,
    }


# --- per-pod requests --------------------------------------------------------------------------

REQUEST_CASES = [
    pytest.param(
        job(
            container(
                requests={"memory": "200Mi", "nvidia.com/gpu": "0"}, limits={"nvidia.com/gpu": "0"}
            ),
            parallelism=3,
        ),
        {"memory": 200 * MI},
        3,
        id="KQ-01 a request of 0 gpu is no request: only memory is requested",
    ),
    pytest.param(
        job(
            container(
                requests={"memory": "200Mi", "nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"}
            ),
            parallelism=3,
        ),
        {"memory": 200 * MI, "nvidia.com/gpu": 1},
        3,
        id="KQ-01 negative control: a gpu request of 1 is kept",
    ),
    pytest.param(
        job(
            container(requests={"cpu": "400m"}),
            init=(
                container("side", {"cpu": "300m"}, restart_policy="Always"),
                container("prep", {"cpu": "500m"}),
            ),
        ),
        {"cpu": 800},
        1,
        id="KQ-04 sidecar then init: max(300+500, 300+400) = 800m",
    ),
    pytest.param(
        job(
            container("a", {"cpu": "1"}),
            container("b", {"cpu": "1.5"}),
            init=(container("init", {"cpu": "4"}),),
        ),
        {"cpu": 4000},
        1,
        id="KQ-04 plain init container: max(4, 1+1.5) = 4 cpu, not the sum",
    ),
    pytest.param(
        job(
            container("a", {"cpu": "1"}),
            container("b", {"cpu": "1.5"}),
            init=(container("init", {"cpu": "4"}),),
            pod_spec={"overhead": {"cpu": "250m"}},
        ),
        {"cpu": 4250},
        1,
        id="KQ-04 pod overhead is added after the max: 4250m",
    ),
    pytest.param(
        job(
            container(requests={"cpu": "400m"}),
            init=(
                container("prep", {"cpu": "500m"}),
                container("side", {"cpu": "300m"}, restart_policy="Always"),
            ),
        ),
        {"cpu": 700},
        1,
        id="an init container before the sidecar does not run beside it: max(500, 300+400)",
    ),
    pytest.param(
        job(
            container(requests={"cpu": "100m"}),
            init=(
                container("s1", {"cpu": "100m"}, restart_policy="Always"),
                container("s2", {"cpu": "200m"}, restart_policy="Always"),
                container("big", {"cpu": "1"}),
            ),
        ),
        {"cpu": 1300},
        1,
        id="an init container runs beside every sidecar declared before it: 100+200+1000",
    ),
    pytest.param(
        job(container(limits={"cpu": "2", "memory": "1Gi"})),
        {"cpu": 2000, "memory": GI},
        1,
        id="missing requests default to limits",
    ),
    pytest.param(
        job(container(requests={"cpu": "1"}, limits={"cpu": "2", "memory": "1Gi"})),
        {"cpu": 1000, "memory": GI},
        1,
        id="an explicit request wins over its limit",
    ),
    pytest.param(
        job(container("a", {"cpu": "1", "memory": "1Gi"}), container("b", {"cpu": "500m"})),
        {"cpu": 1500, "memory": GI},
        1,
        id="containers add up",
    ),
    pytest.param(
        job(
            container(requests={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}),
            pod_spec={"resources": {"requests": {"cpu": "3"}, "limits": {"memory": "2Gi"}}},
        ),
        {"cpu": 3000, "memory": 2 * GI, "nvidia.com/gpu": 1},
        1,
        id="pod-level requests (and limits as their defaults) replace cpu and memory totals",
    ),
    pytest.param(
        job(container(requests={"cpu": "1"}), parallelism=4, completions=2),
        {"cpu": 1000},
        2,
        id="count is min(parallelism, completions)",
    ),
    pytest.param(
        job(container(requests={"cpu": "1"}), completions=10),
        {"cpu": 1000},
        1,
        id="parallelism defaults to 1",
    ),
    pytest.param(
        job(container(requests={"cpu": "1"}), parallelism=0),
        {"cpu": 1000},
        0,
        id="parallelism 0 is a Workload of 0 pods",
    ),
    pytest.param(
        job(container()),
        {},
        1,
        id="a pod without requests requests nothing",
    ),
]


@pytest.mark.parametrize(("job_obj", "requests", "count"), REQUEST_CASES)
def test_pod_set_requests_and_count(job_obj: dict, requests: dict, count: int) -> None:
    wl = workload_from_job(job_obj)
    (pod_set,) = wl.pod_sets
    assert pod_set.name == "main"
    assert dict(pod_set.requests) == requests
    assert pod_set.count == count
    assert pod_set.total() == {r: v * count for r, v in requests.items()}


def test_kq01_usage_is_three_times_200mi_and_has_no_gpu_key() -> None:
    wl = workload_from_job(
        job(
            container(
                requests={"memory": "200Mi", "nvidia.com/gpu": 0}, limits={"nvidia.com/gpu": 0}
            ),
            parallelism=3,
        )
    )
    assert wl.pod_sets[0].total() == {"memory": 629145600}


def test_kq04_two_jobs_of_800m_do_not_fit_1500m() -> None:
    j = job(
        container(requests={"cpu": "400m"}),
        init=(
            container("side", {"cpu": "300m"}, restart_policy="Always"),
            container("prep", {"cpu": "500m"}),
        ),
    )
    per_job = workload_from_job(j).pod_sets[0].total()["cpu"]
    assert per_job == 800
    assert per_job <= 1500 < 2 * per_job  # J1 fits the CQ, J2 cannot join it


def test_pod_requests_of_a_bare_pod_spec() -> None:
    spec = {"containers": [container(requests={"cpu": "250m"})], "overhead": {"memory": "64Mi"}}
    assert pod_requests(spec) == {"cpu": 250, "memory": 64 * MI}


# --- queue, priority, constraints, name ----------------------------------------------------------


def test_queue_name_namespace_and_creation_come_from_the_job() -> None:
    wl = workload_from_job(job())
    assert (wl.namespace, wl.queue_name) == ("research", "team-queue")
    assert wl.creation == 1767323045.0  # 2026-01-02T03:04:05Z
    no_label = job()
    del no_label["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert workload_from_job(no_label).queue_name == ""


@pytest.mark.parametrize(
    ("labels", "pod_spec", "expected"),
    [
        pytest.param({}, {}, 0, id="no class: priority 0"),
        pytest.param(
            {"kueue.x-k8s.io/priority-class": "high"}, {}, 1000, id="WorkloadPriorityClass label"
        ),
        pytest.param({}, {"priorityClassName": "batch-low"}, -5, id="pod PriorityClass"),
        pytest.param(
            {"kueue.x-k8s.io/priority-class": "high"},
            {"priorityClassName": "batch-low"},
            1000,
            id="the WorkloadPriorityClass label wins over the pod PriorityClass",
        ),
        pytest.param(
            {},
            {"priorityClassName": "system-node-critical"},
            2000001000,
            id="built-in system PriorityClass",
        ),
    ],
)
def test_priority(labels: dict, pod_spec: dict, expected: int) -> None:
    j = job(labels=labels, pod_spec=pod_spec)
    wl = workload_from_job(
        j, priority_classes={"high": 1000, "low": 10}, pod_priority_classes={"batch-low": -5}
    )
    assert wl.priority == expected


def test_scheduling_constraints_are_carried_into_the_pod_set() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "In",
                                "values": ["NVIDIA-L4", "NVIDIA-A100-SXM4-80GB"],
                            }
                        ]
                    },
                    {"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}]},
                ]
            }
        }
    }
    j = job(
        pod_spec={
            "nodeSelector": {"topology.kubernetes.io/zone": "z1"},
            "affinity": affinity,
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "team", "value": "research"},
            ],
        }
    )
    ps = workload_from_job(j).pod_sets[0]
    assert dict(ps.node_selector) == {"topology.kubernetes.io/zone": "z1"}
    assert ps.affinity_terms == (
        (
            NodeSelectorRequirement(
                "nvidia.com/gpu.product", "In", ("NVIDIA-L4", "NVIDIA-A100-SXM4-80GB")
            ),
        ),
        (NodeSelectorRequirement("spot", "DoesNotExist"),),
    )
    assert ps.tolerations == (
        Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
        Toleration(key="team", operator="Equal", value="research"),
    )


def test_workload_name_is_deterministic_and_kueue_shaped() -> None:
    name = workload_name_for_job("train", "uid-1")
    digest = hashlib.sha1(b"Job\nbatch\ntrain\nuid-1").hexdigest()[:5]
    assert name == f"job-train-{digest}"
    assert workload_name_for_job("train", "uid-1") == name
    assert workload_name_for_job("train", "uid-2") != name  # a re-created Job gets a new one
    assert workload_from_job(job()).name == name


def test_long_job_names_are_truncated_to_253_characters() -> None:
    long_name = "a" * 253
    name = workload_name_for_job(long_name, "u")
    assert len(name) == 253
    assert name.startswith("job-aaaa") and name[-6] == "-"


# --- errors name the field -----------------------------------------------------------------------


def _broken(path: str, value: Any) -> dict:
    """``job()`` with ``value`` set at a dotted ``path`` (list indexes as ``[0]``)."""
    j = job(init=(container("prep", {"cpu": "1"}),))
    keys = path.replace("[", ".").replace("]", "").split(".")
    node: Any = j
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node.setdefault(k, {})
    last = keys[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return j


ERROR_CASES = [
    pytest.param(
        _broken("spec.template.spec.containers[0].resources", {"requests": {"cpu": "2 cores"}}),
        "spec.template.spec.containers[0].resources.requests[cpu]",
        id="bad cpu quantity",
    ),
    pytest.param(
        _broken("spec.template.spec.containers[0].resources", {"limits": {"memory": "-1Gi"}}),
        "spec.template.spec.containers[0].resources.limits[memory]",
        id="negative limit",
    ),
    pytest.param(
        _broken("spec.template.spec.initContainers[0].resources", {"requests": {"cpu": "x"}}),
        "spec.template.spec.initContainers[0].resources.requests[cpu]",
        id="bad init container quantity",
    ),
    pytest.param(
        _broken("spec.template.spec.initContainers[0].restartPolicy", "OnFailure"),
        "spec.template.spec.initContainers[0].restartPolicy",
        id="bad sidecar policy",
    ),
    pytest.param(
        _broken("spec.template.spec.overhead", {"cpu": "lots"}),
        "spec.template.spec.overhead[cpu]",
        id="bad overhead",
    ),
    pytest.param(
        _broken("spec.template.spec.containers", []),
        "spec.template.spec.containers",
        id="no containers",
    ),
    pytest.param(
        _broken("spec.template.spec.containers[0].resources", ["cpu"]),
        "spec.template.spec.containers[0].resources",
        id="resources not an object",
    ),
    pytest.param(_broken("spec.parallelism", -1), "spec.parallelism", id="negative parallelism"),
    pytest.param(_broken("spec.parallelism", "3"), "spec.parallelism", id="string parallelism"),
    pytest.param(_broken("spec.completions", -2), "spec.completions", id="negative completions"),
    pytest.param(_broken("spec.template", None), "spec.template", id="no pod template"),
    pytest.param(_broken("metadata.name", ""), "metadata.name", id="no name"),
    pytest.param(
        job(labels={"kueue.x-k8s.io/queue-name": "Team_Queue"}),
        "metadata.labels[kueue.x-k8s.io/queue-name]",
        id="queue name not DNS-1123",
    ),
    pytest.param(
        job(labels={"kueue.x-k8s.io/priority-class": "missing"}),
        "metadata.labels[kueue.x-k8s.io/priority-class]",
        id="unknown WorkloadPriorityClass",
    ),
    pytest.param(
        job(pod_spec={"priorityClassName": "nope"}),
        "spec.template.spec.priorityClassName",
        id="unknown PriorityClass",
    ),
    pytest.param(
        job(pod_spec={"tolerations": [{"key": "a", "operator": "Gt"}]}),
        "spec.template.spec.tolerations[0].operator",
        id="bad toleration operator",
    ),
    pytest.param(
        job(pod_spec={"tolerations": [{"operator": "Equal", "value": "x"}]}),
        "spec.template.spec.tolerations[0].operator",
        id="empty toleration key needs Exists",
    ),
    pytest.param(
        job(
            pod_spec={
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "k", "operator": "Near"}]}
                            ]
                        }
                    }
                }
            }
        ),
        "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator",
        id="bad affinity operator",
    ),
]


@pytest.mark.parametrize(("job_obj", "field"), ERROR_CASES)
def test_bad_specs_raise_an_error_naming_the_field(job_obj: dict, field: str) -> None:
    with pytest.raises(WorkloadSpecError) as err:
        workload_from_job(job_obj, priority_classes={}, pod_priority_classes={})
    assert err.value.field == field
    assert str(err.value).startswith(field + ": ")
    assert isinstance(err.value, ValueError)


def test_a_non_object_is_refused() -> None:
    with pytest.raises(WorkloadSpecError):
        workload_from_job(["not", "a", "job"])  # type: ignore[arg-type]


# --- the Workload object, and reading it back ----------------------------------------------------


def test_workload_object_for_job_is_a_valid_kueue_workload() -> None:
    j = job(
        container(requests={"cpu": "1"}),
        parallelism=2,
        labels={
            "kueue.x-k8s.io/priority-class": "high",
            "kueue.x-k8s.io/max-exec-time-seconds": "3600",
        },
    )
    obj = workload_object_for_job(j, priority_classes={"high": 1000}, finalizers=["f/x"])
    assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2" and obj["kind"] == "Workload"
    meta = obj["metadata"]
    assert meta["name"] == workload_name_for_job("train", "uid-1")
    assert meta["namespace"] == "research"
    assert meta["labels"] == {JOB_UID_LABEL: "uid-1"}
    assert meta["finalizers"] == ["f/x"]
    (owner,) = meta["ownerReferences"]
    assert owner == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train",
        "uid": "uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    spec = obj["spec"]
    assert spec["queueName"] == "team-queue"
    assert spec["priority"] == 1000
    assert spec["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "high",
    }
    assert spec["maximumExecutionTimeSeconds"] == 3600
    (ps,) = spec["podSets"]
    assert (ps["name"], ps["count"]) == ("main", 2)
    # the Job controller's per-Job labels are dropped, the user's are kept
    assert ps["template"]["metadata"]["labels"] == {"app": "trainer"}
    assert ps["template"]["spec"] == j["spec"]["template"]["spec"]
    # the API server accepts it against the Workload CRD and stores it as written (nothing
    # refused, nothing pruned)
    assert crdschema.errors("Workload", obj) == []


def test_the_job_is_not_modified() -> None:
    j = job(init=(container("side", {"cpu": "1"}, restart_policy="Always"),))
    before = copy.deepcopy(j)
    workload_object_for_job(j)
    workload_from_job(j)
    assert j == before


def test_bad_max_exec_time_label_names_the_label() -> None:
    j = job(labels={"kueue.x-k8s.io/max-exec-time-seconds": "0"})
    with pytest.raises(WorkloadSpecError) as err:
        workload_object_for_job(j)
    assert err.value.field == "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]"


@pytest.mark.parametrize(("j", "_requests", "_count"), REQUEST_CASES)
def test_reading_the_workload_object_back_gives_the_same_pod_sets(
    j: dict, _requests: dict, _count: int
) -> None:
    from_job = workload_from_job(j)
    obj = workload_object_for_job(j)
    obj["metadata"]["uid"] = "wl-uid"
    obj["metadata"]["creationTimestamp"] = "2026-01-02T03:04:05Z"
    back = workload_from_object(obj)
    assert back.pod_sets == from_job.pod_sets
    assert (back.name, back.namespace, back.queue_name, back.priority) == (
        from_job.name,
        from_job.namespace,
        from_job.queue_name,
        from_job.priority,
    )
    assert back.uid == "wl-uid" and back.admission is None


def test_workload_from_object_reads_admission_exactly() -> None:
    obj = workload_object_for_job(
        job(container(requests={"cpu": "1", "memory": "1.5Gi"}), parallelism=3)
    )
    obj["status"] = {
        "admission": {
            "clusterQueue": "research-cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"cpu": "default-flavor", "memory": "default-flavor"},
                    "resourceUsage": {"cpu": "3", "memory": "4608Mi"},
                }
            ],
        }
    }
    wl = workload_from_object(obj)
    assert wl.admission is not None
    assert wl.admission.cluster_queue == "research-cq"
    (psa,) = wl.admission.pod_set_assignments
    assert dict(psa.flavors) == {"cpu": "default-flavor", "memory": "default-flavor"}
    assert dict(psa.resource_usage) == {"cpu": 3000, "memory": 4608 * MI}
    assert psa.count == 3  # defaults to the podSet's count
    assert dict(psa.resource_usage) == wl.pod_sets[0].total()


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        pytest.param(lambda o: o["spec"].update(podSets=[]), "spec.podSets", id="no podSets"),
        pytest.param(
            lambda o: o["spec"]["podSets"][0].update(count=-1),
            "spec.podSets[0].count",
            id="negative count",
        ),
        pytest.param(
            lambda o: o["spec"]["podSets"][0]["template"]["spec"]["containers"][0].update(
                resources={"requests": {"cpu": "?"}}
            ),
            "spec.podSets[0].template.spec.containers[0].resources.requests[cpu]",
            id="bad request in the template",
        ),
        pytest.param(
            lambda o: o.update(status={"admission": {"podSetAssignments": []}}),
            "status.admission.clusterQueue",
            id="admission without clusterQueue",
        ),
        pytest.param(
            lambda o: o.update(
                status={
                    "admission": {
                        "clusterQueue": "cq",
                        "podSetAssignments": [{"name": "main", "resourceUsage": {"cpu": "1 cpu"}}],
                    }
                }
            ),
            "status.admission.podSetAssignments[0].resourceUsage[cpu]",
            id="bad resourceUsage",
        ),
        pytest.param(
            lambda o: o["metadata"].update(creationTimestamp="yesterday"),
            "metadata.creationTimestamp",
            id="bad creationTimestamp",
        ),
    ],
)
def test_workload_from_object_errors_name_the_field(mutate: Any, field: str) -> None:
    obj = workload_object_for_job(job(container(requests={"cpu": "1"})))
    mutate(obj)
    with pytest.raises(WorkloadSpecError) as err:
        workload_from_object(obj)
    assert err.value.field == field
