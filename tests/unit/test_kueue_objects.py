"""Kueue objects (kueue.x-k8s.io/v1beta2): the generated CRDs (hack/gen_crds.py,
manifests/crds) and the app's readers of them (app.wire.queues for ResourceFlavor,
ClusterQueue, Cohort, LocalQueue and WorkloadPriorityClass; app.core.workload for Workload and
batch/v1 Job).

What the API server enforces is checked against the CRD schema (tests/crdschema.py: required
fields, enums, defaults, pruning); what pykueue makes of an object is checked through the
reader the controllers use: the samples say what the issue says, realistic API objects with
fields pykueue does not read are read without touching the input, and Kueue's defaults and
aliases hold. The CRDs themselves: every field described, the YAML up to date."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.core.quantity import parse_quantity
from app.core.spec import (
    BorrowWithinCohort,
    FungibilityPolicy,
    FungibilityPreference,
    QueueingStrategy,
    ReclaimWithinCohort,
    StopPolicy,
    WithinClusterQueue,
    validate_cluster_queue,
)
from app.wire import queues as convert
from app.wire.workload import workload_from_job, workload_from_object
from tests import crdschema

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "manifests" / "samples"
KUEUE_KINDS = {"ResourceFlavor", "ClusterQueue", "Cohort", "LocalQueue", "Workload",
               "WorkloadPriorityClass"}


def _sample_docs() -> list[Any]:
    docs = []
    for path in sorted(SAMPLES.glob("*/*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc and doc.get("kind") in KUEUE_KINDS:
                docs.append(pytest.param(doc, id=f"{path.parent.name}/{path.name}#{i}"))
    return docs


SAMPLE_DOCS = _sample_docs()


def test_every_kueue_sample_is_covered() -> None:
    kinds = {p.values[0]["kind"] for p in SAMPLE_DOCS}
    assert {"ResourceFlavor", "ClusterQueue", "LocalQueue"} <= kinds
    assert len(SAMPLE_DOCS) >= 12  # seed: 1 RF + 2 CQ + 2 LQ; gpu: 3 RF + 2 CQ + 2 LQ


@pytest.mark.parametrize("doc", SAMPLE_DOCS)
def test_samples_are_stored_as_written(doc: dict) -> None:
    """The API server accepts every sample and prunes nothing from it."""
    assert crdschema.errors(doc["kind"], doc) == []


def _cpu(q: Any) -> int:
    return parse_quantity(q, "cpu")


def _mem(q: Any) -> int:
    return parse_quantity(q, "memory")


def test_seed_samples_say_what_the_issue_says() -> None:
    seed = {
        (
            d.values[0]["kind"],
            d.values[0]["metadata"]["name"],
            d.values[0]["metadata"].get("namespace"),
        ): d.values[0]
        for d in SAMPLE_DOCS
        if d.id.startswith("seed/")
    }
    for team in ("research", "inference"):
        doc = seed[("ClusterQueue", f"{team}-cq", None)]
        assert doc["spec"]["cohort"] == "ai-platform" and "cohortName" not in doc["spec"]
        cq, problem = convert.cluster_queue(doc)  # as users write: the deprecated alias
        assert problem is None
        assert cq.cohort == "ai-platform"
        assert cq.namespace_selector is not None and cq.namespace_selector.selects_all
        assert cq.queueing_strategy == QueueingStrategy.BEST_EFFORT_FIFO
        (group,) = cq.resource_groups
        assert group.covered_resources == ("cpu", "memory")
        (flavor,) = group.flavors
        assert flavor.name == "default-flavor"
        assert [(r.name, r.nominal, r.borrowing_limit) for r in flavor.resources] == [
            ("cpu", _cpu(4), _cpu(4)),
            ("memory", _mem("4Gi"), _mem("4Gi")),
        ]
        lq = convert.local_queue(seed[("LocalQueue", "team-queue", team)])
        assert (lq.namespace, lq.cluster_queue) == (team, f"{team}-cq")
    assert convert.resource_flavor(
        seed[("ResourceFlavor", "default-flavor", None)]).name == "default-flavor"


def test_gpu_samples_say_what_the_issue_says() -> None:
    gpu = {
        (d.values[0]["kind"], d.values[0]["metadata"]["name"]): d.values[0]
        for d in SAMPLE_DOCS
        if d.id.startswith("gpu/")
    }
    a100 = convert.resource_flavor(gpu[("ResourceFlavor", "a100-flavor")])
    assert a100.node_labels == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert [(t.key, t.operator, t.effect) for t in a100.tolerations] == [
        ("nvidia.com/gpu", "Exists", "NoSchedule")
    ]
    l4 = convert.resource_flavor(gpu[("ResourceFlavor", "l4-flavor")])
    assert l4.node_labels == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    for team in ("research", "inference"):
        spec, problem = convert.cluster_queue(gpu[("ClusterQueue", f"{team}-cq")])
        assert problem is None and spec.cohort == "ai-platform"
        groups = spec.resource_groups
        assert [g.covered_resources for g in groups] == [("cpu", "memory"), ("nvidia.com/gpu",)]
        assert [f.name for f in groups[1].flavors] == ["a100-flavor", "l4-flavor"]
        for f in groups[1].flavors:
            assert [(r.nominal, r.borrowing_limit) for r in f.resources] == [(4, 4)]
        if team == "inference":
            assert spec.preemption.reclaim_within_cohort == ReclaimWithinCohort.ANY
            assert spec.preemption.within_cluster_queue == WithinClusterQueue.LOWER_PRIORITY
        else:  # no preemption block: Kueue's defaults, never preempt
            assert spec.preemption.reclaim_within_cohort == ReclaimWithinCohort.NEVER
            assert spec.preemption.within_cluster_queue == WithinClusterQueue.NEVER


# --- realistic objects as the API server returns them, with fields pykueue does not read -------

META = {
    "name": "x",
    "uid": "0b3f6a8e-1111-2222-3333-444455556666",
    "resourceVersion": "12345",
    "generation": 3,
    "creationTimestamp": "2026-03-01T10:00:00Z",
    "labels": {"team": "research"},
    "annotations": {"note": "kept"},
    "finalizers": ["kueue.x-k8s.io/resource-in-use"],
    "managedFields": [
        {
            "manager": "kubectl",
            "operation": "Apply",
            "apiVersion": "v1",
            "time": "2026-03-01T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {}},
        }
    ],
}
CONDITION = {
    "type": "Active",
    "status": "True",
    "reason": "Ready",
    "message": "Can admit new workloads",
    "lastTransitionTime": "2026-03-01T10:00:01Z",
    "observedGeneration": 3,
}

REALISTIC = [
    pytest.param(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": META,
            "spec": {
                "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                "nodeTaints": [
                    {
                        "key": "nvidia.com/gpu",
                        "value": "present",
                        "effect": "NoSchedule",
                        "timeAdded": "2026-03-01T10:00:00Z",
                    }
                ],
                "tolerations": [
                    {
                        "key": "nvidia.com/gpu",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 30,
                    }
                ],
                "futureField": {"nested": [1, 2]},
            },
        },
        id="ResourceFlavor with taints, tolerations and an unknown spec field",
    ),
    pytest.param(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": META,
            "spec": {
                "cohortName": "ai-platform",
                "queueingStrategy": "StrictFIFO",
                "namespaceSelector": {
                    "matchLabels": {"team": "a"},
                    "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}],
                },
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {
                                        "name": "cpu",
                                        "nominalQuota": "1500m",
                                        "borrowingLimit": 0,
                                        "lendingLimit": "500m",
                                    },
                                    {"name": "memory", "nominalQuota": "4Gi"},
                                ],
                            }
                        ],
                    }
                ],
                "flavorFungibility": {
                    "whenCanBorrow": "TryNextFlavor",
                    "whenCanPreempt": "TryNextFlavor",
                    "preference": "PreemptionOverBorrowing",
                },
                "preemption": {
                    "reclaimWithinCohort": "LowerPriority",
                    "withinClusterQueue": "LowerOrNewerEqualPriority",
                    "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
                },
                "stopPolicy": "Hold",
                "fairSharing": {"weight": "2"},
                "concurrentAdmissionPolicy": {"migration": {"mode": "TryPreferredFlavors"}},
            },
            "status": {
                "conditions": [CONDITION],
                "flavorsReservation": [
                    {
                        "name": "default-flavor",
                        "resources": [{"name": "cpu", "total": "1500m", "borrowed": "0"}],
                    }
                ],
                "flavorsUsage": [
                    {
                        "name": "default-flavor",
                        "resources": [
                            {"name": "cpu", "total": "1", "borrowed": "0"},
                            {"name": "memory", "total": "125Ki", "borrowed": "0"},
                        ],
                    }
                ],
                "pendingWorkloads": 2,
                "reservingWorkloads": 1,
                "admittedWorkloads": 1,
                "fairSharing": {"weightedShare": 0},
            },
        },
        id="ClusterQueue with the fields pykueue reads, status and an unknown spec field",
    ),
    pytest.param(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {**META, "namespace": "research"},
            "spec": {"clusterQueue": "research-cq", "stopPolicy": "None"},
            "status": {
                "conditions": [CONDITION],
                "pendingWorkloads": 0,
                "reservingWorkloads": 0,
                "admittedWorkloads": 0,
                "flavorsUsage": [
                    {"name": "default-flavor", "resources": [{"name": "cpu", "total": "0"}]}
                ],
                "unknownCounter": 7,
            },
        },
        id="LocalQueue with status and an unknown status field",
    ),
    pytest.param(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": META,
            "value": -100,
            "description": "best effort",
        },
        id="WorkloadPriorityClass",
    ),
    pytest.param(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                **META,
                "namespace": "research",
                "name": "job-train-1a2b3",
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": "train",
                        "uid": "u",
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "queueName": "team-queue",
                "priority": 1000,
                "active": True,
                "priorityClassRef": {
                    "group": "kueue.x-k8s.io",
                    "kind": "WorkloadPriorityClass",
                    "name": "high",
                },
                "podSets": [
                    {
                        "name": "main",
                        "count": 3,
                        "template": {
                            "metadata": {"labels": {"app": "train"}},
                            "spec": {
                                "restartPolicy": "Never",
                                "initContainers": [
                                    {
                                        "name": "side",
                                        "image": "envoy",
                                        "restartPolicy": "Always",
                                        "resources": {"requests": {"cpu": "300m"}},
                                    }
                                ],
                                "containers": [
                                    {
                                        "name": "main",
                                        "image": "trainer:1",
                                        "command": ["python", "train.py"],
                                        "env": [{"name": "A", "value": "1"}],
                                        "resources": {
                                            "requests": {"cpu": "1", "memory": "512Mi"},
                                            "limits": {"nvidia.com/gpu": 1},
                                        },
                                    }
                                ],
                                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                                "affinity": {
                                    "nodeAffinity": {
                                        "requiredDuringSchedulingIgnoredDuringExecution": {
                                            "nodeSelectorTerms": [
                                                {
                                                    "matchExpressions": [
                                                        {
                                                            "key": "k",
                                                            "operator": "In",
                                                            "values": ["v"],
                                                        }
                                                    ]
                                                }
                                            ]
                                        },
                                        "preferredDuringSchedulingIgnoredDuringExecution": [
                                            {"weight": 1, "preference": {}}
                                        ],
                                    }
                                },
                                "securityContext": {"runAsUser": 1000},
                                "volumes": [{"name": "data", "emptyDir": {}}],
                            },
                        },
                    }
                ],
            },
            "status": {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "True",
                        "reason": "QuotaReserved",
                        "message": "Quota reserved in ClusterQueue research-cq",
                        "lastTransitionTime": "2026-03-01T10:00:02Z",
                        "observedGeneration": 1,
                    },
                    {
                        "type": "Admitted",
                        "status": "True",
                        "reason": "Admitted",
                        "message": "The workload is admitted",
                        "lastTransitionTime": "2026-03-01T10:00:02Z",
                        "observedGeneration": 1,
                    },
                ],
                "admission": {
                    "clusterQueue": "research-cq",
                    "podSetAssignments": [
                        {
                            "name": "main",
                            "flavors": {"cpu": "default-flavor", "nvidia.com/gpu": "a100"},
                            "resourceUsage": {"cpu": "3900m", "nvidia.com/gpu": "3"},
                            "count": 3,
                        }
                    ],
                },
                "requeueState": {"count": 1, "requeueAt": "2026-03-01T10:01:00Z"},
                "reclaimablePods": [{"name": "main", "count": 1}],
                "admissionChecks": [
                    {
                        "name": "prov",
                        "state": "Ready",
                        "lastTransitionTime": "2026-03-01T10:00:02Z",
                        "message": "",
                        "podSetUpdates": [{"name": "main", "labels": {"a": "b"}}],
                    }
                ],
                "resourceRequests": [{"name": "main", "resources": {"cpu": "1300m"}}],
                "accumulatedPastExecutionTimeSeconds": 12,
                "schedulingStats": {
                    "evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]
                },
            },
        },
        id="admitted Workload with full status and pod fields pykueue does not read",
    ),
    pytest.param(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                **META,
                "namespace": "research",
                "labels": {"kueue.x-k8s.io/queue-name": "team-queue"},
            },
            "spec": {
                "parallelism": 3,
                "completions": 3,
                "suspend": True,
                "backoffLimit": 6,
                "completionMode": "NonIndexed",
                "manualSelector": False,
                "podReplacementPolicy": "TerminatingOrFailed",
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}},
                "template": {
                    "metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox",
                                "resources": {"requests": {"cpu": "1"}},
                                "terminationMessagePath": "/dev/x",
                                "imagePullPolicy": "Always",
                            }
                        ],
                        "restartPolicy": "Never",
                        "dnsPolicy": "ClusterFirst",
                        "schedulerName": "default-scheduler",
                        "terminationGracePeriodSeconds": 30,
                        "securityContext": {},
                    },
                },
            },
            "status": {
                "conditions": [
                    {
                        "type": "Suspended",
                        "status": "True",
                        "reason": "JobSuspended",
                        "message": "Job suspended",
                        "lastProbeTime": "2026-03-01T10:00:00Z",
                        "lastTransitionTime": "2026-03-01T10:00:00Z",
                    }
                ],
                "active": 0,
                "ready": 0,
                "terminating": 0,
                "uncountedTerminatedPods": {},
            },
        },
        id="suspended batch/v1 Job as the API server returns it",
    ),
]




def _read_cluster_queue(doc: dict) -> None:
    spec, problem = convert.cluster_queue(doc)
    assert problem is None
    assert spec.cohort == "ai-platform"
    assert spec.queueing_strategy == QueueingStrategy.STRICT_FIFO
    assert spec.namespace_selector is not None and spec.namespace_selector.matches(
        {"team": "a", "env": "prod"}) and not spec.namespace_selector.matches(
        {"team": "a", "env": "dev"})
    (group,) = spec.resource_groups
    cpu, mem = group.flavors[0].resources
    assert (cpu.nominal, cpu.borrowing_limit, cpu.lending_limit) == (1500, 0, 500)
    assert (mem.nominal, mem.borrowing_limit) == (_mem("4Gi"), None)
    assert spec.flavor_fungibility.when_can_borrow == FungibilityPolicy.TRY_NEXT_FLAVOR
    assert spec.flavor_fungibility.preference == FungibilityPreference.PREEMPTION_OVER_BORROWING
    assert spec.preemption.borrow_within_cohort == BorrowWithinCohort.LOWER_PRIORITY
    assert spec.preemption.max_priority_threshold == 100
    assert spec.stop_policy == StopPolicy.HOLD
    assert spec.fair_weight_milli == 2000


def _read_resource_flavor(doc: dict) -> None:
    rf = convert.resource_flavor(doc)
    assert rf.node_labels == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    assert [(t.key, t.value, t.effect) for t in rf.node_taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")]
    assert [(t.key, t.operator, t.effect) for t in rf.tolerations] == [
        ("nvidia.com/gpu", "Exists", "NoExecute")]


def _read_local_queue(doc: dict) -> None:
    lq = convert.local_queue(doc)
    assert (lq.namespace, lq.name, lq.cluster_queue) == ("research", "x", "research-cq")


def _read_priority_class(doc: dict) -> None:
    assert convert.priority_class_value(doc) == -100


def _read_workload(doc: dict) -> None:
    wl = workload_from_object(doc)
    assert (wl.namespace, wl.name, wl.queue_name, wl.priority) == (
        "research", "job-train-1a2b3", "team-queue", 1000)
    (ps,) = wl.pod_sets
    # per pod: the main container's 1 cpu plus the sidecar's 300m; 1 GPU from the limit
    assert (ps.name, ps.count) == ("main", 3)
    assert ps.requests["cpu"] == 1300 and ps.requests["nvidia.com/gpu"] == 1
    assert [(t.key, t.operator) for t in ps.tolerations] == [("nvidia.com/gpu", "Exists")]
    assert wl.admission is not None and wl.admission.cluster_queue == "research-cq"
    (psa,) = wl.admission.pod_set_assignments
    assert (psa.flavors["nvidia.com/gpu"], psa.resource_usage["cpu"], psa.count) == (
        "a100", 3900, 3)


def _read_job(doc: dict) -> None:
    wl = workload_from_job(doc)
    assert (wl.namespace, wl.queue_name) == ("research", "team-queue")
    (ps,) = wl.pod_sets
    assert (ps.count, ps.requests["cpu"]) == (3, 1000)


READERS: dict[str, Callable[[dict], None]] = {
    "ResourceFlavor": _read_resource_flavor,
    "ClusterQueue": _read_cluster_queue,
    "LocalQueue": _read_local_queue,
    "WorkloadPriorityClass": _read_priority_class,
    "Workload": _read_workload,
    "Job": _read_job,
}


@pytest.mark.parametrize("doc", REALISTIC)
def test_realistic_objects_are_read_without_touching_them(doc: dict) -> None:
    original = copy.deepcopy(doc)
    READERS[doc["kind"]](doc)
    assert doc == original  # reading does not touch the input


# The fields these objects carry that no Kueue v1beta2 CRD declares (a future field, say).
UNDECLARED = {
    "ResourceFlavor": ["spec.futureField: field not declared (pruned)"],
    "ClusterQueue": ["spec.concurrentAdmissionPolicy: field not declared (pruned)"],
    "LocalQueue": ["status.unknownCounter: field not declared (pruned)"],
}


@pytest.mark.parametrize("doc", [d for d in REALISTIC if d.values[0]["kind"] in KUEUE_KINDS])
def test_realistic_objects_lose_only_the_fields_the_crd_does_not_declare(doc: dict) -> None:
    """Everything else (status Kueue writes, pod fields of a Workload's template) is stored as
    written: the API server refuses nothing and prunes only the undeclared fields."""
    assert crdschema.errors(doc["kind"], doc) == UNDECLARED.get(doc["kind"], [])


def test_defaults_are_kueues_in_the_crd_and_in_the_reader() -> None:
    """Kueue v1beta2 ClusterQueue defaults: queueingStrategy BestEffortFIFO, stopPolicy None,
    flavorFungibility MayStopSearch / TryNextFlavor, preemption Never; the API server writes
    them (CRD ``default``) and the reader assumes them when absent, so both give one spec."""
    bare = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": "cq"}, "spec": {"resourceGroups": []}}
    stored = crdschema.with_defaults("ClusterQueue", bare)
    assert stored["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert stored["spec"]["stopPolicy"] == "None"
    assert "namespaceSelector" not in stored["spec"]  # no default: unset stays unset
    assert convert.cluster_queue(bare) == convert.cluster_queue(stored)
    spec, _ = convert.cluster_queue(bare)
    assert spec.queueing_strategy == QueueingStrategy.BEST_EFFORT_FIFO
    assert spec.stop_policy == StopPolicy.NONE
    assert spec.cohort is None


def test_unset_namespace_selector_matches_no_namespace_and_empty_matches_all() -> None:
    """Kueue v1beta2 ClusterQueue ``namespaceSelector``: unset (null) is a nothing selector,
    ``{}`` selects every namespace."""
    unset, _ = convert.cluster_queue({"metadata": {"name": "cq"}, "spec": {}})
    assert unset.namespace_selector is None
    empty, _ = convert.cluster_queue({"metadata": {"name": "cq"},
                                      "spec": {"namespaceSelector": {}}})
    assert empty.namespace_selector is not None and empty.namespace_selector.selects_all


@pytest.mark.parametrize(
    ("cohort_name", "cohort", "effective"),
    [("a", None, "a"), (None, "b", "b"), ("a", "a", "a"), (None, None, None)],
)
def test_effective_cohort_reads_the_deprecated_alias(
    cohort_name: str | None, cohort: str | None, effective: str | None
) -> None:
    spec = {k: v for k, v in (("cohortName", cohort_name), ("cohort", cohort)) if v}
    name, warning = convert.cohort_of(spec)
    assert name == effective
    assert (warning is not None) == (cohort_name is None and cohort is not None)
    assert crdschema.errors("ClusterQueue", {"spec": spec}) == []


@pytest.mark.parametrize(
    ("kind", "doc", "where"),
    [
        pytest.param(
            "ClusterQueue",
            {
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [{"name": "f", "resources": [{"name": "cpu"}]}],
                        }
                    ]
                }
            },
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Required value",
            id="missing nominalQuota",
        ),
        pytest.param(
            "ClusterQueue",
            {"spec": {"queueingStrategy": "LIFO"}},
            "spec.queueingStrategy: Unsupported value: 'LIFO'",
            id="unknown queueingStrategy",
        ),
        pytest.param(
            "WorkloadPriorityClass", {"metadata": {"name": "x"}}, "value: Required value",
            id="missing value",
        ),
        pytest.param(
            "Workload",
            {"spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1}]}},
            "spec.podSets[0].template: Required value",
            id="podSet without template",
        ),
    ],
)
def test_wrong_shapes_are_refused_naming_the_wire_field(kind: str, doc: dict, where: str) -> None:
    assert any(e.startswith(where) for e in crdschema.errors(kind, doc)), crdschema.errors(
        kind, doc)


def test_an_unknown_queueing_strategy_that_got_past_the_api_server_is_named() -> None:
    """Defence in depth (e.g. a CRD without the enum): the reader keeps the value and the
    ClusterQueue is inactive with the field named, never admitting by a guessed strategy."""
    spec, problem = convert.cluster_queue({"metadata": {"name": "cq"},
                                           "spec": {"queueingStrategy": "LIFO"}})
    assert problem is None
    bad = validate_cluster_queue(spec, {})
    assert bad is not None and bad.field == "spec.queueingStrategy"


# --- the CRDs themselves -------------------------------------------------------------------------


def _undescribed(schema: dict, path: str) -> list[str]:
    out = []
    for prop, sub in schema.get("properties", {}).items():
        if path.count(".") == 0 and prop == "metadata":
            continue
        if not sub.get("description", "").strip():
            out.append(f"{path}.{prop}")
        out += _undescribed(sub, f"{path}.{prop}")
    if "items" in schema:
        out += _undescribed(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _undescribed(schema["additionalProperties"], f"{path}{{}}")
    return out


@pytest.mark.parametrize("kind", sorted(crdschema.schemas()))
def test_every_crd_field_has_a_description(kind: str) -> None:
    assert len(crdschema.schemas()) == 9
    assert _undescribed(crdschema.schemas()[kind], kind) == []


def test_generated_crds_are_up_to_date() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen_crds.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr


def test_a_kueue_managers_multikueue_copy_keeps_its_topology_request() -> None:
    """Kueue v0.17.1's Job adapter sets ``topologyRequest.podIndexLabel`` on a Job's podSet
    (TopologyAwareScheduling is on by default), and its MultiKueue manager deletes a worker's
    copy whose spec differs from its own (``isRemoteSpecOutOfSync``): the field must be stored
    as sent, not pruned (hack/multikueue_interop.py direction b)."""
    copy_ = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
             "metadata": {"name": "job-interop-b-1-d4476", "namespace": "mk-interop",
                          "labels": {"kueue.x-k8s.io/multikueue-origin": "multikueue"}},
             "spec": {"queueName": "interop-lq", "podSets": [{
                 "name": "main", "count": 1,
                 "topologyRequest": {"podIndexLabel": "batch.kubernetes.io/job-completion-index"},
                 "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}]}}
    assert crdschema.errors("Workload", copy_) == []
    schema = crdschema.schemas()["Workload"]["properties"]["spec"]["properties"]["podSets"][
        "items"]["properties"]["topologyRequest"]
    (tas_rule,) = schema["x-kubernetes-validations"]
    assert "!has(self.required)" in tas_rule["rule"] and "not supported" in tas_rule["message"]
