"""An attacker's pass over the wrapped-replicas webhook of AppWrapper
(``/validate-apps-v1-appwrapper-wrapped``). The tenant is ServiceAccount ``tenant`` with
``edit`` in the AppWrapper's namespace; it owns the AppWrapper and the objects the AppWrapper
controller made, never the Workload. Measured: the GPUs of the wrapped Deployment's pods
bound to a node against the one GPU the AppWrapper was admitted for. Findings still open
are strict xfails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import operators_running
from tests.e2e.test_appwrapper import aw_operator, aw_queue, holding  # noqa: F401
from tests.e2e.test_breaker12_findings import two_teams
from tests.e2e.test_ray import rayjob
from tests.e2e.test_workload_kinds import LONG, TOLERATION
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
QUEUE = "kueue.x-k8s.io/queue-name"
AW_LABEL = "workload.codeflare.dev/appwrapper"


@pytest.fixture(scope="module", autouse=True)
def kuberay(lab: LabHandle) -> Iterator[None]:
    """KubeRay in the lab before pykueue starts (``pykueue_in_lab``, module scope)."""
    with operators_running(lab, "kuberay"):
        yield


def _gpus(pods: list[dict]) -> int:
    """The GPUs ``pods`` request."""
    return sum(int(c["resources"].get("requests", {}).get("nvidia.com/gpu", 0))
               for p in pods for c in p["spec"]["containers"])


def wrapped_deployment(lab: LabHandle, ns: str) -> tuple[str, str]:
    """ServiceAccount ``tenant`` with ``edit`` in ``ns`` and AppWrapper ``dep`` (queue
    ``lq``) wrapping Deployment ``dep-d`` of 1 one-GPU replica; the tenant's ``--as``."""
    rbac = "rbac.authorization.k8s.io/v1"
    lab.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "tenant", "namespace": ns}},
        {"apiVersion": rbac, "kind": "RoleBinding",
         "metadata": {"name": "tenant-edit", "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "edit"},
         "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}]}]}))
    gpu = {"nvidia.com/gpu": "1"}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dep-d"},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "dep"}}, "template": {
               "metadata": {"labels": {"app": "dep"}, **LONG},
               "spec": {"tolerations": [TOLERATION], "containers": [{
                   "name": "c", "image": "busybox",
                   "resources": {"requests": gpu, "limits": gpu}}]}}}}
    lab.apply(json.dumps({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                          "metadata": {"name": "dep", "namespace": ns,
                                       "labels": {QUEUE: "lq"}},
                          "spec": {"suspend": False, "components": [{"template": dep}]}}))
    return ("--as", f"system:serviceaccount:{ns}:tenant")


@pytest.fixture
def wrapped(lab: LabHandle, aw_queue: str) -> Iterator[tuple[str, tuple[str, str]]]:  # noqa: F811
    """AppWrapper ``dep`` wrapping Deployment ``dep-d`` (1 one-GPU replica), admitted for 1
    GPU of its ClusterQueue's 2, its pod Running; the tenant's ``--as`` arguments."""
    ns = aw_queue
    tenant = wrapped_deployment(lab, ns)
    try:
        wait_for(lambda: len([p for p in holding(lab, ns, "dep")
                              if p["status"].get("phase") == "Running"]) == 1,
                 90, "the wrapped Deployment's pod running")
        yield ns, tenant
    finally:
        lab.kubectl("delete", "appwrapper", "dep", "-n", ns, "--wait=false", check=False)
        wait_for(lambda: not lab.get("appwrappers", "-n", ns)["items"]
                 and not lab.get("deployments", "-n", ns)["items"], 60,
                 "the AppWrapper and its Deployment deleted")


