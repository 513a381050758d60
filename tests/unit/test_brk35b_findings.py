"""brk35b (session 35, second round, against 4a782c4): the Pod webhook's CREATE rule
(``app.controllers.pod_create_check``) under the strict setup. Lab twin (numbers):
``tests/e2e/test_brk35b_findings.py``.

- H1: a pod whose controller ownerReference names an object of a managed kind that no store
  holds (a RayCluster ``ghost`` that does not exist, any uid) is not gated (the Pod webhooks
  take any controller of a managed kind as its owner's) and ``PodCreateCheck.errors``
  allows it ("not under a stored object of a managed kind: other rules' business"), DRA
  claims included; kube-scheduler never asks the extender for a pod without
  ``nvidia.com/gpu`` (lab: 2 devices Running on no admission, not removed in 8 s; with a
  RayCluster of another uid, a PyTorchJob or a JobSet that does not exist the same: 4
  devices within 1 s, deleted by the garbage collector at 5-6 s, running on through the
  pod's ``terminationGracePeriodSeconds``, the tenant's to choose).
"""

from __future__ import annotations

from tests.unit.test_pod_create_check import Stores, _pod


def test_a_dra_pod_under_a_raycluster_that_does_not_exist_is_refused() -> None:
    s = Stores({})
    pod = _pod("g", "gpu", owner=("ray.io/v1", "RayCluster", "ghost", "ghost-uid"))
    assert pod["spec"].get("resourceClaims"), "the pod claims ResourceClaimTemplate one"
    (why,) = s.check.errors(pod) or [""]
    assert "RayCluster t/ghost (uid ghost-uid), which pykueue does not know" in why, why
    # Without devices or GPUs it is other rules' business (its own, pykueue's not).
    assert s.check.errors(_pod("c", "gpu", claim=None, owner=(
        "ray.io/v1", "RayCluster", "ghost", "ghost-uid"))) == []
