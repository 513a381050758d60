"""Issue 8 e2e: `make run`'s scenario as a test on the real lab, every step asserted from the
API (hack/scenario.py with check=True), then /metrics parsed with the Prometheus text parser and
its counters checked against what the scenario did."""

from __future__ import annotations

import ssl
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.labfixture import ROOT

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import scenario  # noqa: E402


def _metrics(lab: labmod.Lab) -> dict[tuple[str, frozenset], float]:
    """The scrape, as Prometheus would: with a token allowed to get /metrics (issue 14)."""
    ctx = ssl.create_default_context(cafile=str(ROOT / "certs" / "out" / "ca.crt"))
    url = f"https://127.0.0.1:{labmod.PYKUEUE_PORT}/metrics"
    req = urllib.request.Request(  # noqa: S310 - https to the lab's pykueue
        url, headers={"Authorization": f"Bearer {scenario.viewer_token(lab)}"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as r:  # noqa: S310
        text = r.read().decode()
    out: dict[tuple[str, frozenset], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _value(metrics: dict, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= ls)


def test_seed_scenario_end_to_end(pykueue_in_lab: labmod.Lab) -> None:
    lab = pykueue_in_lab
    lines: list[str] = []

    def kubectl(*args: str, input: str | None = None, check: bool = True):
        return labmod.kubectl(lab, *args, input=input, check=check)

    outcomes = scenario.Scenario(kubectl, say=lines.append, check=True, timeout=120).run()
    text = "\n".join(lines)
    # Step 0 showed the partial placement the seed warns of.
    assert outcomes["step0_partial"], text
    # Step 2: the waiting Job started by itself soon after the slot freed.
    assert outcomes["step2_start_delay"] < 5.0, text

    m = _metrics(lab)
    # serve-4, serve-4b and the 2 pods of Deployment chat for inference; train-6 twice
    # (before and after its eviction), eval-4a, eval-4b and StatefulSet ring for research.
    assert _value(m, "kueue_admitted_workloads_total", cluster_queue="inference-cq") == 4
    assert _value(m, "kueue_admitted_workloads_total", cluster_queue="research-cq") == 5
    assert _value(m, "kueue_quota_reserved_workloads_total", cluster_queue="research-cq") == 5
    assert _value(m, "kueue_evicted_workloads_total", cluster_queue="research-cq",
                  reason="Preempted") == 1
    assert _value(m, "kueue_preempted_workloads_total", preempting_cluster_queue="inference-cq",
                  reason="InCohortReclamation") == 1
    # The queues end empty.
    for cq in ("research-cq", "inference-cq"):
        assert _value(m, "kueue_admitted_active_workloads", cluster_queue=cq) == 0
        assert _value(m, "kueue_pending_workloads", cluster_queue=cq) == 0


def test_readme_names_make_run_and_make_test() -> None:
    readme = Path(ROOT / "README.md").read_text()
    assert "    make run\n" in readme and "    make test\n" in readme