def _bound_gpus_stay_one(lab: LabHandle, ns: str) -> None:
    """The Deployment's pods bound to a node hold 1 GPU, read once its controllers have seen
    the tenant's last write (observedGeneration caught up, as many pods as its ReplicaSets
    want) and the scheduler has looked at each pod (bound, or PodScheduled False)."""
    def settled() -> list[dict] | None:
        d = lab.get("deployment", "dep-d", "-n", ns)
        sets = lab.get("replicasets", "-n", ns)["items"]
        if d["status"].get("observedGeneration") != d["metadata"]["generation"] or any(
                (r.get("status") or {}).get("observedGeneration") != r["metadata"]["generation"]
                for r in sets):
            return None
        pods = [p for p in lab.get("pods", "-n", ns, "-l", f"{AW_LABEL}=dep")["items"]
                if not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") in ("Pending", "Running")]
        looked = all(p["spec"].get("nodeName") or any(
            c["type"] == "PodScheduled" and c["status"] == "False"
            for c in p["status"].get("conditions") or []) for p in pods)
        want = sum(int(r["spec"].get("replicas", 0)) for r in sets)
        return pods if looked and len(pods) == want else None
    pods = wait_for(settled, 45, "the Deployment's controllers and the scheduler caught up")
    gpus = _gpus([p for p in pods if p["spec"].get("nodeName")])
    assert gpus == 1, f"{gpus} GPUs bound on an admission of 1"


def test_the_appwrapper_label_cannot_be_dropped_to_scale_a_wrapped_deployment(
        lab: LabHandle, wrapped: tuple[str, tuple[str, str]]) -> None:
    """The object webhook sees only objects labelled ``workload.codeflare.dev/appwrapper``
    (objectSelector, matched against the old or the new object). Before: the tenant removed
    the label in one patch and raised ``spec.replicas`` to 2 in the next, which no webhook
    saw: 2 GPU pods bound on an admission of 1. Now: removing or changing the label of a
    wrapped object is refused."""
    ns, tenant = wrapped
    r = lab.kubectl(*tenant, "label", "deployment", "dep-d", "-n", ns, f"{AW_LABEL}-",
                    check=False)
    if r.returncode == 0:
        lab.kubectl(*tenant, "patch", "deployment", "dep-d", "-n", ns, "--type=merge",
                    "-p", '{"spec": {"replicas": 2}}', check=False)
    else:
        assert "is wrapped by AppWrapper" in r.stderr, r.stderr
    _bound_gpus_stay_one(lab, ns)


def test_a_wrapped_deployments_pods_cannot_ask_for_more_gpus_than_admitted(
        lab: LabHandle, wrapped: tuple[str, tuple[str, str]]) -> None:
    """The webhook compared only ``spec.replicas``. Before: the tenant raised the pod
    template's GPU request from 1 to 2 (replicas unchanged); the Deployment rolled out a pod
    of 2 GPUs on an admission of 1. Now: a change of a wrapped object's pod template is
    refused (the AppWrapper's admission was computed from the template it wraps, which is
    immutable)."""
    ns, tenant = wrapped
    two = {"nvidia.com/gpu": "2"}
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "c", "resources": {"requests": two, "limits": two}}]}}}}
    r = lab.kubectl(*tenant, "patch", "deployment", "dep-d", "-n", ns, "--type=strategic",
                    "-p", json.dumps(patch), check=False)
    if r.returncode != 0:
        assert "is wrapped by AppWrapper" in r.stderr, r.stderr
    _bound_gpus_stay_one(lab, ns)


def test_a_wrapped_deployment_recreated_with_more_replicas_runs_no_more_gpus(
        lab: LabHandle, wrapped: tuple[str, tuple[str, str]]) -> None:
    """The tenant deletes the wrapped Deployment and creates one of the same name, labels
    and spec but 3 replicas, with a controller ownerReference to the AppWrapper (its pods
    then have the AppWrapper as queued ancestor, so nothing gates them). Before: no webhook
    reviewed the create (UPDATE only, selected by the label the tenant may leave out): 3
    one-GPU pods bound on an admission of 1, held for the 45 s watched, the AppWrapper
    controller neither noticing nor resetting. Now: a Deployment or StatefulSet created
    with (or given) an AppWrapper as controller is reviewed (``vappwrapper-wrapped-owned``,
    selected by the ownerReference) and refused beyond the component's podSet."""
    ns, tenant = wrapped
    old = lab.get("deployment", "dep-d", "-n", ns)
    aw = lab.get("appwrapper", "dep", "-n", ns)
    lab.kubectl(*tenant, "delete", "deployment", "dep-d", "-n", ns, "--wait=true")
    r = lab.kubectl(*tenant, "create", "-f", "-", input=json.dumps({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "dep-d", "namespace": ns,
                     "labels": old["metadata"].get("labels") or {},
                     "ownerReferences": [{"apiVersion": "workload.codeflare.dev/v1beta2",
                                          "kind": "AppWrapper", "name": "dep",
                                          "uid": aw["metadata"]["uid"], "controller": True}]},
        "spec": {**old["spec"], "replicas": 3}}), check=False)
    assert r.returncode != 0 and "3 would run pods no quota covers" in r.stderr, r.stderr
    assert not lab.get("deployments", "-n", ns)["items"]


