"""`pykueue status` (app/cli/main.py + app/cli/status.py) against a real uvicorn server on a
loopback port (TLS with a generated CA), serving the status API over the known core (Scheduler) of
tests/status_scenario.py with the in-process token table."""

from __future__ import annotations

import json
import re
import ssl
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from app.cli import app as cli
from app.cli.status import eta_cell, summary, usage_bar
from certs.pki import ensure_certs
from tests.pykueue_server import free_port
from tests.status_server import Server


@pytest.fixture
def run(server: Server, certs: Path, tmp_path: Path):
    """Invoke `pykueue status ...` with the server's URL and CA; no ambient token."""

    def invoke(*args: str, token: str | None = "admin-token", env: dict | None = None,
               ca: Path | None = certs / "ca.crt"):
        full = ["status", "--server", server.url, *args]
        if ca is not None:
            full += ["--ca-file", str(ca)]
        if token is not None:
            full += ["--token", token]
        base = {"COLUMNS": "260", "PYKUEUE_TOKEN": None, "PYKUEUE_URL": None,
                "KUBECONFIG": str(tmp_path / "no-kubeconfig")}
        return CliRunner().invoke(cli, full, env=base | (env or {}))

    return invoke


def api(server: Server, certs: Path, path: str, **params) -> dict:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    r = httpx.get(server.url + path, params=params, verify=ctx,
                  headers={"Authorization": "Bearer admin-token"})
    assert r.status_code == 200, r.text
    return r.json()


# ------------------------------------------------------------------------------ tables


def test_wide_cluster_queue_table_with_usage_bars_and_pending(run) -> None:
    r = run("-o", "wide")
    assert r.exit_code == 0, r.output + r.stderr
    out = r.stdout
    for text in ("ClusterQueues", "inference-cq", "research-cq", "solo-cq", "StrictFIFO",
                 "Pending in ClusterQueue research-cq", "Pending in ClusterQueue solo-cq"):
        assert text in out, text
    lines = out.splitlines()
    research = next(ln for ln in lines if "research-cq" in ln and "nvidia.com/gpu" in ln)
    # 6 GPUs used of nominal 4: 4/6 of the bar within nominal, 2/6 borrowed, nothing free.
    assert str(usage_bar(6, 4)) in research
    assert "6/4" in research and "borrowed 2" in research and "borrowingLimit 4" in research
    assert "3 (3 inadmissible)" in research
    inference = next(ln for ln in lines if "inference-cq" in ln and "nvidia.com/gpu" in ln)
    assert str(usage_bar(2, 4)) in inference and "2/4" in inference and "lent 2" in inference
    memory = next(ln for ln in lines if "memory" in ln)
    assert "20Gi/32Gi" in memory and "available 12Gi" in memory
    eval1 = next(ln for ln in lines if "research/eval-1" in ln)
    assert "WaitingForQuota" in eval1 and "3 requested, 0 available" in eval1
    assert eval1.split()[1] == "1"  # next in the ClusterQueue: API position 0, shown as 1
    assert "Pos 1 = next to be admitted (API positionInClusterQueue + 1)" in out
    after = next(ln for ln in lines if "ns/after" in ln)
    assert "waiting for a scheduling cycle" in after


def test_default_view_is_one_line_per_cluster_queue_gpus_first(run) -> None:
    r = run(env={"COLUMNS": "150"})
    assert r.exit_code == 0, r.output + r.stderr
    table = r.stdout.split("Pending in")[0].splitlines()
    for name in ("inference-cq", "research-cq", "solo-cq"):
        assert sum(name in ln for ln in table) == 1, name  # one line, no row per resource
    research = next(ln for ln in table if "research-cq" in ln)
    assert "3 (3 inadmissible)" in research and "gpu a100 6/4 (borrowing 2)" in research
    assert str(usage_bar(6, 4, 8)) in research
    assert "gpu a100 2/4 (lending 2)" in next(ln for ln in table if "inference-cq" in ln)
    solo = next(ln for ln in table if "solo-cq" in ln)
    assert "cpu default-flavor 6/8 · memory default-flavor 20Gi/32Gi" in solo
    assert not any("borrowingLimit" in ln for ln in table)  # limits are in -o wide
    assert "Starts" in r.stdout  # the pending tables have the ETA column


