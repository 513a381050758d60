"""Least privilege, checked against the code: every rule of pykueue's ClusterRole and Role is
justified by a row of the table in docs/rbac.md, every row names a code path that really
makes that API call (so the table cannot rot), and nothing is a wildcard, cluster-admin or a
privilege-escalation verb. Reads the YAML under manifests/ directly (no cluster, no kubectl)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import yaml

from tests.rbactable import HEADER, NAMESPACE, SERVICE_ACCOUNT, Row, load_table

ROOT = Path(__file__).resolve().parents[2]
RBAC_KINDS = ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")


USERS_LABEL = "pykueue.dev/role-for"


@functools.cache
def all_rbac_objects() -> tuple[dict, ...]:
    """Every RBAC object in any YAML file under manifests/ (so none can hide elsewhere)."""
    out = []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for f in sorted((ROOT / "manifests").rglob("*.yaml")):
        for doc in yaml.load_all(f.read_text(), Loader=loader):  # noqa: S506 - a safe loader
            if isinstance(doc, dict) and doc.get("kind") in RBAC_KINDS:
                out.append({**doc, "_file": str(f.relative_to(ROOT))})
    return tuple(out)


def _for_users(obj: dict) -> bool:
    return (obj["metadata"].get("labels") or {}).get(USERS_LABEL) == "users"


def rbac_objects() -> tuple[dict, ...]:
    """pykueue's own RBAC objects: all but the roles for others (label ``pykueue.dev/role-for``:
    its users, user_roles.yaml; a MultiKueue manager on a worker, multikueue_worker_role.yaml)."""
    return tuple(o for o in all_rbac_objects()
                 if not (o["metadata"].get("labels") or {}).get(USERS_LABEL))


def user_roles() -> dict[str, list[dict]]:
    """The ClusterRoles for pykueue's users, by name: their rules."""
    return {o["metadata"]["name"]: o["rules"] for o in all_rbac_objects() if _for_users(o)}


def granted() -> set[tuple[str, str, str, str]]:
    """(scope, group, resource, verb) granted by pykueue's roles."""
    out = set()
    for obj in rbac_objects():
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        scope = "cluster" if obj["kind"] == "ClusterRole" else obj["metadata"]["namespace"]
        for rule in obj.get("rules") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        out.add((scope, group, resource, verb))
    return out


def needed() -> set[tuple[str, str, str, str]]:
    return {(r.scope, r.group, r.resource, v) for r in load_table() for v in r.verbs}


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


# ---------------------------------------------------------------------------- the table itself


def test_the_table_parses_and_is_not_empty():
    rows = load_table()
    assert len(rows) >= 10, rows
    for r in rows:
        assert r.verbs and r.calls and r.resource, r
        assert r.scope in ("cluster", NAMESPACE), r


def test_the_table_parser_reads_a_known_row():
    text = ("| " + " | ".join(HEADER) + " |\n|---|---|---|---|---|---|\n"
            "| cluster | batch | jobs | patch, update | app/x.py | `client.patch(JOBS` |\n"
            "| ns | core | events | create | `app/y.py` | `post(res` + `post(EVENTS` |\n"
            "\n| not | the | table | at | all | x |\n")
    assert load_table(text) == [
        Row("cluster", "batch", "jobs", ("patch", "update"), "app/x.py", ("client.patch(JOBS",)),
        Row("ns", "", "events", ("create",), "app/y.py", ("post(res", "post(EVENTS")),
    ]


@pytest.mark.parametrize("row", load_table(), ids=lambda r: r.id)
def test_each_row_names_a_code_path_that_makes_the_call(row):
    path = ROOT / row.path
    assert path.is_file(), f"{row.path} does not exist (docs/rbac.md is stale)"
    code = _squash(path.read_text())
    for call in row.calls:
        assert _squash(call) in code, (
            f"{row.path} no longer contains `{call}`: update docs/rbac.md and the roles")


# ---------------------------------------------------------------------------- roles vs table


def test_every_granted_permission_is_used_by_a_code_path():
    unused = granted() - needed()
    assert not unused, ("granted but no code path in docs/rbac.md needs it: "
                        + ", ".join(f"{v} {g or 'core'}/{r} ({s})"
                                    for s, g, r, v in sorted(unused)))


def test_every_permission_the_code_needs_is_granted():
    missing = needed() - granted()
    assert not missing, ("docs/rbac.md lists a call the roles do not allow: "
                         + ", ".join(f"{v} {g or 'core'}/{r} ({s})"
                                     for s, g, r, v in sorted(missing)))


