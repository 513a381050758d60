"""Wire models (app.models): exact round-trip of every sample and of realistic API objects with
unknown fields, Kueue defaults, errors naming the field, and agreement with the generated CRDs
(every CRD field has a model field; every field is described; the YAML is up to date)."""

from __future__ import annotations

import copy
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from app.models.clusterqueue import ClusterQueue, ClusterQueueSpec
from app.models.cohort import Cohort
from app.models.common import KubeObject, LabelSelector, WireModel
from app.models.job import Job
from app.models.localqueue import LocalQueue
from app.models.resourceflavor import ResourceFlavor
from app.models.workload import Workload
from app.models.workloadpriorityclass import WorkloadPriorityClass

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "manifests" / "samples"
CRDS = ROOT / "manifests" / "crds"
MODELS: dict[str, type[KubeObject]] = {
    "ResourceFlavor": ResourceFlavor,
    "ClusterQueue": ClusterQueue,
    "Cohort": Cohort,
    "LocalQueue": LocalQueue,
    "Workload": Workload,
    "WorkloadPriorityClass": WorkloadPriorityClass,
    "Job": Job,
}


def _sample_docs() -> list[Any]:
    docs = []
    for path in sorted(SAMPLES.glob("*/*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc and doc.get("kind") in MODELS:
                docs.append(pytest.param(doc, id=f"{path.parent.name}/{path.name}#{i}"))
    return docs


SAMPLE_DOCS = _sample_docs()


def test_every_kueue_sample_is_covered() -> None:
    kinds = {p.values[0]["kind"] for p in SAMPLE_DOCS}
    assert {"ResourceFlavor", "ClusterQueue", "LocalQueue"} <= kinds
    assert len(SAMPLE_DOCS) >= 12  # seed: 1 RF + 2 CQ + 2 LQ; gpu: 3 RF + 2 CQ + 2 LQ


@pytest.mark.parametrize("doc", SAMPLE_DOCS)
def test_samples_round_trip_exactly(doc: dict) -> None:
    model = MODELS[doc["kind"]].from_wire(doc)
    assert model.to_wire() == doc


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
        cq = ClusterQueue.from_wire(seed[("ClusterQueue", f"{team}-cq", None)])
        assert cq.spec is not None
        assert cq.spec.cohort == "ai-platform" and cq.spec.cohort_name is None  # as users write
        assert cq.spec.effective_cohort == "ai-platform"
        assert cq.spec.namespace_selector == LabelSelector()
        assert cq.spec.queueing_strategy == "BestEffortFIFO"
        (group,) = cq.spec.resource_groups or []
        assert group.covered_resources == ["cpu", "memory"]
        (flavor,) = group.flavors
        assert flavor.name == "default-flavor"
        assert [(r.name, r.nominal_quota, r.borrowing_limit) for r in flavor.resources] == [
            ("cpu", 4, 4),
            ("memory", "4Gi", "4Gi"),
        ]
        lq = LocalQueue.from_wire(seed[("LocalQueue", "team-queue", team)])
        assert lq.spec is not None and lq.spec.cluster_queue == f"{team}-cq"
    assert ("ResourceFlavor", "default-flavor", None) in seed


def test_gpu_samples_say_what_the_issue_says() -> None:
    gpu = {
        (d.values[0]["kind"], d.values[0]["metadata"]["name"]): d.values[0]
        for d in SAMPLE_DOCS
        if d.id.startswith("gpu/")
    }
    a100 = ResourceFlavor.from_wire(gpu[("ResourceFlavor", "a100-flavor")])
    assert a100.spec and a100.spec.node_labels == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"
    }
    assert [(t.key, t.operator, t.effect) for t in a100.spec.tolerations or []] == [
        ("nvidia.com/gpu", "Exists", "NoSchedule")
    ]
    l4 = ResourceFlavor.from_wire(gpu[("ResourceFlavor", "l4-flavor")])
    assert l4.spec and l4.spec.node_labels == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    for team in ("research", "inference"):
        spec = ClusterQueue.from_wire(gpu[("ClusterQueue", f"{team}-cq")]).spec
        assert spec is not None and spec.effective_cohort == "ai-platform"
        groups = spec.resource_groups or []
        assert [g.covered_resources for g in groups] == [["cpu", "memory"], ["nvidia.com/gpu"]]
        assert [f.name for f in groups[1].flavors] == ["a100-flavor", "l4-flavor"]
        for f in groups[1].flavors:
            assert [(r.nominal_quota, r.borrowing_limit) for r in f.resources] == [(4, 4)]
        if team == "inference":
            assert spec.preemption is not None
            assert spec.preemption.reclaim_within_cohort == "Any"
            assert spec.preemption.within_cluster_queue == "LowerPriority"
        else:
            assert spec.preemption is None


# --- realistic objects as the API server returns them, with fields pykueue does not model ------

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
        ResourceFlavor,
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
        ClusterQueue,
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
                "admissionChecksStrategy": {
                    "admissionChecks": [{"name": "prov", "onFlavors": ["default-flavor"]}]
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
        id="ClusterQueue with every modelled field, status and an unknown spec field",
    ),
    pytest.param(
        LocalQueue,
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
        WorkloadPriorityClass,
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
        Workload,
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
                                            "requests": {"cpu": "1", "memory": 0.5},
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
        id="admitted Workload with full status and pod fields pykueue does not model",
    ),
    pytest.param(
        Job,
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


@pytest.mark.parametrize(("model", "doc"), REALISTIC)
def test_realistic_objects_round_trip_exactly(model: type[KubeObject], doc: dict) -> None:
    original = copy.deepcopy(doc)
    parsed = model.from_wire(doc)
    assert parsed.to_wire() == original
    assert doc == original  # parsing does not touch the input


def test_unknown_fields_survive_a_change_to_a_known_field() -> None:
    doc = copy.deepcopy(REALISTIC[1].values[1])
    cq = ClusterQueue.from_wire(doc)
    assert cq.spec is not None
    cq.spec.stop_policy = "None"
    out = cq.to_wire()
    assert out["spec"]["stopPolicy"] == "None"
    assert out["spec"]["concurrentAdmissionPolicy"] == doc["spec"]["concurrentAdmissionPolicy"]
    assert out["metadata"]["managedFields"] == doc["metadata"]["managedFields"]


def test_defaults_are_kueues_but_never_written_unless_set() -> None:
    spec = ClusterQueueSpec.from_wire({})
    assert spec.queueing_strategy == "BestEffortFIFO"
    assert spec.stop_policy == "None"
    assert spec.namespace_selector is None  # unset: matches no namespace
    assert spec.effective_cohort is None
    assert spec.to_wire() == {}
    assert (
        ClusterQueueSpec.from_wire({"namespaceSelector": {}}).namespace_selector == LabelSelector()
    )


@pytest.mark.parametrize(
    ("cohort_name", "cohort", "effective"),
    [("a", None, "a"), (None, "b", "b"), ("a", "a", "a"), (None, None, None)],
)
def test_effective_cohort_reads_the_deprecated_alias(
    cohort_name: str | None, cohort: str | None, effective: str | None
) -> None:
    assert ClusterQueueSpec(cohort_name=cohort_name, cohort=cohort).effective_cohort == effective


def test_objects_built_in_python_carry_api_version_and_kind() -> None:
    wpc = WorkloadPriorityClass(metadata={"name": "high"}, value=1000)
    assert wpc.to_wire() == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
    }
    cq = ClusterQueue(metadata={"name": "cq"}, spec=ClusterQueueSpec(cohort_name="co"))
    assert cq.to_wire() == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"cohortName": "co"},
    }