def test_summary_puts_gpus_first_and_eta_cell_says_how_sure() -> None:
    rows = [{"flavor": "default", "resource": "cpu", "used": "2", "nominalQuota": "8"},
            {"flavor": "l4", "resource": "nvidia.com/gpu", "used": "0", "nominalQuota": "4"},
            {"flavor": "a100", "resource": "nvidia.com/gpu", "used": "6", "nominalQuota": "4",
             "borrowed": "2"}]
    line = str(summary(rows))
    assert line == f"{usage_bar(6, 4, 8)} gpu a100 6/4 (borrowing 2), l4 0/4 · cpu default 2/8"
    assert str(eta_cell({"eta": None})) == "-"
    assert str(eta_cell({"eta": {"confidence": "unknown", "waitSeconds": None}})) == "unknown"
    assert str(eta_cell({"eta": {"confidence": "bounded", "waitSeconds": 720}})) == "~12m"
    assert str(eta_cell({"eta": {"confidence": "estimated", "waitSeconds": 5400}})) == \
        "~1h30m est."
    assert str(eta_cell({"eta": {"confidence": "bounded", "waitSeconds": 0}})) == "now"
    # Under a minute is not "now" (a Workload behind a run about to end is not starting).
    assert str(eta_cell({"eta": {"confidence": "estimated", "waitSeconds": 13}})) == "~13s est."
    assert str(eta_cell({"eta": {"confidence": "unknown", "waitSeconds": None,
                                 "basis": "no end known"}})) == "unknown (no end known)"
    # Gott's 50% interval, when the API gives one; "?" when it has no later bound.
    ranged = {"confidence": "estimated", "waitSeconds": 720,
              "range": {"earliestWaitSeconds": 300, "latestWaitSeconds": 2400}}
    assert str(eta_cell({"eta": ranged})) == "~12m (5m-40m) est."
    ranged["range"] = {"earliestWaitSeconds": 40, "latestWaitSeconds": None}
    assert str(eta_cell({"eta": ranged})) == "~12m (40s-?) est."


def test_namespace_view_lists_local_queues_and_their_pending(run) -> None:
    r = run("-n", "research", "-o", "wide", token="research-token")
    assert r.exit_code == 0, r.output + r.stderr
    out = r.stdout
    assert "LocalQueues in namespace research" in out
    lq = next(ln for ln in out.splitlines() if "lq-research" in ln and "research-cq" in ln)
    assert "2 (2 inadmissible)" in lq and "a100" in lq and "6" in lq
    orphan = next(ln for ln in out.splitlines() if "lq-orphan" in ln)
    assert "no: ClusterQueueDoesNotExist" in orphan
    assert "Pending in LocalQueue research/lq-research" in out
    assert "team-b/probe" not in out
    train4 = next(ln for ln in out.splitlines() if "research/train-4" in ln)
    assert train4.split()[1:4] == ["2", "│", "2"]  # API position 1 in research-cq and its LQ


def test_limit_caps_each_pending_table_and_says_how_many_more(run) -> None:
    r = run("--limit", "1")
    assert r.exit_code == 0, r.output + r.stderr
    assert "research/eval-1" in r.stdout and "research/train-4" not in r.stdout
    assert "2 more not shown (use --limit)" in r.stdout


# ------------------------------------------------------------------------------ json


def test_json_output_is_the_apis_json(run, server, certs) -> None:
    r = run("-o", "json")
    assert r.exit_code == 0, r.output + r.stderr
    snap = json.loads(r.stdout)
    assert snap["clusterQueues"] == api(server, certs, "/api/v1/clusterqueues")["items"]
    assert snap["pending"]["research-cq"] == api(
        server, certs, "/api/v1/clusterqueues/research-cq/pending", limit=20)
    r = run("-o", "json", "-n", "research", token="research-token")
    snap = json.loads(r.stdout)
    assert [lq["name"] for lq in snap["localQueues"]] == ["lq-orphan", "lq-research"]
    assert [w["name"] for w in snap["pending"]["lq-research"]["items"]] == ["eval-1", "train-4"]


def test_watch_redraws_until_stopped(run, server) -> None:
    r = run("-o", "json", "--watch", "--interval", "0.1", "--iterations", "3")
    assert r.exit_code == 0, r.output + r.stderr
    docs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert len(docs) == 3 and all("clusterQueues" in d for d in docs)
    r = run("--watch", "--interval", "0.1", "--iterations", "2")
    assert r.exit_code == 0, r.output + r.stderr
    assert "research-cq" in r.stdout


# ------------------------------------------------------------------------------ access and errors


