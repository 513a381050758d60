"""Issue 3 on the real kube-apiserver: the Kueue v1beta2 CRDs (and the ClusterQueue quota
policy) apply; the seed and GPU samples are accepted with Kueue's defaults; invalid manifests
are rejected with messages naming the field; printer columns, short names and ``kubectl
explain`` read like documentation.

Invalid manifests and samples go through ``--dry-run=server`` (full validation, defaulting and
admission, nothing stored), so the shared lab keeps no objects from this module except the
namespaces ``research`` and ``inference``; objects created for the columns are deleted."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.wire.workload import workload_from_job, workload_from_object, workload_object_for_job
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "manifests" / "crds"
SAMPLES = ROOT / "manifests" / "samples"
KINDS = {
    "resourceflavors": ["rf", "flavor", "flavors"],
    "clusterqueues": ["cq"],
    "cohorts": ["co"],
    "localqueues": ["lq", "queue", "queues"],
    "workloads": ["wl", "kwl", "kueueworkload", "kueueworkloads"],
    "workloadpriorityclasses": ["wpc"],
    "admissionchecks": ["ac"],
    "multikueueconfigs": [],  # none, as Kueue's
    "multikueueclusters": [],
}
V = "kueue.x-k8s.io/v1beta2"


def _cq(name: str = "crdtest-invalid", **spec: Any) -> dict:
    base: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [_group(["cpu"], ("f", [("cpu", {"nominalQuota": 4})]))],
    }
    base.update(spec)
    return {"apiVersion": V, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": base}


def _group(covered: list[str], *flavors: tuple[str, list[tuple[str, dict]]]) -> dict:
    return {
        "coveredResources": covered,
        "flavors": [
            {"name": n, "resources": [{"name": r, **q} for r, q in res]} for n, res in flavors
        ],
    }


def _rf(**spec: Any) -> dict:
    return {
        "apiVersion": V,
        "kind": "ResourceFlavor",
        "metadata": {"name": "crdtest-invalid"},
        "spec": spec,
    }


def _dry_run(lab: LabHandle, obj: dict) -> Any:
    return lab.kubectl(
        "apply", "--dry-run=server", "-f", "-", "-o", "json", input=json.dumps(obj), check=False
    )


@pytest.fixture(scope="module")
def crds(lab: LabHandle) -> Iterator[LabHandle]:
    """The CRDs and the quota policy applied, established and enforcing."""
    lab.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(CRDS))
    for plural in KINDS:
        lab.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", f"crd/{plural}.kueue.x-k8s.io"
        )
    # A ValidatingAdmissionPolicy takes a moment to be loaded: wait until it denies.
    over = _cq(
        cohortName="c",
        resourceGroups=[_group(["cpu"], ("f", [("cpu", {"nominalQuota": 1, "lendingLimit": 2})]))],
    )
    wait_for(
        lambda: "ValidatingAdmissionPolicy" in _dry_run(lab, over).stderr,
        60,
        "the ClusterQueue quota policy to be enforced",
    )
    yield lab


def test_every_crd_is_established_with_its_short_names(crds: LabHandle) -> None:
    for plural, short in KINDS.items():
        crd = crds.get("crd", f"{plural}.kueue.x-k8s.io")
        (version,) = crd["spec"]["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1beta2", True, True)
        assert crd["spec"]["names"].get("shortNames", []) == short
    out = crds.kubectl("api-resources", "--api-group=kueue.x-k8s.io", "-o", "name").stdout
    assert set(out.split()) == {f"{p}.kueue.x-k8s.io" for p in KINDS}


@pytest.mark.parametrize("sample", ["seed", "seed-cohortname", "gpu"])
def test_samples_are_accepted_with_kueue_defaults(crds: LabHandle, sample: str) -> None:
    for ns in ("research", "inference"):
        crds.create_namespace(ns)
    r = crds.kubectl(
        "apply", "--dry-run=server", "-k", str(SAMPLES / sample), "-o", "json", check=False
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    items = doc["items"] if doc.get("kind") == "List" else [doc]
    cqs = {i["metadata"]["name"]: i for i in items if i["kind"] == "ClusterQueue"}
    assert set(cqs) == {"research-cq", "inference-cq"}
    for name, cq in cqs.items():
        spec = cq["spec"]
        assert spec["queueingStrategy"] == "BestEffortFIFO"
        assert spec["stopPolicy"] == "None"
        assert spec["flavorFungibility"] == {
            "whenCanBorrow": "MayStopSearch",
            "whenCanPreempt": "TryNextFlavor",
        }
        expected_preemption = {
            "reclaimWithinCohort": "Never",
            "withinClusterQueue": "Never",
            "borrowWithinCohort": {"policy": "Never"},
        }
        if sample == "gpu" and name == "inference-cq":
            expected_preemption.update(
                reclaimWithinCohort="Any", withinClusterQueue="LowerPriority"
            )
        assert spec["preemption"] == expected_preemption
        assert "ai-platform" in (spec.get("cohortName"), spec.get("cohort"))
    lqs = {
        i["metadata"]["namespace"]: i["spec"]["clusterQueue"]
        for i in items
        if i["kind"] == "LocalQueue"
    }
    assert lqs == {"research": "research-cq", "inference": "inference-cq"}


def test_equal_quantities_in_other_units_and_matching_cohort_alias_are_valid(
    crds: LabHandle,
) -> None:
    ok = _cq(
        cohort="co",
        cohortName="co",
        resourceGroups=[
            _group(
                ["cpu", "memory"],
                (
                    "f",
                    [
                        (
                            "cpu",
                            {"nominalQuota": "1500m", "lendingLimit": "1.5", "borrowingLimit": 0},
                        ),
                        ("memory", {"nominalQuota": "4Gi", "lendingLimit": "4096Mi"}),
                    ],
                ),
            )
        ],
    )
    r = _dry_run(crds, ok)
    assert r.returncode == 0, r.stderr


INVALID = [
    pytest.param(
        _cq(
            resourceGroups=[
                _group(["cpu"], ("f", [("cpu", {"nominalQuota": 4, "borrowingLimit": 2})]))
            ]
        ),
        "spec.resourceGroups",
        "borrowingLimit must be unset",
        id="borrowingLimit without a cohort",
    ),
    pytest.param(
        _cq(
            resourceGroups=[
                _group(["cpu"], ("f", [("cpu", {"nominalQuota": 4, "lendingLimit": 2})]))
            ]
        ),
        "spec.resourceGroups",
        "lendingLimit must be unset",
        id="lendingLimit without a cohort",
    ),
    pytest.param(
        _cq(
            cohortName="co",
            resourceGroups=[
                _group(
                    ["memory"],
                    ("f", [("memory", {"nominalQuota": "4Gi", "lendingLimit": "4097Mi"})]),
                )
            ],
        ),
        "lendingLimit",
        "flavor f resource memory: lendingLimit 4097Mi > nominalQuota 4Gi",
        id="lendingLimit above nominalQuota in other units",
    ),
    pytest.param(
        _cq(cohortName="a", cohort="b"),
        "spec.cohort",
        "deprecated alias",
        id="cohort and cohortName disagree",
    ),
    pytest.param(
        _cq(
            resourceGroups=[
                _group(
                    ["cpu", "memory"],
                    ("f", [("memory", {"nominalQuota": 1}), ("cpu", {"nominalQuota": 1})]),
                )
            ]
        ),
        "spec.resourceGroups[0].flavors",
        "in the same order",
        id="flavor resources not in coveredResources order",
    ),
    pytest.param(
        _cq(
            resourceGroups=[
                _group(["cpu"], ("f", [("cpu", {"nominalQuota": 1})])),
                _group(["cpu"], ("g", [("cpu", {"nominalQuota": 1})])),
            ]
        ),
        "spec.resourceGroups",
        "only one resource group",
        id="a resource in two groups",
    ),
    pytest.param(
        _cq(
            resourceGroups=[
                _group(["cpu"], ("f", [("cpu", {"nominalQuota": 1})])),
                _group(["memory"], ("f", [("memory", {"nominalQuota": 1})])),
            ]
        ),
        "spec.resourceGroups[].flavors[].name",
        "only one resource group: f",
        id="a flavor in two groups",
    ),
    pytest.param(
        _cq(queueingStrategy="LIFO"),
        "spec.queueingStrategy",
        "Unsupported value",
        id="unknown queueingStrategy",
    ),
    pytest.param(
        _cq(
            preemption={
                "reclaimWithinCohort": "Never",
                "borrowWithinCohort": {"policy": "LowerPriority"},
            }
        ),
        "spec.preemption.borrowWithinCohort.policy",
        "must be Never",
        id="borrowWithinCohort without reclaimWithinCohort",
    ),
    pytest.param(
        _cq(preemption={"withinClusterQueue": "Always"}),
        "spec.preemption.withinClusterQueue",
        "Unsupported value",
        id="unknown preemption policy",
    ),
    pytest.param(
        _cq(resourceGroups=[_group(["cpu"], ("f", [("cpu", {"nominalQuota": -1})]))]),
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
        "greater than or equal to 0",
        id="negative nominalQuota",
    ),
    pytest.param(
        _cq(resourceGroups=[_group(["cpu"], ("f", [("cpu", {"nominalQuota": "4 cpus"})]))]),
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
        "should match",
        id="malformed quantity",
    ),
    pytest.param(
        _cq(
            resourceGroups=[
                _group([f"r{i}"], (f"f{i}", [(f"r{i}", {"nominalQuota": 1})])) for i in range(17)
            ]
        ),
        "spec.resourceGroups",
        "at most 16 items",
        id="17 resource groups",
    ),
    pytest.param(
        _cq(namespaceSelector={"matchExpressions": [{"key": "a", "operator": "In"}]}),
        "spec.namespaceSelector.matchExpressions[0].values",
        "must be non-empty",
        id="In selector without values",
    ),
    pytest.param(
        _rf(tolerations=[{"operator": "Equal", "value": "x"}]),
        "spec.tolerations[0].operator",
        "must be Exists when key is empty",
        id="toleration with empty key and Equal",
    ),
    pytest.param(
        _rf(
            tolerations=[
                {"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}
            ]
        ),
        "spec.tolerations[0].effect",
        "must be NoExecute",
        id="tolerationSeconds",
    ),
    pytest.param(
        _rf(tolerations=[{"key": "a", "operator": "Exists", "value": "v"}]),
        "spec.tolerations[0].value",
        "must be empty",
        id="Exists with a value",
    ),
    pytest.param(
        _rf(nodeLabels={f"k{i}": "v" for i in range(9)}),
        "spec.nodeLabels",
        "at most 8",
        id="nine nodeLabels",
    ),
    pytest.param(
        _rf(nodeTaints=[{"key": "a", "effect": "Sometimes"}]),
        "spec.nodeTaints[0].effect",
        "Unsupported value",
        id="unknown taint effect",
    ),
    pytest.param(
        _rf(nodeLabels={"pool": "a"}, topologyName="default"),
        "spec.topologyName",
        "does not implement Topology-Aware Scheduling",
        id="topologyName refused (no TAS)",
    ),
    pytest.param(
        _rf(tolerations=[{"key": f"k{i}", "operator": "Exists"} for i in range(9)]),
        "spec.tolerations",
        "at most 8",
        id="nine tolerations",
    ),
    pytest.param(
        {
            "apiVersion": V,
            "kind": "Workload",
            "metadata": {"name": "crdtest-invalid", "namespace": "default"},
            "spec": {
                "podSets": [
                    {
                        "name": "main",
                        "count": 2,
                        "minCount": 3,
                        "template": {"spec": {"containers": [{"name": "c"}]}},
                    }
                ]
            },
        },
        "spec.podSets[0].minCount",
        "less than or equal to count",
        id="Workload minCount above count",
    ),
    pytest.param(
        {"apiVersion": V, "kind": "WorkloadPriorityClass", "metadata": {"name": "crdtest-invalid"}},
        "value",
        "Required value",
        id="WorkloadPriorityClass without value",
    ),
    pytest.param(
        {
            "apiVersion": V,
            "kind": "LocalQueue",
            "metadata": {"name": "crdtest-invalid", "namespace": "default"},
            "spec": {"clusterQueue": "Research_CQ"},
        },
        "spec.clusterQueue",
        "should match",
        id="LocalQueue clusterQueue not DNS-1123",
    ),
    # Issue 14.4: quantities pykueue's reader refuses must not get past the API server.
    *(
        pytest.param(
            _cq(resourceGroups=[_group(["nvidia.com/gpu"],
                                       ("f", [("nvidia.com/gpu", {"nominalQuota": q})]))]),
            field, message, id=f"nominalQuota {q}",
        )
        for q, field, message in (
            ("1e1.5", "nominalQuota", "should match"),
            ("1e100", "nominalQuota", "should match"),
            ("1e1000", "nominalQuota", "should match"),
            ("100E", "must fit in int64", "flavor f resource nvidia.com/gpu"),
            ("9223372036854775808", "must fit in int64", "flavor f resource nvidia.com/gpu"),
            ("8Ei", "must fit in int64", "flavor f resource nvidia.com/gpu"),
        )
    ),
    pytest.param(
        _cq(resourceGroups=[
            _group(["cpu"], ("f", [("cpu", {"nominalQuota": "9223372036854776"})]))]),
        "must fit in int64", "flavor f resource cpu", id="cpu nominalQuota over int64 milli-CPU",
    ),
    pytest.param(
        _cq(cohortName="co", resourceGroups=[_group(
            ["memory"], ("f", [("memory", {"nominalQuota": "1Gi", "borrowingLimit": "8Ei"})]))]),
        "must fit in int64", "flavor f resource memory", id="borrowingLimit over int64",
    ),
    pytest.param(
        _cq(admissionScope={"admissionMode": "Sometimes"}),
        "spec.admissionScope.admissionMode", "Unsupported value",
        id="unknown Admission Fair Sharing mode",
    ),
    pytest.param(
        {"apiVersion": V, "kind": "Cohort", "metadata": {"name": "crdtest-root"}, "spec": {
            "resourceGroups": [_group(["cpu"], ("f", [("cpu", {"nominalQuota": 4,
                                                                "borrowingLimit": 1})]))]}},
        "spec.resourceGroups", "borrowingLimit must be unset when the Cohort has no parentName",
        id="Cohort borrowingLimit without parentName",
    ),
]


@pytest.mark.parametrize(("obj", "field", "message"), INVALID)
def test_invalid_manifests_are_rejected_naming_the_field(
    crds: LabHandle, obj: dict, field: str, message: str
) -> None:
    r = _dry_run(crds, obj)
    assert r.returncode != 0, f"accepted: {r.stdout[:300]}"
    assert field in r.stderr, r.stderr
    assert message in r.stderr, r.stderr


@pytest.fixture
def scratch_ns(crds: LabHandle) -> Iterator[str]:
    ns = f"crdtest-{uuid.uuid4().hex[:6]}"
    crds.create_namespace(ns)
    yield ns
    crds.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_printer_columns_show_cohort_strategy_queue_and_admission(
    crds: LabHandle, scratch_ns: str
) -> None:
    cq_name = f"{scratch_ns}-cq"
    try:
        # the deprecated alias alone still shows in the Cohort column
        crds.apply(json.dumps(_cq(cq_name, cohort="ai-platform")))
        out = crds.kubectl("get", "cq", cq_name).stdout.splitlines()
        assert out[0].split() == [
            "NAME",
            "COHORT",
            "STRATEGY",
            "PENDING",
            "WORKLOADS",
            "ADMITTED",
            "WORKLOADS",
            "AGE",
        ]
        assert out[1].split()[:3] == [cq_name, "ai-platform", "BestEffortFIFO"]

        crds.apply(
            json.dumps(
                {
                    "apiVersion": V,
                    "kind": "LocalQueue",
                    "metadata": {"name": "team-queue", "namespace": scratch_ns},
                    "spec": {"clusterQueue": cq_name},
                }
            )
        )
        out = crds.kubectl("get", "lq", "-n", scratch_ns).stdout.splitlines()
        assert out[0].split()[:2] == ["NAME", "CLUSTERQUEUE"]
        assert out[1].split()[:2] == ["team-queue", cq_name]
        # clusterQueue is immutable
        r = crds.kubectl(
            "patch",
            "lq",
            "team-queue",
            "-n",
            scratch_ns,
            "--type=merge",
            "-p",
            '{"spec":{"clusterQueue":"other"}}',
            check=False,
        )
        assert r.returncode != 0 and "clusterQueue is immutable" in r.stderr

        wl = {
            "apiVersion": V,
            "kind": "Workload",
            "metadata": {"name": "w1", "namespace": scratch_ns},
            "spec": {
                "queueName": "team-queue",
                "podSets": [
                    {
                        "count": 2,
                        "template": {
                            "spec": {
                                "containers": [
                                    {
                                        "name": "c",
                                        "image": "busybox",
                                        "resources": {"requests": {"cpu": "1"}},
                                    }
                                ]
                            }
                        },
                    }
                ],
            },
        }
        crds.apply(json.dumps(wl))
        stored = crds.get("wl", "w1", "-n", scratch_ns)
        assert stored["spec"]["podSets"][0]["name"] == "main"  # defaulted
        assert stored["spec"]["active"] is True
        assert (
            stored["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["image"] == "busybox"
        )  # pod fields pykueue does not describe are kept
        now = "2026-01-01T00:00:00Z"
        conds = [
            {"type": t, "status": "True", "reason": t, "message": "m", "lastTransitionTime": now}
            for t in ("QuotaReserved", "Admitted")
        ]
        # QuotaReserved without status.admission is refused
        r = crds.kubectl(
            "patch",
            "wl",
            "w1",
            "-n",
            scratch_ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"conditions": conds}}),
            check=False,
        )
        assert r.returncode != 0 and "status.admission" in r.stderr
        admission = {
            "clusterQueue": cq_name,
            "podSetAssignments": [
                {"name": "main", "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": "2"}, "count": 2}
            ],
        }
        crds.kubectl(
            "patch",
            "wl",
            "w1",
            "-n",
            scratch_ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"conditions": conds, "admission": admission}}),
        )
        out = crds.kubectl("get", "wl", "-n", scratch_ns).stdout.splitlines()
        assert out[0].split() == ["NAME", "QUEUE", "RESERVED", "IN", "ADMITTED", "FINISHED", "AGE"]
        assert out[1].split()[:4] == ["w1", "team-queue", cq_name, "True"]
        # queueName is immutable while the quota is reserved
        r = crds.kubectl(
            "patch",
            "wl",
            "w1",
            "-n",
            scratch_ns,
            "--type=merge",
            "-p",
            '{"spec":{"queueName":"elsewhere"}}',
            check=False,
        )
        assert r.returncode != 0 and "spec.queueName" in r.stderr
    finally:
        # --wait=false: a pykueue running in the lab holds a used queue with its finalizer.
        crds.kubectl("delete", "cq", cq_name, "--ignore-not-found", "--wait=false", check=False)


@pytest.mark.parametrize(
    ("path", "fragments"),
    [
        (
            "clusterqueue.spec.resourceGroups.flavors.resources",
            [
                "nominalQuota",
                "borrowingLimit",
                "lendingLimit",
                "guaranteed to this ClusterQueue",
                "Only allowed when the ClusterQueue has a cohort",
            ],
        ),
        ("clusterqueue.spec.namespaceSelector", ["Unset: no", "every namespace"]),
        ("clusterqueue.spec.cohort", ["Deprecated alias of cohortName"]),
        ("localqueue.spec.clusterQueue", ["Immutable"]),
        ("workload.spec.podSets", ["count", "template", "minCount"]),
        ("resourceflavor.spec.tolerations", ["operator", "tolerationSeconds"]),
        ("workloadpriorityclass.value", ["Priority of the workloads"]),
    ],
)
def test_kubectl_explain_shows_the_descriptions(
    crds: LabHandle, path: str, fragments: list[str]
) -> None:
    out = " ".join(crds.kubectl("explain", path).stdout.split())
    for fragment in fragments:
        assert fragment in out, out


def test_workload_built_for_a_real_job_is_accepted_and_reads_back(
    crds: LabHandle, scratch_ns: str
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": scratch_ns,
            "labels": {"kueue.x-k8s.io/queue-name": "team-queue"},
        },
        "spec": {
            "parallelism": 2,
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "initContainers": [
                        {
                            "name": "side",
                            "image": "busybox",
                            "restartPolicy": "Always",
                            "resources": {"requests": {"cpu": "300m"}},
                        }
                    ],
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"limits": {"cpu": "1", "memory": "1.5Gi"}},
                        }
                    ],
                }
            },
        },
    }
    # The Job as the API server stores it: defaulted (requests from limits, controller labels...)
    r = crds.kubectl("create", "--dry-run=server", "-f", "-", "-o", "json", input=json.dumps(job))
    served_job = json.loads(r.stdout)
    served_job["metadata"].setdefault("uid", "0000-dry-run")
    wl_obj = workload_object_for_job(served_job)
    r = crds.kubectl(
        "create", "--dry-run=server", "-f", "-", "-o", "json", input=json.dumps(wl_obj), check=False
    )
    assert r.returncode == 0, r.stderr
    stored = json.loads(r.stdout)
    from_job = workload_from_job(served_job)
    back = workload_from_object(stored)
    assert back.pod_sets == from_job.pod_sets
    assert dict(back.pod_sets[0].requests) == {"cpu": 1300, "memory": 3 * 2**29}
    assert back.pod_sets[0].count == 2