@pytest.mark.parametrize(
    ("model", "doc", "where"),
    [
        pytest.param(
            ClusterQueue,
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
            ("spec", "resourceGroups", 0, "flavors", 0, "resources", 0, "nominalQuota"),
            id="missing nominalQuota",
        ),
        pytest.param(
            ClusterQueue,
            {"spec": {"queueingStrategy": "LIFO"}},
            ("spec", "queueingStrategy"),
            id="unknown queueingStrategy",
        ),
        pytest.param(
            WorkloadPriorityClass, {"metadata": {"name": "x"}}, ("value",), id="missing value"
        ),
        pytest.param(
            Workload,
            {"spec": {"podSets": [{"name": "main"}]}},
            ("spec", "podSets", 0, "template"),
            id="podSet without template",
        ),
    ],
)
def test_wrong_shapes_are_refused_naming_the_wire_field(
    model: type[KubeObject], doc: dict, where: tuple
) -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        model.from_wire(doc)
    assert where in [e["loc"] for e in err.value.errors()]


# --- agreement with the generated CRDs -----------------------------------------------------------


def _crd_schemas() -> dict[str, dict]:
    out = {}
    for path in CRDS.glob("kueue.x-k8s.io_*.yaml"):
        crd = yaml.safe_load(path.read_text())
        (version,) = crd["spec"]["versions"]
        out[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    return out


CRD_SCHEMAS = _crd_schemas()


def _model_of(annotation: Any) -> type[WireModel] | None:
    """The WireModel inside ``X``, ``X | None``, ``list[X]`` or ``dict[str, X]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, WireModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, dict):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found:
                return found
    return None


def _missing_fields(schema: dict, model: type[WireModel], path: str) -> list[str]:
    missing = []
    aliases = {f.alias or name: f for name, f in model.model_fields.items()}
    for prop, sub in schema.get("properties", {}).items():
        field = aliases.get(prop)
        if field is None:
            missing.append(f"{path}.{prop}")
            continue
        child = _model_of(field.annotation)
        if child is None:
            continue
        node = sub.get("items", sub)
        node = node.get("additionalProperties", node) if "properties" not in node else node
        missing += _missing_fields(node, child, f"{path}.{prop}")
    return missing


@pytest.mark.parametrize("kind", sorted(CRD_SCHEMAS))
def test_every_crd_field_has_a_model_field(kind: str) -> None:
    assert _missing_fields(CRD_SCHEMAS[kind], MODELS[kind], kind) == []


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


@pytest.mark.parametrize("kind", sorted(CRD_SCHEMAS))
def test_every_crd_field_has_a_description(kind: str) -> None:
    assert len(CRD_SCHEMAS) == 6
    assert _undescribed(CRD_SCHEMAS[kind], kind) == []


def test_generated_crds_are_up_to_date() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen_crds.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