def test_forbidden_namespace_exits_1_with_the_apis_message(run) -> None:
    r = run("-n", "inference", token="research-token")
    assert r.exit_code == 1
    assert "HTTP 403" in r.stderr
    assert 'cannot get resource "localqueues" in API group "kueue.x-k8s.io" in the namespace ' \
           '"inference"' in r.stderr


def test_rejected_token_exits_1(run) -> None:
    r = run(token="wrong-token")
    assert r.exit_code == 1
    assert "HTTP 401" in r.stderr and "invalid bearer token" in r.stderr


def test_no_token_anywhere_exits_2(run) -> None:
    r = run(token=None)
    assert r.exit_code == 2
    assert "no bearer token" in r.stderr


def test_token_from_env(run) -> None:
    r = run("-n", "research", token=None, env={"PYKUEUE_TOKEN": "research-token"})
    assert r.exit_code == 0, r.output + r.stderr


def write_kubeconfig(path: Path, user: dict) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "viewer"}},
                     {"name": "other", "context": {"cluster": "lab", "user": "admin"}}],
        "users": [{"name": "viewer", "user": user},
                  {"name": "admin", "user": {"token": "admin-token"}}],
    }))
    return path


@pytest.mark.parametrize("how", ["token", "tokenFile"])
def test_token_from_kubeconfig_current_context(run, tmp_path: Path, how: str) -> None:
    user: dict = {"token": "research-token"}
    if how == "tokenFile":
        (tmp_path / "tok").write_text("research-token\n")
        user = {"tokenFile": str(tmp_path / "tok")}
    kc = write_kubeconfig(tmp_path / "kubeconfig", user)
    # The current context's user (research viewer) is used: the cluster view is forbidden.
    r = run("--kubeconfig", str(kc), token=None)
    assert r.exit_code == 1 and "HTTP 403" in r.stderr
    r = run("-n", "research", token=None, env={"KUBECONFIG": str(kc)})
    assert r.exit_code == 0, r.output + r.stderr


def test_kubeconfig_with_exec_plugin_asks_for_a_token(run, tmp_path: Path) -> None:
    kc = write_kubeconfig(tmp_path / "kubeconfig", {"exec": {"command": "gke-auth"}})
    r = run("--kubeconfig", str(kc), token=None)
    assert r.exit_code == 2
    assert "has no bearer token" in r.stderr and "kubectl create token" in r.stderr


def test_server_certificate_from_another_ca_is_refused(run, tmp_path: Path) -> None:
    other = tmp_path / "other"
    ensure_certs(other)
    r = run(ca=other / "ca.crt")
    assert r.exit_code == 2
    assert "cannot reach" in r.stderr and "CERTIFICATE_VERIFY_FAILED" in r.stderr


def test_missing_ca_file_exits_2(run, tmp_path: Path) -> None:
    r = run(ca=tmp_path / "absent.crt")
    assert r.exit_code == 2 and "CA file" in r.stderr


def test_nothing_listening_exits_2(run, certs) -> None:
    r = CliRunner().invoke(cli, ["status", "--server", f"https://127.0.0.1:{free_port()}",
                                 "--token", "admin-token", "--ca-file", str(certs / "ca.crt")])
    assert r.exit_code == 2 and "cannot reach" in r.stderr


def test_bad_output_format(run) -> None:
    r = run("-o", "yaml")
    assert r.exit_code == 2 and "must be table, wide or json" in r.output + r.stderr


