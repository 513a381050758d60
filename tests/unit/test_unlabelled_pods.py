"""manageJobsWithoutQueueName and plain Pods (breaker8).

Kueue applies ``manageJobsWithoutQueueName`` (with ``managedJobsNamespaceSelector``) to every
integration, the Pod one included (Kueue docs, "Setup manageJobsWithoutQueueName"; KEP-3589):
an unlabelled Pod in a managed namespace is gated and queued. pykueue's setting covers Jobs
only: a tenant in a managed namespace who wants GPUs outside its quota creates a bare Pod
with the flavor's nodeSelector and tolerations and no queue label, and it runs. On the lab
(default settings, as in Kueue) such a 2-GPU Pod in a namespace with a LocalQueue ran on the
A100 node outside any quota; this test shows that turning the setting on does not gate it."""

from __future__ import annotations

import pytest

from app.config import JobsSettings
from tests.unit.test_webhook import (
    Lookups,
    answer,
    apply_patch,
    decoded_patch,
    make_app,
    post,
    review,
)


def _pod() -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                     "containers": [{"name": "c", "image": "x", "resources": {
                         "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}


@pytest.mark.xfail(strict=True, reason=(
    "breaker8, open: manage_jobs_without_queue_name covers batch Jobs only; an unlabelled plain "
    "Pod in a managed namespace is not gated (Kueue gates it), so it runs outside any quota"))
async def test_manage_jobs_without_queue_name_gates_an_unlabelled_pod() -> None:
    app = make_app(default_queue=Lookups(default_queue=False, managed=True),
                   jobs=JobsSettings(manage_jobs_without_queue_name=True))
    sent = review("CREATE", _pod(), kind={"group": "", "version": "v1", "kind": "Pod"})
    response = answer(await post(app, "/mutate--v1-pod", sent), sent)
    patched = apply_patch(sent["request"]["object"], decoded_patch(response)) \
        if "patch" in response else sent["request"]["object"]
    gates = [g.get("name") for g in patched["spec"].get("schedulingGates") or []]
    assert "kueue.x-k8s.io/admission" in gates
