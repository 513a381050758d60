"""pykueue under its own identity in the lab: `hack/lab.py sa-kubeconfig` applies the
ServiceAccount and RBAC of manifests/rbac and writes a kubeconfig with that ServiceAccount's
token. The API server's own authorizer must then allow exactly what docs/rbac.md says the code
uses (every row, every verb), deny what pykueue never does, and pykueue's client must work
with it: the whole reconciler, as that identity, syncs every informer, leads, and admits a
Job (Workload created, admission and status written, Job started, Event recorded); and
`pykueue serve` under it reviews the status API's bearer tokens (TokenReview and
SubjectAccessReview made with pykueue's token)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from app.config import ClientSettings, LeaderElectionSettings, SchedulingSettings, Settings
from app.kube.client import NODES, KubeClient
from app.kube.errors import Permanent
from app.kube.leader import LeaderElector
from tests.integration.reconciler_support import (
    ManagerThread,
    Pykueue,
    apply,
    is_admitted,
    job_manifest,
    make_certs,
    make_queue,
    unique,
    workload_of,
)
from tests.labfixture import LabHandle, wait_for
from tests.pykueue_server import free_port, trust
from tests.rbactable import NAMESPACE, SERVICE_ACCOUNT, load_table

pytestmark = pytest.mark.lab

USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"

# (verb, group, resource, subresource, namespace or None for all namespaces / cluster scope):
# things pykueue never does, so its identity must not be able to.
DENIED = [
    ("delete", "", "nodes", "", None),
    ("update", "", "nodes", "", None),
    ("create", "", "pods", "", None),
    ("deletecollection", "", "pods", "", None),
    ("get", "", "secrets", "", None),
    ("list", "", "secrets", "", NAMESPACE),
    ("create", "", "namespaces", "", None),
    ("deletecollection", "batch", "jobs", "", None),
    ("create", "batch", "jobs", "", None),
    ("create", "kueue.x-k8s.io", "clusterqueues", "", None),
    ("delete", "kueue.x-k8s.io", "resourceflavors", "", None),
    ("update", "kueue.x-k8s.io", "clusterqueues", "", None),
    ("create", "coordination.k8s.io", "leases", "", "default"),
    ("update", "coordination.k8s.io", "leases", "", "kube-system"),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", None),
    ("impersonate", "", "serviceaccounts", "", None),
]


@pytest.fixture(scope="module")
def sa_kubeconfig(lab: LabHandle) -> Path:
    path = lab.sa_kubeconfig()
    assert path.is_file()
    assert path.stat().st_mode & 0o077 == 0, "the kubeconfig holds a token: mode 0600"
    return path


def as_pykueue(lab: LabHandle, kubeconfig: Path, *args: str,
               input: str | None = None) -> subprocess.CompletedProcess[str]:
    """kubectl with pykueue's ServiceAccount kubeconfig (not the admin one)."""
    return subprocess.run([str(lab.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
                          input=input, text=True, capture_output=True, timeout=60)


def allowed(lab: LabHandle, kubeconfig: Path, verb: str, group: str, resource: str,
            subresource: str = "", namespace: str | None = None) -> bool:
    """A SelfSubjectAccessReview as pykueue: the API server's RBAC authorizer decides. (Used
    rather than `kubectl auth can-i` because it needs no discovery of the resource.)"""
    attrs = {"verb": verb, "group": group, "resource": resource}
    if subresource:
        attrs["subresource"] = subresource
    if namespace:
        attrs["namespace"] = namespace
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": attrs}}
    r = as_pykueue(lab, kubeconfig, "create", "--validate=false", "-o", "json", "-f", "-",
                   input=json.dumps(review))
    assert r.returncode == 0, r.stderr
    return bool(json.loads(r.stdout)["status"].get("allowed"))


def test_the_kubeconfig_authenticates_as_pykueue_service_account(lab, sa_kubeconfig):
    r = as_pykueue(lab, sa_kubeconfig, "auth", "whoami", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"]["userInfo"]["username"] == USER


@pytest.mark.parametrize("args, answer", [
    (("update", "jobs.batch", "--all-namespaces"), "yes"),
    (("create", "leases.coordination.k8s.io", "-n", NAMESPACE), "yes"),
    (("delete", "nodes"), "no"),
    (("create", "leases.coordination.k8s.io", "-n", "default"), "no"),
], ids=["update jobs: yes", "create leases in pykueue-system: yes", "delete nodes: no",
        "create leases in default: no"])
def test_kubectl_auth_can_i_with_the_service_account(lab, sa_kubeconfig, args, answer):
    r = as_pykueue(lab, sa_kubeconfig, "auth", "can-i", *args)
    assert r.stdout.strip() == answer, (r.stdout, r.stderr)


@pytest.mark.parametrize("row", load_table(), ids=lambda r: r.id)
def test_every_permission_in_the_table_is_allowed_by_the_api_server(lab, sa_kubeconfig, row):
    resource, _, sub = row.resource.partition("/")
    namespace = None if row.scope == "cluster" else row.scope
    for verb in row.verbs:
        assert allowed(lab, sa_kubeconfig, verb, row.group, resource, sub, namespace), (
            f"{USER} may not {verb} {row.resource} ({row.scope}), but {row.path} needs it")
        if namespace:
            assert not allowed(lab, sa_kubeconfig, verb, row.group, resource, sub, "default"), (
                f"{verb} {row.resource} must be limited to {namespace}")


@pytest.mark.parametrize("verb, group, resource, sub, namespace", DENIED,
                         ids=[f"{v} {g or 'core'}/{r}{' in ' + n if n else ''}"
                              for v, g, r, _, n in DENIED])
def test_what_pykueue_never_does_is_denied(lab, sa_kubeconfig, verb, group, resource, sub,
                                           namespace):
    assert not allowed(lab, sa_kubeconfig, verb, group, resource, sub, namespace)


async def test_leader_election_works_under_the_service_account(lab, sa_kubeconfig):
    """pykueue's own client and LeaderElector, authenticated by the token: the Lease in
    pykueue-system is created and held, then released on shutdown."""
    client = await KubeClient.from_settings(ClientSettings(kubeconfig=sa_kubeconfig))
    name = f"rbac-test-{uuid.uuid4().hex[:8]}"
    settings = LeaderElectionSettings(enabled=True, namespace=NAMESPACE, lease_name=name,
                                      lease_duration_seconds=4, renew_deadline_seconds=3,
                                      retry_period_seconds=1)
    elector = LeaderElector(client, settings, identity="rbac-test")
    task = asyncio.create_task(elector.run())
    try:
        await asyncio.wait_for(elector.leading.wait(), timeout=30)
        lease = lab.get("lease", name, "-n", NAMESPACE)
        assert lease["spec"]["holderIdentity"] == "rbac-test"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await elector.release()
        await client.close()
    wait_for(lambda: lab.get("lease", name, "-n", NAMESPACE)["spec"].get("holderIdentity", "")
             == "", 10, "the lease released")
    lab.kubectl("delete", "lease", name, "-n", NAMESPACE)


async def test_a_forbidden_write_is_a_permanent_403(lab, sa_kubeconfig):
    client = await KubeClient.from_settings(ClientSettings(kubeconfig=sa_kubeconfig))
    try:
        with pytest.raises(Permanent) as err:
            await client.delete(NODES, "cpu-0")
        assert err.value.status == 403
    finally:
        await client.close()
    assert lab.get("node", "cpu-0")["metadata"]["name"] == "cpu-0"


def test_the_reconciler_admits_a_job_under_the_service_account(lab, sa_kubeconfig):
    """Every write of one admission is made with pykueue's own token: a missing permission
    leaves an informer unsynced or a write failing, and the Job never starts. (The reconciler
    runs on the shared lab for a few seconds, with its own ClusterQueue and namespace.)"""
    ns, cq, lease = unique("sa"), unique("sa-cq"), unique("sa-lease")
    lab.create_namespace(ns)
    make_queue(lab, cq, (ns,), cpu="2")
    settings = Settings(
        client=ClientSettings(kubeconfig=sa_kubeconfig),
        scheduling=SchedulingSettings(status_flush_seconds=0.2),
        leader_election=LeaderElectionSettings(enabled=True, namespace=NAMESPACE,
                                               lease_name=lease,
                                               lease_duration_seconds=4,
                                               renew_deadline_seconds=3,
                                               retry_period_seconds=1),
    )
    mt = ManagerThread(settings).start(ready_timeout=60)
    try:
        informers = mt.m.ctx.informers.informers

        def forbidden() -> dict[str, str]:
            return {k: str(i.last_error) for k, i in informers.items()
                    if i.last_error is not None and i.last_error.status == 403}

        assert not forbidden()
        wait_for(lambda: mt.m.is_leader, 30, "leadership under the ServiceAccount")
        apply(lab, job_manifest("j", ns, "lq", cpu="1", duration="60s"))
        wait_for(lambda: is_admitted(workload_of(lab, ns, "j")), 30, "the Workload admitted")
        wait_for(lambda: lab.get("job", "j", "-n", ns)["spec"].get("suspend") is False, 30,
                 "the Job started")
        wait_for(lambda: (lab.get("clusterqueues.kueue.x-k8s.io", cq).get("status") or {})
                 .get("admittedWorkloads") == 1, 30, "ClusterQueue status written")
        wait_for(lambda: any(e.get("source", {}).get("component") == "pykueue"
                             for e in lab.get("events", "-n", ns)["items"]), 30,
                 "an Event from pykueue")
        assert not forbidden()
    finally:
        mt.stop()
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "clusterqueues.kueue.x-k8s.io", cq, "--wait=false", check=False)
        lab.kubectl("delete", "lease", lease, "-n", NAMESPACE, check=False)


def test_pykueue_serve_reviews_status_api_tokens_under_the_service_account(
        lab, sa_kubeconfig, tmp_path):
    """The Deployment's path: `pykueue serve` with leader election, its client on the
    ServiceAccount token. A caller allowed to get clusterqueues gets 200, one who is not gets
    403, a bad token 401; without create on tokenreviews / subjectaccessreviews each of these
    would be a 503 ("cannot check access now")."""
    ns, reader = unique("sa-api"), unique("sa-reader")
    lab.create_namespace(ns)
    lab.kubectl("create", "serviceaccount", "reader", "-n", ns)
    lab.kubectl("create", "clusterrole", reader, "--verb=get",
                "--resource=clusterqueues.kueue.x-k8s.io")
    lab.kubectl("create", "clusterrolebinding", reader, f"--clusterrole={reader}",
                f"--serviceaccount={ns}:reader")
    certs = make_certs(tmp_path / "certs")
    lease = unique("sa-serve")
    server = Pykueue(lab, certs, free_port(), leader_election=True, lease_name=lease,
                     log=tmp_path / "pykueue.log",
                     extra_env={"PYKUEUE_CLIENT__KUBECONFIG": str(sa_kubeconfig)}).start()
    try:
        server.wait_ready(60)
        url = f"https://127.0.0.1:{server.port}/api/v1/clusterqueues"

        def status_with(token: str) -> int:
            return httpx.get(url, headers={"Authorization": f"Bearer {token}"},
                             verify=trust(certs), timeout=10).status_code

        def token_of(name: str) -> str:
            return lab.kubectl("create", "token", name, "-n", ns).stdout.strip()

        assert status_with(token_of("reader")) == 200, (tmp_path / "pykueue.log").read_text()
        assert status_with(token_of("default")) == 403
        assert status_with("not-a-token") == 401
        assert "403 Forbidden" not in (tmp_path / "pykueue.log").read_text()
    finally:
        server.stop()
        lab.kubectl("delete", "clusterrolebinding,clusterrole", reader, check=False)
        lab.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        lab.kubectl("delete", "lease", lease, "-n", NAMESPACE, check=False)