def test_narrow_terminal_keeps_names_whole_and_shrinks_the_bars(run) -> None:
    """On a 100-column terminal names wrap instead of being cut with an ellipsis."""
    r = run("-o", "wide", env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output + r.stderr
    out = r.stdout
    assert "…" not in out
    bars = re.findall(r"[█▓░]+", out)
    assert bars and all(len(b) == 8 for b in bars), bars  # 8-cell usage bars, not 20


def test_80_column_terminal_stacks_the_queue_columns_and_keeps_headers_whole(run) -> None:
    """Fresh-user check, session 2: at 80 columns the nine-column table cut its headers into
    "Cluste" / "rQueue"; below 150 columns it now has three, the queue's fields stacked."""
    r = run("-o", "wide", env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output + r.stderr
    out = r.stdout
    assert all(len(line) <= 80 for line in out.splitlines()), max(map(len, out.splitlines()))
    for whole in ("ClusterQueue", "Flavor / resource", "Usage (used/nominal)", "research-cq",
                  "Strategy: BestEffortFIFO", "Pending: 3 (3 inadmissible)", "nvidia.com/gpu",
                  "Cohort: ai"):
        assert whole in out, whole
    assert "Cluste " not in out and "…" not in out
    wide = run("-o", "wide", env={"COLUMNS": "200"}).stdout  # one column per field
    assert "Strategy: " not in wide and "│ BestEffortFIFO" in wide


# ------------------------------------------------------------------------------ bars and help


@pytest.mark.parametrize(("used", "nominal", "bar"), [
    pytest.param(0, 0, "░" * 20, id="no quota: empty"),
    pytest.param(0, 4, "░" * 20, id="nothing used"),
    pytest.param(2, 4, "█" * 10 + "░" * 10, id="half of nominal"),
    pytest.param(4, 4, "█" * 20, id="exactly nominal"),
    pytest.param(6, 4, "█" * 13 + "▓" * 7, id="borrowing: scaled to usage"),
    pytest.param(1, 3, "█" * 7 + "░" * 13, id="rounds to the nearest cell"),
])
def test_usage_bar(used: int, nominal: int, bar: str) -> None:
    assert str(usage_bar(used, nominal)) == bar


def test_help_lists_the_commands_and_status_options() -> None:
    r = CliRunner().invoke(cli, ["--help"], env={"COLUMNS": "120"})
    assert r.exit_code == 0
    assert "serve" in r.stdout and "status" in r.stdout
    r = CliRunner().invoke(cli, ["status", "--help"], env={"COLUMNS": "120"})
    for opt in ("--namespace", "--watch", "--output", "--server", "--token", "--ca-file",
                "--kubeconfig", "--limit"):
        assert opt in r.stdout, opt
    assert "--iterations" not in r.stdout


def test_simulate_fair_sharing_reports_shares_against_fair_shares() -> None:
    scenario = Path(__file__).parents[2] / "bench" / "scenarios" / "fair-teams.yaml"
    r = CliRunner().invoke(cli, ["simulate", str(scenario), "--fair-sharing", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["fair_share"]["org/nvidia.com/gpu"]
    assert {q: v["weight"] for q, v in rows.items() if not q.startswith("_")} == {
        "team-a": 1.0, "team-b": 1.0, "team-c": 2.0}
    assert all(abs(v["diff_points"]) <= 5 for q, v in rows.items() if not q.startswith("_"))
    plain = CliRunner().invoke(cli, ["simulate", str(scenario), "--json"])
    assert "fair_share" not in json.loads(plain.output)


# docs/fair-sharing.md, s2b_priority_guard: q0 (1 cpu) and q1 (0) borrow from org, which
# can lend 5 cpu (its child cohort pool's 4 and q0's 1). high (q0, 4 cpu, priority 1) and
# one low (q1, 1 cpu) run; the second low finds room only by LessThanInitialShare.
S2B_STEP = """\
name: s2b-step
flavors: [{name: default}]
cohorts:
  - name: org
    resourceGroups: &zero
      - coveredResources: [cpu]
        flavors: [{name: default, resources: [{name: cpu, nominalQuota: 0}]}]
  - name: pool
    parentName: org
    resourceGroups:
      - coveredResources: [cpu]
        flavors: [{name: default, resources: [{name: cpu, nominalQuota: 4}]}]
clusterQueues:
  - name: q0
    cohort: org
    namespaceSelector: {}
    preemption: {withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}
    resourceGroups:
      - coveredResources: [cpu]
        flavors: [{name: default, resources: [{name: cpu, nominalQuota: 1}]}]
    workloads:
      - {class: high, count: 1, start: 0s, request: {cpu: 4}, runtime: 1h, priority: 1}
  - name: q1
    cohort: org
    namespaceSelector: {}
    preemption: {withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}
    resourceGroups: *zero
    workloads:
      - {class: low, count: 2, interval: 1s, start: 1s, request: {cpu: 1}, runtime: 1h}
"""


def test_simulate_passes_the_s2b_priority_guard_to_the_core(tmp_path: Path) -> None:
    trace = tmp_path / "s2b.yaml"
    trace.write_text(S2B_STEP)

    def evictions(*flags: str) -> dict[str, int]:
        r = CliRunner().invoke(cli, ["simulate", str(trace), "--fair-sharing", "--json", *flags])
        assert r.exit_code == 0, r.output
        return {k: c["evictions"] for k, c in json.loads(r.output)["classes"].items()}

    assert evictions() == {"high": 1, "low": 0}  # Kueue v0.17.1: priority-blind
    assert evictions("--s2b-priority-guard") == {"high": 0, "low": 0}
    r = CliRunner().invoke(cli, ["simulate", str(trace), "--s2b-priority-guard"])
    assert r.exit_code == 2 and "--s2b-priority-guard needs --fair-sharing" in r.output


def test_wide_view_lists_gpus_first_whatever_the_api_order(run) -> None:
    """``-o wide``: a ClusterQueue's rows GPUs first, then cpu and memory, as the default
    view, whatever order the API gives them in (fresh7: cpu and memory came first)."""
    from rich.console import Console

    from app.cli.status import render

    snap = json.loads(run("-o", "json").stdout)
    research = next(q for q in snap["clusterQueues"] if q["name"] == "research-cq")
    solo = next(q for q in snap["clusterQueues"] if q["name"] == "solo-cq")
    research["resources"] = [*solo["resources"], *research["resources"]]  # cpu, memory, gpu
    console = Console(width=260, record=True)
    console.print(render(snap, wide=True))
    lines = console.export_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if "research-cq" in ln)
    rows = lines[start:start + 3]
    assert "nvidia.com/gpu" in rows[0] and " cpu " in rows[1] and "memory" in rows[2], rows


def test_simulate_runs_the_core_under_the_controllers_collector_thresholds() -> None:
    """`pykueue simulate` sets app.gc_policy's thresholds as `pykueue serve` does, so what the
    simulator measures of the core is what the controller pays."""
    import gc

    from app import gc_policy

    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        scenario = Path(__file__).parents[2] / "bench" / "scenarios" / "research-gpus.yaml"
        r = CliRunner().invoke(cli, ["simulate", str(scenario), "--json"])
        assert r.exit_code == 0, r.output
        assert gc.get_threshold() == gc_policy.THRESHOLDS != (700, 10, 10)
        assert gc_policy.apply() == gc_policy.THRESHOLDS
    finally:
        gc.set_threshold(*before)


def test_serve_sets_the_collector_thresholds_before_it_reads_its_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`pykueue serve` applies app.gc_policy first: here it stops at the missing TLS files
    (exit 2, before any listener), with the thresholds already set."""
    import gc

    from app import gc_policy

    monkeypatch.setenv("PYKUEUE_SERVER__CERT_FILE", str(tmp_path / "none.crt"))
    monkeypatch.setenv("PYKUEUE_SERVER__KEY_FILE", str(tmp_path / "none.key"))
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        r = CliRunner().invoke(cli, ["serve"])
        assert r.exit_code == 2 and "TLS file(s) not found" in r.output, r.output
        assert gc.get_threshold() == gc_policy.THRESHOLDS != (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_simulate_passes_sticky_preemptor_first_to_the_core(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    from app.core import scheduling_cycle

    trace = tmp_path / "s2b.yaml"
    trace.write_text(S2B_STEP)
    seen: list[object] = []
    real = scheduling_cycle.Scheduler.__init__

    def spy(self: object, fair: object, *args: object, **kwargs: object) -> None:
        seen.append(fair)
        real(self, fair, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(scheduling_cycle.Scheduler, "__init__", spy)
    for flags, want in (((), False), (("--sticky-preemptor-first",), True)):
        r = CliRunner().invoke(cli, ["simulate", str(trace), "--fair-sharing", "--json", *flags])
        assert r.exit_code == 0, r.output
        assert seen[-1].sticky_preemptor_first is want  # type: ignore[attr-defined]
    r = CliRunner().invoke(cli, ["simulate", str(trace), "--sticky-preemptor-first"])
    assert r.exit_code == 2 and "--sticky-preemptor-first needs --fair-sharing" in r.output


def test_the_default_server_is_the_labs_pykueue_port_when_set(monkeypatch) -> None:
    """README "The lab": with PYKUEUE_PORT exported, `pykueue status` finds the lab's pykueue
    without --server or PYKUEUE_URL."""
    from app.cli.status import default_server

    monkeypatch.delenv("PYKUEUE_SERVER__PORT", raising=False)
    monkeypatch.delenv("PYKUEUE_PORT", raising=False)
    assert default_server() == "https://127.0.0.1:9443"
    monkeypatch.setenv("PYKUEUE_PORT", "19843")
    assert default_server() == "https://127.0.0.1:19843"
