"""Wire model of the batch/v1 Job fields pykueue reads (everything else is kept as written).

Read: ``metadata`` (labels ``kueue.x-k8s.io/queue-name``, ``kueue.x-k8s.io/priority-class``),
``spec.parallelism`` / ``completions`` / ``suspend`` / ``template`` (the pod template: requests,
init containers and sidecars, overhead, nodeSelector, affinity, tolerations,
priorityClassName), ``status`` (conditions Complete / Failed, active, succeeded, failed, ready,
startTime). The Job -> Workload rules live in ``app.core.workload`` and work on the plain JSON.
"""

from __future__ import annotations

from app.models.common import Condition, KubeObject, PodTemplateSpec, WireModel

JOB_API_VERSION = "batch/v1"


class JobSpec(WireModel):
    """batch/v1 JobSpec: pods at once (``parallelism``, default 1), ``completions``,
    ``suspend`` (pykueue's gate), the pod ``template``."""

    parallelism: int | None = None
    completions: int | None = None
    suspend: bool | None = None
    template: PodTemplateSpec
    completion_mode: str | None = None
    backoff_limit: int | None = None
    active_deadline_seconds: int | None = None
    managed_by: str | None = None


class JobCondition(Condition):
    """batch/v1 JobCondition: like ``metav1.Condition`` plus ``lastProbeTime``; ``reason`` and
    ``message`` may be absent."""

    last_probe_time: str | None = None


class JobStatus(WireModel):
    """batch/v1 JobStatus: ``conditions`` (Complete, Failed, Suspended, ...) and pod counters."""

    conditions: list[JobCondition] | None = None
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    ready: int | None = None
    start_time: str | None = None
    completion_time: str | None = None


class Job(KubeObject):
    """batch/v1 Job."""

    api_version: str = JOB_API_VERSION
    kind: str = "Job"
    spec: JobSpec | None = None
    status: JobStatus | None = None
