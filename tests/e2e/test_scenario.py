"""Issue 8 e2e: `make run`'s scenario as a test on the real lab, every step asserted from the
API (hack/scenario.py with check=True), then /metrics parsed with the Prometheus text parser and
its counters checked against what the scenario did. As `make run`, with the training-operator
started before pykueue when it is built (step 7, issue 18)."""

from __future__ import annotations

import ssl
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_operators import operators_running
from tests.labfixture import ROOT, LabHandle

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import operators as ops  # noqa: E402
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


@pytest.fixture(scope="module")
def training_operator(lab: LabHandle) -> Iterator[bool]:
    """The training-operator in the lab before pykueue starts, as `make run` has it (step 7);
    False when it is not built (step 7 is then left out, as `make run` does)."""
    if not ops.OPERATORS["training-operator"].built:
        yield False
        return
    with operators_running(lab, ["training-operator"]) as (started, _):
        yield "training-operator" in started


@pytest.fixture(scope="module")
def pykueue_with_training_operator(training_operator: bool,
                                   pykueue_in_lab: labmod.Lab) -> tuple[labmod.Lab, bool]:
    return pykueue_in_lab, training_operator


def test_seed_scenario_end_to_end(pykueue_with_training_operator: tuple[labmod.Lab, bool]
                                  ) -> None:
    lab, operators = pykueue_with_training_operator
    lines: list[str] = []

    def kubectl(*args: str, input: str | None = None, check: bool = True):
        return labmod.kubectl(lab, *args, input=input, check=check)

    outcomes = scenario.Scenario(kubectl, say=lines.append, check=True, timeout=120).run(
        with_operators=operators)
    text = "\n".join(lines)
    # Step 0 showed the partial placement the seed warns of.
    assert outcomes["step0_partial"], text
    # Step 2: the waiting Job started by itself soon after the slot freed.
    assert outcomes["step2_start_delay"] < 5.0, text
    if operators:  # step 7: ddp-wide started by itself once ddp succeeded
        assert outcomes["step7_start_delay"] < 10.0, text

    m = _metrics(lab)
    # serve-4, serve-4b and the 2 pods of Deployment chat for inference; train-6 twice
    # (before and after its eviction), eval-4a, eval-4b and StatefulSet ring for research,
    # and with the operator the PyTorchJobs ddp and ddp-wide.
    research = 5 + (2 if operators else 0)
    assert _value(m, "kueue_admitted_workloads_total", cluster_queue="inference-cq") == 4
    assert _value(m, "kueue_admitted_workloads_total", cluster_queue="research-cq") == research
    assert _value(m, "kueue_quota_reserved_workloads_total",
                  cluster_queue="research-cq") == research
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
