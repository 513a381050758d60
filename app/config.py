"""Typed settings for `pykueue serve` (pydantic-settings), grouped as in design.md.

Every value can be set from the environment with the prefix ``PYKUEUE_`` and ``__`` between
group and field, e.g. ``PYKUEUE_SERVER__PORT=9443`` or ``PYKUEUE_CLIENT__QPS=50``.
No module globals: ``create_app(settings)`` receives one ``Settings`` instance.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.core.spec import FairSharing, FairSharingStrategy
from app.wire.queues import label_selector


class ServerSettings(BaseModel):
    """HTTPS listener shared by the webhook, the extender, the status API and metrics."""

    host: str = "127.0.0.1"
    port: int = Field(9443, ge=1, le=65535)
    cert_file: Path = Path("certs/out/tls.crt")
    key_file: Path = Path("certs/out/tls.key")
    ca_file: Path = Path("certs/out/ca.crt")
    # Request bodies above this many bytes get HTTP 413 (the API server sends at most ~3 MiB).
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    # Slow clients (issue 14 item 6; app/serving.py): request headers must be complete this
    # many seconds after the connection (or the request's first byte), the body this many
    # seconds after the headers (else 408), idle kept-alive connections close after
    # keep_alive_seconds; past limit_concurrency connections or requests uvicorn answers 503.
    # kube-apiserver gives a webhook at most 30 s and kube-scheduler an extender httpTimeout
    # (2 s in manifests/scheduler), so no honest caller needs more.
    header_timeout_seconds: float = Field(10.0, gt=0)
    body_timeout_seconds: float = Field(10.0, gt=0)
    keep_alive_seconds: int = Field(30, ge=1)
    limit_concurrency: int = Field(256, ge=1)
    # CA that signs the client certificates of pykueue's callers (kube-scheduler, optionally
    # kube-apiserver). When set, the server asks for a client certificate and the scheduler
    # extender answers only a verified one named in ExtenderSettings.client_names
    # (docs/security.md). None: no client certificates; the extender is open to whoever can
    # reach the port (the NetworkPolicy in manifests/manager is then the only fence).
    client_ca_file: Path | None = None
    # /docs, /redoc and /openapi.json: off unless enabled (they describe every endpoint).
    openapi: bool = False
    # /metrics needs a bearer token allowed to `get` the non-resource URL /metrics (a
    # TokenReview and a SubjectAccessReview, as Kueue's metrics endpoint does). False: open.
    metrics_auth: bool = True


class WebhookSettings(BaseModel):
    """The admission webhooks. The queue label is Kueue's ``kueue.x-k8s.io/queue-name``, fixed
    (the webhook configurations' objectSelectors, the informers and the extender read it), so
    an old ``queue_name_label`` setting is refused rather than half applied."""

    model_config = ConfigDict(extra="forbid")

    # Usernames allowed to flip spec.suspend to false on a managed Job (pykueue's own identity).
    controller_usernames: list[str] = Field(
        default_factory=lambda: ["system:serviceaccount:pykueue-system:pykueue"]
    )


class ExtenderSettings(BaseModel):
    """kube-scheduler extender."""

    gpu_resource: str = "nvidia.com/gpu"
    # With ServerSettings.client_ca_file set: the client-certificate common names the extender
    # answers (kube-scheduler's own identity by default); others get 403.
    client_names: list[str] = Field(default_factory=lambda: ["system:kube-scheduler"])


class SchedulingSettings(BaseModel):
    """Scheduling loop and reconciler behaviour."""

    inject_node_selector: bool = True
    status_flush_seconds: float = Field(0.3, gt=0)
    requeue_backoff_seconds: float = Field(1.0, gt=0)
    requeue_backoff_max_seconds: float = Field(30.0, gt=0)
    # The loop runs a cycle when woken by an event and at least this often (seconds).
    cycle_interval_seconds: float = Field(1.0, gt=0)
    # Concurrent Job/Workload reconcilers (the Job controller's workers).
    job_workers: int = Field(4, ge=1)
    # Informers re-open their watch after about this long (seconds; +0-50% jitter).
    watch_timeout_seconds: int = Field(300, ge=5)
    # ETA of pending Workloads (app/core/eta.py): a cohort is recomputed at most this often
    # (seconds), each run stops after eta_budget_ms (the rest is "unknown"); the pending
    # messages' "position N, expected start in ~T" is refreshed every eta_message_seconds and
    # written only when its rounded text changed. eta_enabled=False drops all three.
    eta_enabled: bool = True
    eta_min_interval_seconds: float = Field(5.0, ge=0)
    eta_budget_ms: float = Field(50.0, gt=0)
    eta_message_seconds: float = Field(15.0, gt=0)
    # Project arrivals into the ETA (app.core.eta.ArrivalModel): the rate of each class
    # (LocalQueue, priority, shape) over this many seconds of past arrivals, projected as far
    # ahead; 0 = off (the default: bursty queues make projections wrong both ways).
    eta_arrivals_window_seconds: float = Field(0.0, ge=0)
    # Dashboard history (app/controllers/history.py): a sample of every ClusterQueue this
    # often (seconds), at most history_samples kept per ClusterQueue (default: 4 hours).
    history_interval_seconds: float = Field(30.0, gt=0)
    history_samples: int = Field(480, ge=1)


class ClientSettings(BaseModel):
    """Kubernetes API client: kubeconfig, rate limits and timeouts."""

    kubeconfig: Path | None = None
    qps: float = Field(50.0, gt=0)
    burst: int = Field(100, ge=1)
    request_timeout_seconds: float = Field(10.0, gt=0)


class AccessReviewSettings(BaseModel):
    """TokenReviews and SubjectAccessReviews for the status API and /metrics
    (app/api/access.py). They have an API client of their own: ``qps``/``burst`` bound what
    they send to the API server, and a review that waits more than ``max_wait_seconds`` for
    that budget fails (503) instead of queueing. Each client address may cause at most
    ``per_client_qps`` (``per_client_burst`` at once) reviews; past that it gets 429. Answers
    are cached ``ttl_seconds``, rejected tokens ``negative_ttl_seconds`` in a cache of their
    own; ``max_entries`` per cache."""

    qps: float = Field(20.0, gt=0)
    burst: int = Field(40, ge=1)
    max_wait_seconds: float = Field(1.0, gt=0)
    per_client_qps: float = Field(2.0, gt=0)
    per_client_burst: int = Field(20, ge=1)
    ttl_seconds: float = Field(10.0, gt=0)
    negative_ttl_seconds: float = Field(5.0, gt=0)
    max_entries: int = Field(4096, ge=1)


class LeaderElectionSettings(BaseModel):
    """Lease-based leader election (coordination.k8s.io/v1). On by default, as in Kueue: only
    the holder of the Lease writes; ``enabled: false`` is for a single replica you trust to be
    alone (two unelected replicas would both admit)."""

    enabled: bool = True
    namespace: str = "pykueue-system"
    lease_name: str = "pykueue-leader"
    lease_duration_seconds: int = Field(15, ge=2, description="whole seconds (Lease int32)")
    renew_deadline_seconds: float = Field(10.0, ge=1)
    retry_period_seconds: float = Field(2.0, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElectionSettings:
        """kubernetes-asyncio's election Config: lease > renew deadline > 1.2 x retry period."""
        if self.lease_duration_seconds <= self.renew_deadline_seconds:
            raise ValueError("leader_election: lease_duration_seconds must exceed "
                             "renew_deadline_seconds")
        if self.renew_deadline_seconds <= 1.2 * self.retry_period_seconds:
            raise ValueError("leader_election: renew_deadline_seconds must exceed "
                             "1.2 x retry_period_seconds")
        return self


class FairSharingSettings(BaseModel):
    """Kueue Configuration ``fairSharing``: off by default (classical borrowing, first come
    first served, and classical preemption). When enabled, the dominant resource share of
    each ClusterQueue and Cohort (``spec.fairSharing.weight``) orders the heads of a cycle
    and chooses preemption victims (reason ``InCohortFairSharing``).
    ``PYKUEUE_FAIR_SHARING__ENABLE=true``,
    ``PYKUEUE_FAIR_SHARING__PREEMPTION_STRATEGIES='["LessThanInitialShare"]'``."""

    enable: bool = False
    preemption_strategies: list[str] = Field(
        default_factory=lambda: ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    )

    @model_validator(mode="after")
    def _kueue_strategy_lists(self) -> FairSharingSettings:
        # Kueue accepts exactly these lists (apis/config/v1beta2 validation).
        allowed = (["LessThanOrEqualToFinalShare"], ["LessThanInitialShare"],
                   ["LessThanOrEqualToFinalShare", "LessThanInitialShare"])
        if self.preemption_strategies not in allowed:
            raise ValueError(
                f"fair_sharing.preemption_strategies must be one of {list(allowed)}, "
                f"got {self.preemption_strategies}"
            )
        return self

    def core(self) -> FairSharing | None:
        """The core's ``FairSharing`` (None when disabled)."""
        if not self.enable:
            return None
        return FairSharing(tuple(FairSharingStrategy(x) for x in self.preemption_strategies))


class JobsSettings(BaseModel):
    """Which jobs pykueue manages (Kueue Configuration ``manageJobsWithoutQueueName``,
    ``managedJobsNamespaceSelector`` and the ``LocalQueueDefaulting`` feature; kueue-semantics
    4.1, 4.7, acceptance KQ-23).

    ``local_queue_defaulting``: a Job created without the queue-name label in a namespace that
    has a LocalQueue named ``default`` gets ``kueue.x-k8s.io/queue-name: default``.
    ``manage_jobs_without_queue_name``: other unlabelled Jobs are suspended and get a Workload
    with no queue (pending "LocalQueue  doesn't exist") instead of running unqueued. Both act
    only in namespaces matching ``managed_jobs_namespace_selector`` (a LabelSelector; default:
    every namespace but kube-system and pykueue-system), and both need the Job webhooks to see
    unlabelled Jobs: install ``manifests/webhook/unlabelled-jobs`` (docs/webhook.md), which
    widens their objectSelector. ``PYKUEUE_JOBS__LOCAL_QUEUE_DEFAULTING=true``."""

    model_config = ConfigDict(extra="forbid")

    local_queue_defaulting: bool = False
    manage_jobs_without_queue_name: bool = False
    managed_jobs_namespace_selector: dict[str, Any] = Field(default_factory=lambda: {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                              "values": ["kube-system", "pykueue-system"]}]})

    @model_validator(mode="after")
    def _readable_selector(self) -> JobsSettings:
        sel = label_selector(self.managed_jobs_namespace_selector)
        for i, e in enumerate(sel.match_expressions if sel is not None else ()):
            if e.operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
                raise ValueError(f"jobs.managed_jobs_namespace_selector.matchExpressions[{i}]"
                                 f".operator: unsupported operator {e.operator!r} (one of In, "
                                 "NotIn, Exists, DoesNotExist)")
        return self

    def namespace_managed(self, labels: Mapping[str, str]) -> bool:
        """Whether a namespace with ``labels`` is managed (``managed_jobs_namespace_selector``)."""
        sel = label_selector(self.managed_jobs_namespace_selector)
        return sel is not None and sel.matches(labels)


class Settings(BaseSettings):
    """All settings of one pykueue process."""

    model_config = SettingsConfigDict(env_prefix="PYKUEUE_", env_nested_delimiter="__")

    server: ServerSettings = ServerSettings()
    webhook: WebhookSettings = WebhookSettings()
    extender: ExtenderSettings = ExtenderSettings()
    scheduling: SchedulingSettings = SchedulingSettings()
    client: ClientSettings = ClientSettings()
    leader_election: LeaderElectionSettings = LeaderElectionSettings()
    access_review: AccessReviewSettings = AccessReviewSettings()
    fair_sharing: FairSharingSettings = FairSharingSettings()
    jobs: JobsSettings = JobsSettings()
    controllers_enabled: bool = True