def test_an_appwrapper_cannot_be_made_the_controller_of_a_bigger_deployment(
        lab: LabHandle, wrapped: tuple[str, tuple[str, str]]) -> None:
    """The same forgery in two steps: the tenant creates Deployment ``dep-x`` with no owner
    and no AppWrapper label (no AppWrapper webhook looks at it), then patches in a
    controller ownerReference to the AppWrapper, which wraps no ``dep-x``. Refused: the
    update that adds the reference is reviewed (``vappwrapper-wrapped-owned``, selected by
    the reference) as its create would be. 0 replicas, so no pod runs meanwhile."""
    ns, tenant = wrapped
    old = lab.get("deployment", "dep-d", "-n", ns)
    uid = lab.get("appwrapper", "dep", "-n", ns)["metadata"]["uid"]
    template = {"metadata": {"labels": {"app": "x"}},
                "spec": old["spec"]["template"]["spec"]}
    lab.kubectl(*tenant, "create", "-f", "-", input=json.dumps({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "dep-x", "namespace": ns},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "x"}},
                 "template": template}}))
    try:
        ref = {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
               "name": "dep", "uid": uid, "controller": True}
        r = lab.kubectl(*tenant, "patch", "deployment", "dep-x", "-n", ns, "--type=merge",
                        "-p", json.dumps({"metadata": {"ownerReferences": [ref]}}),
                        check=False)
        assert r.returncode != 0 and "which wraps no Deployment of that name" in r.stderr, \
            r.stderr
        assert not lab.get("deployment", "dep-x", "-n", ns)["metadata"].get("ownerReferences")
    finally:
        lab.kubectl("delete", "deployment", "dep-x", "-n", ns, "--wait=false", check=False)


def test_a_raycluster_forged_under_a_queued_rayjob_runs_no_worker(
        lab: LabHandle, pykueue_in_lab: object) -> None:
    """The tenant's RayJob (1 one-GPU worker) waits in a LocalQueue that does not exist, so
    it is never admitted and KubeRay makes no cluster. The tenant creates a RayCluster of 3
    one-GPU workers (the RayJob's cluster spec) with a controller ownerReference to the
    RayJob: the oldest cluster claiming it, so the extender's rule (``withholds``: a cluster
    that is not its owner's) took it for the RayJob's own. Measured: the GPUs Running in the
    tenant's namespace bound to a node until the reconciler has suspended the forged
    cluster and KubeRay deleted its pods: none (main at the time of writing: 0 too; the
    cluster is stopped before a worker binds, a regression guard for the rule's oldest-
    cluster case)."""
    with two_teams(lab, "b14-rj") as (ns, _ns_b, as_tenant):
        job = json.loads(rayjob("rj", ns, 1))
        job["metadata"]["labels"][QUEUE] = "nowhere"
        lab.kubectl(*as_tenant, "apply", "-f", "-", input=json.dumps(job))
        wait_for(lambda: lab.get("rayjob", "rj", "-n", ns)["spec"].get("suspend") is True,
                 30, "rj suspended by pykueue")
        uid = lab.get("rayjob", "rj", "-n", ns)["metadata"]["uid"]
        spec = job["spec"]["rayClusterSpec"]
        spec["workerGroupSpecs"][0].update(replicas=3, minReplicas=3, maxReplicas=3)
        lab.kubectl(*as_tenant, "create", "-f", "-", input=json.dumps({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "forged", "namespace": ns, "ownerReferences": [
                {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "uid": uid,
                 "controller": True}]},
            "spec": spec}))
        seen = [0]

        def held() -> bool:
            pods = lab.get("pods", "-n", ns, "-l", "ray.io/cluster=forged")["items"]
            seen.append(_gpus([p for p in pods if p["spec"].get("nodeName")]))
            rc = lab.get("raycluster", "forged", "-n", ns)
            return seen[-1] >= 3 or (rc["spec"].get("suspend") is True and not pods)
        try:
            wait_for(held, 90, "3 GPU workers running or the forged cluster stopped")
            assert max(seen) == 0, f"{max(seen)} GPU workers bound with no admission"
        finally:
            print(f"\nforged cluster under a queued RayJob: at most {max(seen)} GPUs bound")
