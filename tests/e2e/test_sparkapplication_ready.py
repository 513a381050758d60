"""waitForPodsReady for a SparkApplication, with the real spark-operator (``make operators``).

pykueue runs here with only waitForPodsReady's timeout (``TIMEOUT`` s) and requeue backoff
(``BACKOFF`` s) shortened, as in ``test_pods_ready.py``. Kueue v0.17.1's ``PodsReady`` of a
SparkApplication is its state ``RUNNING``, which the operator writes once the driver pod runs.
The flavor here selects nodes by a label no node has (written into the app-level nodeSelector,
which spark-submit applies itself), so the driver spark-submit makes stays
Pending (state ``SUBMITTED``): after the timeout its Workload is evicted with reason
``PodsReadyTimeout`` and queued again (``requeueState``), the SparkApplication suspended and
its driver deleted by the operator. Skipped when the operator is not built."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import operators_running
from tests.e2e.test_jobset import A100, condition
from tests.e2e.test_pods_ready import timed_out
from tests.e2e.test_sparkapplication import (  # noqa: F401 - spark_crd: the CRDs' fixture
    KIND,
    drivers,
    get_app,
    owned_workload,
    spark_crd,
    spark_namespace,
    sparkapp,
)
from tests.labfixture import ROOT, LabHandle, wait_for

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import scenario  # noqa: E402

pytestmark = pytest.mark.lab
TIMEOUT = 8  # seconds: waitForPodsReady's timeout for the pykueue of this module
BACKOFF = 20  # seconds: the requeue backoff's base (long enough to see it stopped between)
POOL = "lab.pykueue.dev/spark-ready"


@pytest.fixture(scope="module")
def short_timeout(lab: LabHandle, spark_crd: None) -> Iterator[None]:  # noqa: F811
    """The spark-operator, then pykueue with waitForPodsReady's timeout and backoff
    shortened (its enablement left to the default)."""
    with operators_running(lab, "spark-operator"):
        handle = labmod.from_args(str(lab.state), lab.port_base, str(lab.bin_dir))
        labmod.pykueue_down(handle)
        scenario.prepare(handle)
        labmod.pykueue_up(handle, extra_env={
            "PYKUEUE_WAIT_FOR_PODS_READY__TIMEOUT_SECONDS": str(TIMEOUT),
            "PYKUEUE_WAIT_FOR_PODS_READY__REQUEUING_STRATEGY__BACKOFF_BASE_SECONDS":
                str(BACKOFF),
            "PYKUEUE_WAIT_FOR_PODS_READY__REQUEUING_STRATEGY__BACKOFF_MAX_SECONDS":
                str(2 * BACKOFF)})
        try:
            yield
        finally:
            labmod.pykueue_down(handle)


def test_a_sparkapplication_whose_driver_never_runs_is_evicted_after_the_timeout(
        lab: LabHandle, short_timeout: None) -> None:
    flavor = {"nodeLabels": {POOL: "yes"}}
    with spark_namespace(lab, "sparkr", flavor=flavor) as (ns, _):
        # An app-level nodeSelector: pykueue writes the flavor's label there, and the operator
        # passes it to spark-submit itself (a role's fields reach the pod only through the
        # operator's pod webhook, which a moment after its start may miss a new app).
        lab.apply(sparkapp("stuck", ns, 1, nodeSelector=A100))
        pod = wait_for(lambda: (d := drivers(lab, ns, "stuck")) and d[0], 120,
                       "stuck's driver pod created")
        assert pod["spec"]["nodeSelector"] == {**A100, POOL: "yes"}, pod["spec"]
        assert not pod["spec"].get("nodeName")  # no node has the flavor's label
        wl = wait_for(lambda: timed_out(w := owned_workload(lab, ns, KIND, "stuck")) and w,
                      TIMEOUT + 60, "stuck evicted for PodsReadyTimeout")
        assert condition(wl, "PodsReady")["status"] == "False", wl["status"]
        # Stopped whole while it waits out its backoff: suspended, its driver deleted.
        app = wait_for(lambda: (a := get_app(lab, ns, "stuck"))["spec"]["suspend"] is True
                       and a, 30, "stuck suspended")
        assert "nodeSelector" not in app["spec"]["driver"], app["spec"]["driver"]
        wait_for(lambda: not drivers(lab, ns, "stuck"), 60, "stuck's driver pod gone")
        assert (c := condition(owned_workload(lab, ns, KIND, "stuck"), "QuotaReserved")) \
            and c["status"] == "False", c