@pytest.mark.parametrize("field", ["apiGroups", "resources", "verbs", "resourceNames",
                                   "nonResourceURLs"])
def test_no_wildcard(field):
    for obj in all_rbac_objects():
        for rule in obj.get("rules") or []:
            values = rule.get(field) or []
            assert not any("*" in v for v in values), f"{obj['_file']}: wildcard in {field}"


def test_no_non_resource_urls_and_no_aggregation():
    for obj in rbac_objects():
        assert "aggregationRule" not in obj, obj["_file"]
        for rule in obj.get("rules") or []:
            assert not rule.get("nonResourceURLs"), obj["_file"]


@pytest.mark.parametrize("verb", ["escalate", "bind", "impersonate", "deletecollection"])
def test_no_escalation_or_bulk_verbs(verb):
    assert not [g for g in granted() if g[3] == verb]


@pytest.mark.parametrize("resource", ["secrets", "configmaps", "serviceaccounts/token",
                                      "clusterroles", "roles", "clusterrolebindings",
                                      "rolebindings", "pods/exec"])
def test_sensitive_resources_are_not_granted(resource):
    # MultiKueue's kubeconfig Secrets: read one by name, in pykueue's namespace only.
    allowed = {(NAMESPACE, "", "secrets", "get")}
    assert not [g for g in granted() if g[2] == resource and g not in allowed]


# The one built-in role pykueue is bound to: get/list/watch of the ConfigMap
# kube-system/extension-apiserver-authentication only (kube-apiserver's request-header CA, which
# the visibility API needs as every aggregated API server; Kueue binds the same).
AUTH_READER = {"kind": "RoleBinding", "namespace": "kube-system",
               "role": ("Role", "extension-apiserver-authentication-reader")}


def _auth_reader(b: dict) -> bool:
    return (b["kind"] == AUTH_READER["kind"]
            and b["metadata"]["namespace"] == AUTH_READER["namespace"]
            and (b["roleRef"]["kind"], b["roleRef"]["name"]) == AUTH_READER["role"])


def test_the_extension_apiserver_authentication_reader_binding():
    (b,) = [o for o in rbac_objects() if o["kind"].endswith("Binding") and _auth_reader(o)]
    assert b["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                              "namespace": NAMESPACE}]


def test_bindings_bind_only_pykueue_roles_to_pykueue_service_account():
    bindings = [o for o in rbac_objects() if o["kind"].endswith("Binding")
                and not _auth_reader(o)]
    roles = {(o["kind"], o["metadata"]["name"]) for o in rbac_objects()
             if o["kind"] in ("ClusterRole", "Role")}
    assert {b["kind"] for b in bindings} == {"ClusterRoleBinding", "RoleBinding"}
    for b in bindings:
        ref = b["roleRef"]
        assert ref["name"] not in ("cluster-admin", "admin", "edit"), b["_file"]
        assert (ref["kind"], ref["name"]) in roles, f"{b['_file']}: binds a role not ours"
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                                  "namespace": NAMESPACE}], b["_file"]
        if b["kind"] == "RoleBinding":
            assert b["metadata"]["namespace"] == NAMESPACE
            assert ref["kind"] == "Role", "a RoleBinding to a ClusterRole would widen it"


def test_leases_only_in_pykueue_namespace():
    leases = {g for g in granted() if g[2] == "leases"}
    assert leases, "leader election needs leases"
    assert {s for s, *_ in leases} == {NAMESPACE}


def test_service_account_identity_matches_what_the_webhook_trusts():
    from app.config import WebhookSettings

    assert (f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
            in WebhookSettings().controller_usernames)


# ---------------------------------------------------------------------------- roles for users


def _allows(rules: list[dict], access) -> bool:
    """RBAC rule matching of an ``app.api.access.ResourceAccess`` (no wildcards: tested)."""
    for rule in rules:
        if access.verb not in rule.get("verbs", []):
            continue
        if access.path is not None:
            if access.path in rule.get("nonResourceURLs", []):
                return True
        elif (access.group in rule.get("apiGroups", [])
              and access.rbac_resource in rule.get("resources", [])):
            return True
    return False


