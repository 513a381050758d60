"""A known admission state for the status API, metrics and CLI tests, and their access table.

Cohort ``ai``: ``inference-cq`` (a100: 4 GPUs) and ``research-cq`` (a100: 4 GPUs,
borrowingLimit 4); ``solo-cq`` (no cohort, StrictFIFO, 8 CPUs and 32Gi). After
``build_cluster()``:

- ``inference/serve-2`` (2 x 1 GPU) admitted in inference-cq, its status write still in
  flight (assumed): reserving 1, admitted 0;
- ``research/train-6`` (6 x 1 GPU) admitted in research-cq, borrowing 2 GPUs of inference's
  unused quota (confirmed): the cohort's 8 GPUs are all in use;
- pending in research-cq, in order: ``research/eval-1`` (3 GPUs, priority 10),
  ``research/train-4`` (4 GPUs, created 1010), ``team-b/probe`` (1 GPU, created 1011): all
  parked (inadmissible), "0 available, limited by cohort";
- ``ns/big`` (6 CPUs, 20Gi) admitted in solo-cq (confirmed); ``ns/next`` (4 CPUs) waits at
  the head (StrictFIFO: not parked) with "4 requested, 2 available"; ``ns/after`` behind it;
- ``research/lost`` waits for LocalQueue ``lq-orphan`` whose ClusterQueue does not exist.
"""

from __future__ import annotations

from dataclasses import replace

from app.api.access import Grant, StaticAccessReviewer, UserInfo
from app.core.decisions import Admit
from app.core.scheduling_cycle import Scheduler
from app.core.spec import LocalQueue
from app.core.types import ClusterQueueName
from tests.builders import Sim, cluster_queue, workload

GROUP = "kueue.x-k8s.io"
CREATED = {
    "research/train-6": 1001.0, "inference/serve-2": 1002.0, "ns/big": 1003.0,
    "research/eval-1": 1009.0, "research/train-4": 1010.0, "team-b/probe": 1011.0,
    "ns/next": 1012.0, "ns/after": 1013.0, "research/lost": 1014.0,
}


def build_cluster() -> Scheduler:
    """The state described in the module doc."""
    sim = Sim(
        cluster_queue("inference-cq").cohort("ai").flavor("a100", gpu=4),
        cluster_queue("research-cq").cohort("ai").flavor("a100", gpu=4, borrowing_limit=4),
        cluster_queue("solo-cq").strict_fifo().flavor("default-flavor", cpu=8, memory="32Gi"),
        namespaces={"ns": {}, "research": {}, "inference": {}, "team-b": {}},
    )
    c = sim.c
    c.add_local_queue(LocalQueue("research", "lq-research", ClusterQueueName("research-cq")))
    c.add_local_queue(LocalQueue("inference", "lq-inference",
                                 ClusterQueueName("inference-cq")))
    c.add_local_queue(LocalQueue("team-b", "lq-b", ClusterQueueName("research-cq")))
    c.add_local_queue(LocalQueue("research", "lq-orphan", ClusterQueueName("missing-cq")))

    def w(key: str):
        return workload(key).created(CREATED[key])

    first = sim.submit(
        w("research/train-6").queue("lq-research").pods(6, gpu=1),
        w("inference/serve-2").queue("lq-inference").pods(2, gpu=1),
        w("ns/big").cq("solo-cq").pods(1, cpu=6, memory="20Gi"),
    )
    admits = {d.workload: d for d in sim.settle() if isinstance(d, Admit)}
    assert set(admits) == {"research/train-6", "inference/serve-2", "ns/big"}, admits
    for wl in first:
        if wl.key != "inference/serve-2":  # serve-2's admission write stays in flight
            c.update_workload(replace(wl, admission=admits[wl.key].admission,
                                      quota_reserved_at=sim.now))
    sim.submit(
        w("research/eval-1").queue("lq-research").priority(10).pods(3, gpu=1),
        w("research/train-4").queue("lq-research").pods(4, gpu=1),
        w("team-b/probe").queue("lq-b").pods(1, gpu=1),
        w("ns/next").cq("solo-cq").pods(1, cpu=4, memory="4Gi"),
        w("ns/after").cq("solo-cq").pods(1, cpu=1),
        w("research/lost").queue("lq-orphan").pods(1, gpu=1),
    )
    sim.settle()
    return c


ADMIN = UserInfo("admin", "uid-admin", ("system:masters",))
RESEARCH_VIEWER = UserInfo("system:serviceaccount:research:viewer", "uid-rv",
                           ("system:serviceaccounts", "system:serviceaccounts:research"))
CQ_VIEWER = UserInfo("cq-viewer", "uid-cq")
PENDING_VIEWER = UserInfo("pending-viewer", "uid-pending")
NOBODY = UserInfo("nobody", "uid-nobody")

TOKENS = {"admin-token": ADMIN, "research-token": RESEARCH_VIEWER,
          "cq-research-token": CQ_VIEWER, "pending-research-token": PENDING_VIEWER,
          "nobody-token": NOBODY}


def reviewer() -> StaticAccessReviewer:
    """admin: everything (with non-resource URLs); research viewer: localqueues in
    ``research``; cq viewer: ClusterQueue ``research-cq`` only; pending viewer: the pending
    Workloads of ``research-cq`` only (Kueue's visibility permission); nobody: nothing."""
    return StaticAccessReviewer(TOKENS, [
        Grant("group:system:masters", ("*",), "*", ("*",), non_resource_urls=("*",)),
        Grant(PENDING_VIEWER.username, ("get",), "visibility.kueue.x-k8s.io",
              ("clusterqueues/pendingworkloads",), names=("research-cq",)),
        Grant(RESEARCH_VIEWER.username, ("get", "list", "watch"), GROUP, ("localqueues",),
              namespace="research"),
        Grant(CQ_VIEWER.username, ("get",), GROUP, ("clusterqueues",), names=("research-cq",)),
    ])
