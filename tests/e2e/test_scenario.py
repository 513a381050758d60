"""Issue 8 e2e: `make run`'s scenario as a test on the real lab, every step asserted from the
API (hack/scenario.py with check=True), then /metrics parsed with the Prometheus text parser and
its counters checked against what the scenario did. As `make run`, with the training-operator
started before pykueue when it is built (step 7, issue 18). The play is the session's
``seed_run`` (tests/e2e/seed_play.py), which test_dashboard_seed.py looks at too."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.seed_play import SeedRun
from tests.labfixture import ROOT


def _value(metrics: dict, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= ls)


def test_seed_scenario_end_to_end(seed_run: SeedRun) -> None:
    if seed_run.error is not None:
        raise seed_run.error
    outcomes, operators = seed_run.outcomes, seed_run.operators
    text = "\n".join(seed_run.lines)
    # Step 0 showed the partial placement the seed warns of.
    assert outcomes["step0_partial"], text
    # Step 2: the waiting Job started by itself soon after the slot freed.
    assert outcomes["step2_start_delay"] < 5.0, text
    if operators:  # step 7: ddp-wide started by itself once ddp succeeded
        assert outcomes["step7_start_delay"] < 10.0, text

    if seed_run.metrics_error is not None:
        raise seed_run.metrics_error
    m = seed_run.metrics
    assert m is not None
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