def test_user_roles_allow_exactly_what_the_status_api_and_metrics_ask():
    """Each role grants the SubjectAccessReview its endpoints make (app/api/access.py), the
    ClusterQueue viewer the pending list only through Kueue's visibility permission."""
    from app.api import access as a

    roles = user_roles()
    assert set(roles) == {"pykueue-clusterqueue-viewer", "pykueue-localqueue-viewer",
                          "pykueue-metrics-reader", "pykueue-pending-workloads-cq-viewer",
                          "pykueue-pending-workloads-lq-viewer"}
    cqp, lqp = (roles["pykueue-pending-workloads-cq-viewer"],
                roles["pykueue-pending-workloads-lq-viewer"])
    # Kueue's visibility API (app/api/visibility.py): exactly one subresource each.
    assert _allows(cqp, a.pending_workloads_access("x"))
    assert not _allows(cqp, a.local_queue_pending_workloads_access("ns", "x"))
    assert _allows(lqp, a.local_queue_pending_workloads_access("ns", "x"))
    assert not _allows(lqp, a.pending_workloads_access("x"))
    assert not _allows(lqp, a.local_queue_access("ns"))
    assert not _allows(cqp, a.cluster_queue_access())
    cq, lq, metrics = (roles["pykueue-clusterqueue-viewer"], roles["pykueue-localqueue-viewer"],
                       roles["pykueue-metrics-reader"])
    assert _allows(cq, a.cluster_queue_access()) and _allows(cq, a.cluster_queue_access("x"))
    assert _allows(cq, a.cohort_access()) and _allows(cq, a.cohort_access("x"))
    assert not _allows(lq, a.cohort_access())
    assert _allows(cq, a.pending_workloads_access("x"))
    assert not _allows(lq, a.pending_workloads_access("x"))
    assert not _allows(metrics, a.pending_workloads_access("x"))
    assert _allows(lq, a.local_queue_access("ns")) and not _allows(cq, a.local_queue_access("ns"))
    assert _allows(metrics, a.metrics_access()) and not _allows(cq, a.metrics_access())
    assert not _allows(cq, a.ResourceAccess("get", "kueue.x-k8s.io", "workloads"))


def test_user_roles_are_read_only_and_not_bound_by_the_manifests():
    for name, rules in user_roles().items():
        for rule in rules:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, name
    refs = {o["roleRef"]["name"] for o in all_rbac_objects() if o["kind"].endswith("Binding")}
    assert not refs & set(user_roles())


def test_the_lab_status_viewer_may_read_everything_pykueue_status_shows():
    """hack/lab/status-viewer.yaml (the token `make run` prints for `pykueue status` and the
    e2e scrape) grants every SubjectAccessReview of the ClusterQueue view: the queues, their
    pending lists, the cohort tree (it lacked ``cohorts``, so `pykueue status` showed no
    tree in the lab), LocalQueues and /metrics."""
    from app.api import access as a

    docs = [d for d in yaml.safe_load_all((ROOT / "hack" / "lab" / "status-viewer.yaml")
                                          .read_text()) if d]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    rules = role["rules"]
    for access in (a.cluster_queue_access(), a.cluster_queue_access("x"), a.cohort_access(),
                   a.cohort_access("x"), a.pending_workloads_access("x"),
                   a.local_queue_access("ns"), a.local_queue_access("ns", "x"),
                   a.metrics_access()):
        assert _allows(rules, access), access


def test_the_multikueue_worker_role_allows_what_a_manager_does_on_a_worker():
    """manifests/rbac/multikueue_worker_role.yaml, for the identity of a manager's kubeconfig
    on a worker: the Workload copies (get, create, delete; list: the probe and the garbage
    collection) and the jobs of every kind with a MultiKueue adapter (get, create, delete:
    app/controllers/multikueue.py ``_read_remotes``, ``create``, ``_delete_remote``),
    nothing else; not bound by the manifests."""
    from app.core.multikueue import ADAPTERS

    (role,) = [o for o in all_rbac_objects() if o["kind"] == "ClusterRole"
               and o["metadata"]["name"] == "pykueue-multikueue-worker"]
    assert role["metadata"]["labels"] == {USERS_LABEL: "multikueue-manager"}
    allowed = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    want = {("kueue.x-k8s.io", "workloads", v) for v in ("get", "list", "create", "delete")}
    want |= {(a.group, a.plural, v) for a in ADAPTERS
             for v in ("get", "create", "delete")}
    assert allowed == want
    refs = {o["roleRef"]["name"] for o in all_rbac_objects() if o["kind"].endswith("Binding")}
    assert "pykueue-multikueue-worker" not in refs
