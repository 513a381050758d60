"""Typed settings for `pykueue serve` (pydantic-settings), grouped as in design.md.

Every value can be set from the environment with the prefix ``PYKUEUE_`` and ``__`` between
group and field, e.g. ``PYKUEUE_SERVER__PORT=9443`` or ``PYKUEUE_CLIENT__QPS=50``, or in a YAML
file named by ``PYKUEUE_CONFIG_FILE`` with the same groups (``server: {port: 9443}``; the
environment wins over the file). docs/dra.md shows the ``resources`` group.
No module globals: ``create_app(settings)`` receives one ``Settings`` instance.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from app.core.quantity import US, parse_duration_us
from app.core.spec import AdmissionFairSharing, FairSharing, FairSharingStrategy, LabelSelector
from app.core.types import ResourceName
from app.wire.queues import label_selector


class ServerSettings(BaseModel):
    """HTTPS listener shared by the webhook, the extender, the status API and metrics (Kueue's
    visibility API has a listener of its own, ``VisibilitySettings.port``, with these limits and
    certificate)."""

    host: str = "127.0.0.1"
    port: int = Field(9443, ge=1, le=65535)
    cert_file: Path = Path("certs/out/tls.crt")
    key_file: Path = Path("certs/out/tls.key")
    ca_file: Path = Path("certs/out/ca.crt")
    # Request bodies above this many bytes get HTTP 413 (the API server sends at most ~3 MiB).
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    # All request bodies being read or handled at once, beyond the first 64 KiB of each
    # (app/api/limits.py): past this many bytes a body gets HTTP 503 with Retry-After, so
    # limit_concurrency bodies of max_body_bytes (2 GiB) cannot be held in memory at once
    # (the Deployment's limit is 512 MiB). Admission reviews of ordinary objects fit the
    # free 64 KiB and are never refused by it.
    max_body_bytes_in_flight: int = Field(24 * 1024 * 1024, ge=1024)
    # Webhook bodies over 64 KiB are parsed and judged one at a time and, together, in at most
    # this share of the event loop's time (app/api/limits.py LoopShare); one that would wait
    # more than large_body_max_wait_seconds for its turn gets HTTP 503 (kube-apiserver gives
    # a webhook timeoutSeconds, 5 s in manifests/webhook). Ordinary reviews are not paced.
    large_body_loop_share: float = Field(0.25, gt=0, le=1)
    large_body_max_wait_seconds: float = Field(2.0, gt=0)
    # Slow clients (app/serving.py): request headers must be complete this
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


# Who releases a pod in Kubernetes v1.36 (cmd/kube-controller-manager/app: each controller's
# ClientBuilder name, a kube-system ServiceAccount with --use-service-account-credentials=true;
# kube-controller-manager's own identity without it): WebhookSettings.owner_reference_releasers.
OWNER_REFERENCE_RELEASERS = (
    "system:kube-controller-manager",
    *(f"system:serviceaccount:kube-system:{name}" for name in (
        "generic-garbage-collector", "replicaset-controller", "replication-controller",
        "statefulset-controller", "job-controller", "daemon-set-controller")),
)

# etcd's default --max-request-bytes: the largest object kube-apiserver can store by default.
MAX_OBJECT_BYTES = 1536 * 1024


class WebhookSettings(BaseModel):
    """The admission webhooks. The queue label is Kueue's ``kueue.x-k8s.io/queue-name``, fixed
    (the webhook configurations' objectSelectors, the informers and the extender read it), so
    an old ``queue_name_label`` setting is refused rather than half applied."""

    model_config = ConfigDict(extra="forbid")

    # Usernames allowed to flip spec.suspend to false on a managed Job (pykueue's own identity).
    controller_usernames: list[str] = Field(
        default_factory=lambda: ["system:serviceaccount:pykueue-system:pykueue"]
    )
    # Identities allowed to create running, resume, or resize a running Job that a queued
    # ancestor owns (a JobSet's Job, an MPIJob's launcher, a RayJob's submitter): the
    # operators' service accounts. Empty (the default) = anyone, as Kueue (its
    # managed-ancestor rule trusts the ownerReference). Set it where tenants can write
    # ownerReferences, above all with jobs.manage_jobs_without_queue_name: otherwise a tenant
    # naming its own admitted JobSet as a Job's controller runs that Job unadmitted. Set, it
    # also names who may create a Deployment or StatefulSet controlled by a queued
    # AppWrapper (the AppWrapper controller's identity; brk29).
    child_job_creators: list[str] = Field(default_factory=list)
    # Identities allowed to remove the controller ownerReference of a pod of an admitted job
    # (a pod labelled kueue.x-k8s.io/podset; pykueue's own, controller_usernames, always may):
    # a tenant removing it from its running Spark executors made them run on uncounted once
    # the application was preempted (docs/security.md, brk27 M3). The default: those that
    # release a pod in Kubernetes, the garbage collector (`--cascade=orphan`, dangling
    # references) and the controllers that release a pod their selector stops matching
    # (ReplicaSet, ReplicationController, StatefulSet, Job, DaemonSet: ClaimPods), under the
    # names kube-controller-manager gives them with --use-service-account-credentials=true
    # (kube-system service accounts) and =false (system:kube-controller-manager, the lab's).
    # None of the operators pykueue manages removes one. Empty = anyone (pykueue before; Kueue
    # v0.17.1 has no such rule): for a cluster whose garbage collector runs as another identity.
    owner_reference_releasers: list[str] = Field(
        default_factory=lambda: list(OWNER_REFERENCE_RELEASERS))
    # The client-certificate common names the admission webhook routes answer (kube-apiserver
    # presents one when its AdmissionConfiguration names a kubeconfig for pykueue's Service;
    # docs/security.md "mTLS"). Needs server.client_ca_file. Empty (the default, as Kueue's
    # webhook server): no certificate required, the NetworkPolicy is the fence; a forged
    # AdmissionReview only ever gets an answer about the object it forged.
    client_names: list[str] = Field(default_factory=list)
    # An AdmissionReview whose object (or oldObject) spans more JSON bytes than this is refused
    # (status 413 in the review) after a scan of its envelope, without parsing the object on
    # the event loop the controllers share. The default is etcd's default --max-request-bytes
    # (1.5 MiB): no larger object can be stored. Raise it with your etcd's limit.
    max_object_bytes: int = Field(MAX_OBJECT_BYTES, ge=64 * 1024)


class ExtenderSettings(BaseModel):
    """kube-scheduler extender."""

    gpu_resource: str = "nvidia.com/gpu"
    # With ServerSettings.client_ca_file set: the client-certificate common names the extender
    # answers (kube-scheduler's own identity by default); others get 403.
    client_names: list[str] = Field(default_factory=lambda: ["system:kube-scheduler"])
    # On: a GPU pod that no admitted Workload covers (an unqueued one: bare, a Deployment's,
    # a Job's pykueue does not queue, in any namespace) is refused on every node of a
    # ResourceFlavor (docs/security.md, "Keeping every unqueued pod off flavor GPUs"). Off
    # by default: such pods are scheduled as kube-scheduler alone would (Kueue has no
    # extender; pykueue's own choice). PYKUEUE_EXTENDER__FLAVOR_NODES_FOR_ADMITTED_ONLY.
    flavor_nodes_for_admitted_only: bool = False


class SchedulingSettings(BaseModel):
    """Scheduling loop and reconciler behaviour."""

    inject_node_selector: bool = True
    status_flush_seconds: float = Field(0.3, gt=0)
    requeue_backoff_seconds: float = Field(1.0, gt=0)
    requeue_backoff_max_seconds: float = Field(30.0, gt=0)
    # The loop runs a cycle when woken by an event and at least this often (seconds).
    cycle_interval_seconds: float = Field(1.0, gt=0)
    # After a cycle of c seconds the loop waits c x cycle_pause_ratio (at least the 5 ms
    # debounce, at most cycle_pause_max_seconds) before the next one, so that a busy core
    # (thousands of ClusterQueues, a cohort requeued by every finish) takes the events of that
    # pause into one cycle instead of one cycle per event, and leaves the event loop to the
    # watches, the writes and the leader lease. 0 = Kueue's pacing (the next cycle at once).
    cycle_pause_ratio: float = Field(1.0, ge=0)
    cycle_pause_max_seconds: float = Field(0.5, ge=0)
    # Parked (inadmissible) Workloads return to their queues at the next cycle after a change
    # in their cohort (a finish, a quota or ClusterQueue change): pykueue's default, 0. Kueue
    # v0.17.1 returns them requeueBatchPeriod (1 s, REQUEUE_BATCH_S) after the first change,
    # later changes joining that batch: set 1 for Kueue's timing (freed quota waits up to 1 s
    # for them; measured in docs/benchmarks.md "Requeue batch").
    requeue_batch_seconds: float = Field(0.0, ge=0, allow_inf_nan=False)
    # Where a Workload evicted by preemption (or a stop policy's drain) goes in its queue once
    # pending again. "Eviction" (pykueue's default; acceptance KQ-18; Kueue v0.17.1 does so
    # only for an InCohortReclaimWhileBorrowing preemption with its PrioritySortingWithinCohort
    # gate off): by its eviction time, behind what queued meanwhile. "Creation" (Kueue v0.17.1
    # as shipped): by its creation time; only a PodsReady timeout (see
    # wait_for_pods_ready.requeuing_strategy.timestamp) or an admission check's eviction
    # orders by eviction time.
    preempted_queue_order: Literal["Eviction", "Creation"] = "Eviction"
    # A ClusterQueue below its nominal quota that admitted its head and has more queued keeps
    # part of its unused nominal quota from the rest of the cycle, so borrowers are not
    # admitted into room its next heads would reclaim by eviction a cycle later (pykueue's,
    # the default; bounded so no borrower waits more than about KEEP_MAX_HOLD_S, 10 s, for
    # room it fits). False: Kueue v0.17.1's lend-then-reclaim.
    keep_nominal_for_queue: bool = True
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
    # Share of each eta_message_seconds period the background ETA refresh may compute (the
    # forward runs of every cohort, in eta_budget_ms slices): a cohort with thousands of
    # pending Workloads would otherwise keep a core busy. A run left unfinished resumes in the
    # next period, ClusterQueues taken in turn. The share is of what the rest of the
    # controller leaves idle, never below a quarter of it (app.controllers.pacing.RefreshCredit).
    eta_refresh_share: float = Field(0.1, gt=0, le=1)
    # A pending Workload's QuotaReserved=False message is rewritten at once when it changes
    # materially (reason or words: app/controllers/pacing.py), but when only its numbers or
    # its ETA tail change, at most this often per Workload (seconds; the newest text is
    # written when the interval ends). 0 = every change (Kueue v0.17.1 rewrites on every
    # message change, UnsetQuotaReservationWithCondition).
    pending_message_refresh_seconds: float = Field(60.0, ge=0)
    # A new pending Workload's first QuotaReserved=False message waits up to this long
    # (seconds) for its ETA when its cohort's ETA run may start at once (a quiet cohort), so
    # that the message carries "expected start in ~T" from the start instead of gaining it at
    # the next refresh, pending_message_refresh_seconds later. 0 = written at once.
    pending_message_eta_grace_seconds: float = Field(1.0, ge=0)
    # Project arrivals into the ETA (app.core.eta.ArrivalModel): the rate of each class
    # (LocalQueue, priority, shape) over this many seconds of past arrivals, each stream
    # projected for as long as it has gone on (a gap longer than this window ends it), only
    # classes above the lowest pending priority. Without it the ETA knows only the present
    # and is early whenever more higher-priority work keeps coming (docs/benchmarks.md, ETA).
    # 0 = off (each run then carries no projected Workloads).
    eta_arrivals_window_seconds: float = Field(3600.0, ge=0)
    # Give a start that rests on projected arrivals Gott's 50% interval (app.core.eta
    # RangedRun: the run again with each stream ending at a third and at three times its
    # age; the status API's eta.range, the CLI and the dashboard). Up to two more runs per
    # cohort, within the same slices and refresh share, so an answer takes longer to become
    # whole. Off by default: on day-long Poisson streams the interval rarely holds the real
    # start (docs/benchmarks.md, ETA); true = add it.
    eta_ranges: bool = False
    # Dashboard history (app/controllers/history.py): a sample of every ClusterQueue this
    # often (seconds), at most history_samples kept per ClusterQueue (default: 4 hours).
    history_interval_seconds: float = Field(30.0, gt=0)
    history_samples: int = Field(480, ge=1)


class VisibilitySettings(BaseModel):
    """Kueue's visibility API (``visibility.kueue.x-k8s.io``, app/api/visibility.py), served
    through the Kubernetes aggregation layer: kube-apiserver authenticates the user and proxies
    the request with its front-proxy client certificate and the user in request headers.

    ``requestheader_client_ca_file``: the CA of that certificate (kube-apiserver's
    ``--requestheader-client-ca-file``). None (the default, as Kueue's visibility server):
    read at start, with the header names and allowed names, from the ConfigMap
    ``kube-system/extension-apiserver-authentication`` that kube-apiserver publishes (needs
    the Role ``extension-apiserver-authentication-reader`` there). With a file, the other
    fields are used as given: ``requestheader_allowed_names`` empty = any common name
    (Kubernetes' meaning of an empty ``--requestheader-allowed-names``).
    ``enabled: false``: the routes answer 404 and nothing is read at start.

    ``port``: the HTTPS port of the API's own listener (Kueue's visibility server listens on
    8082), on ``server.host`` with ``server``'s certificate and limits. Its TLS asks every client
    for a certificate and trusts the request-header CA only; the main port (webhooks, extender,
    status API, metrics) keeps its own TLS and does not serve these paths. 0: no listener (the
    API is off, as ``enabled: false``)."""

    enabled: bool = True
    port: int = Field(8082, ge=0, le=65535)
    requestheader_client_ca_file: Path | None = None
    requestheader_allowed_names: list[str] = Field(default_factory=list)
    requestheader_username_headers: list[str] = Field(default_factory=lambda: ["X-Remote-User"])
    requestheader_group_headers: list[str] = Field(default_factory=lambda: ["X-Remote-Group"])
    requestheader_extra_headers_prefix: list[str] = Field(
        default_factory=lambda: ["X-Remote-Extra-"])

    @property
    def served(self) -> bool:
        """True when the visibility listener runs (enabled, with a port)."""
        return self.enabled and self.port != 0


class ClientSettings(BaseModel):
    """Kubernetes API client: kubeconfig, rate limits and timeouts."""

    kubeconfig: Path | None = None
    qps: float = Field(50.0, gt=0)
    burst: int = Field(100, ge=1)
    request_timeout_seconds: float = Field(10.0, gt=0)
    # Queue status and Events wait for a token until no other request waits, at most this
    # long (app.kube.client.TokenBucket): admissions first under a full budget.
    background_max_wait_seconds: float = Field(5.0, ge=0)
    # Where Events take their tokens. "shared" (default): the controllers' bucket, as in
    # Kueue (cmd/kueue/main.go sets one RateLimiter on the rest config, so its event
    # recorder's client shares it), here as background traffic (written when no admission
    # waits, or after ``background_max_wait_seconds``). "own" (pykueue's opt-in): a bucket of
    # ``qps``/``burst`` of their own, so Events never take a token an admission waits for,
    # and up to twice ``qps`` reaches the API server.
    events_bucket: Literal["own", "shared"] = "shared"


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
    ``PYKUEUE_FAIR_SHARING__PREEMPTION_STRATEGIES='["LessThanInitialShare"]'``.

    ``s2b_priority_guard`` (true/false; pykueue's rule, default false = Kueue v0.17.1's,
    which has none): ``LessThanInitialShare`` (S2-b) evicts no Workload of another
    ClusterQueue whose priority is above the preemptor's. Kueue's S2-b can loop: a
    priority-0 Workload evicts another queue's priority-1 Workload, that queue's priority-0
    Workloads take the capacity back, the priority-1 Workload evicts them within its
    ClusterQueue (``withinClusterQueue: LowerPriority``), and so on forever
    (docs/fair-sharing.md; the example in tests/unit/core/test_hierarchy_properties.py).
    Refused (ValueError) without ``enable`` or without ``LessThanInitialShare`` among the
    strategies. ``PYKUEUE_FAIR_SHARING__S2B_PRIORITY_GUARD=true``.

    ``sticky_preemptor_first`` (true/false; pykueue's rule, default false = Kueue v0.17.1's
    admission tournament, which has no such term): a preemptor that issued preemptions is
    served before every other head of its cohort tree, so a queue with a lower share does not
    take the capacity its victims free (with Kueue's order the preemptor may then preempt
    again). Refused (ValueError) without ``enable``.
    ``PYKUEUE_FAIR_SHARING__STICKY_PREEMPTOR_FIRST=true``."""

    model_config = ConfigDict(extra="forbid")

    enable: bool = False
    preemption_strategies: list[str] = Field(
        default_factory=lambda: ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    )
    s2b_priority_guard: bool = False
    sticky_preemptor_first: bool = False

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
        # pykueue's own setting: refused where it would do nothing, never silently ignored.
        if self.s2b_priority_guard and not self.enable:
            raise ValueError("fair_sharing.s2b_priority_guard needs fair_sharing.enable: true "
                             "(it guards fair sharing's LessThanInitialShare preemption)")
        if self.s2b_priority_guard and "LessThanInitialShare" not in self.preemption_strategies:
            raise ValueError("fair_sharing.s2b_priority_guard guards the LessThanInitialShare "
                             "strategy, which fair_sharing.preemption_strategies leaves out")
        if self.sticky_preemptor_first and not self.enable:
            raise ValueError("fair_sharing.sticky_preemptor_first needs fair_sharing.enable: "
                             "true (it orders fair sharing's admission tournament)")
        return self

    def core(self) -> FairSharing | None:
        """The core's ``FairSharing`` (None when disabled)."""
        if not self.enable:
            return None
        return FairSharing(tuple(FairSharingStrategy(x) for x in self.preemption_strategies),
                           s2b_priority_guard=self.s2b_priority_guard,
                           sticky_preemptor_first=self.sticky_preemptor_first)


# Kubernetes qualified name (apimachinery IsQualifiedName): [DNS-subdomain prefix "/"] name of at
# most 63 characters, alphanumeric at both ends, '-', '_', '.' inside.
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_DEVICE_CLASS_MAPPINGS = 16
MAX_DEVICE_CLASSES_PER_MAPPING = 8


def _check_qualified_name(value: str, what: str) -> None:
    prefix, _, name = value.rpartition("/")
    if len(value) > 253 or not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name) \
            or ("/" in value and (not prefix or not _DNS_SUBDOMAIN.fullmatch(prefix))):
        raise ValueError(f"{what} {value!r} is not a qualified name ([prefix/]name: name at "
                         "most 63 alphanumerics, '-', '_', '.'; prefix a DNS subdomain)")


class DeviceClassMapping(BaseModel):
    """Kueue Configuration ``resources.deviceClassMappings[]`` (config v1beta2): the quota
    resource ``name`` that devices of the DeviceClasses ``deviceClassNames`` are charged as."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str
    device_class_names: list[str] = Field(alias="deviceClassNames")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        _check_qualified_name(v, "deviceClassMappings[].name")
        return v

    @field_validator("device_class_names")
    @classmethod
    def _classes(cls, v: list[str]) -> list[str]:
        if not v or len(v) > MAX_DEVICE_CLASSES_PER_MAPPING:
            raise ValueError(f"deviceClassNames must list 1 to {MAX_DEVICE_CLASSES_PER_MAPPING} "
                             f"DeviceClass names, got {len(v)}")
        for c in v:
            if len(c) > 253 or not _DNS_SUBDOMAIN.fullmatch(c):
                raise ValueError(f"deviceClassNames: {c!r} is not a DeviceClass name "
                                 "(a DNS subdomain of at most 253 characters)")
        return v


class ResourcesSettings(BaseModel):
    """Kueue Configuration ``resources``: ``deviceClassMappings`` map DRA DeviceClasses to the
    quota resource their devices are charged as (docs/dra.md). At most 16 mappings,
    at most 8 DeviceClasses each, a DeviceClass in one mapping only (Kueue v0.17.1 config
    validation). Empty (the default): ResourceClaims are not read and a Workload whose pods
    reference a ResourceClaimTemplate is inadmissible. File / env::

        resources:
          deviceClassMappings:
          - {name: example.com/gpu, deviceClassNames: [gpu.example.com]}

        PYKUEUE_RESOURCES__DEVICE_CLASS_MAPPINGS='[{"name": "example.com/gpu",
                                                   "deviceClassNames": ["gpu.example.com"]}]'
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    device_class_mappings: list[DeviceClassMapping] = Field(
        default_factory=list, alias="deviceClassMappings")

    @model_validator(mode="after")
    def _one_name_per_class(self) -> ResourcesSettings:
        if len(self.device_class_mappings) > MAX_DEVICE_CLASS_MAPPINGS:
            raise ValueError(f"resources.deviceClassMappings: at most "
                             f"{MAX_DEVICE_CLASS_MAPPINGS} mappings, got "
                             f"{len(self.device_class_mappings)}")
        seen: dict[str, str] = {}
        for m in self.device_class_mappings:
            for c in m.device_class_names:
                if c in seen:
                    raise ValueError(f"resources.deviceClassMappings: DeviceClass {c!r} is "
                                     f"mapped more than once ({seen[c]!r}, {m.name!r}); a "
                                     "DeviceClass maps to one resource name")
                seen[c] = m.name
        return self

    def device_classes(self) -> dict[str, str]:
        """DeviceClass name -> quota resource name (empty when DRA is not configured)."""
        return {c: m.name for m in self.device_class_mappings for c in m.device_class_names}


class AdmissionFairSharingSettings(BaseModel):
    """Kueue Configuration ``admissionFairSharing`` (Admission Fair Sharing): off by default.
    When enabled, a ClusterQueue with ``spec.admissionScope.admissionMode:
    UsageBasedAdmissionFairSharing`` orders its Workloads by their LocalQueues' decayed
    recent usage (``app.core.spec.AdmissionFairSharing``); without it such a ClusterQueue
    admits first come, first served, as in Kueue. ``usage_half_life_time``: Kueue
    ``usageHalfLifeTime`` (a Go-style duration such as ``168h``, ``30m``, ``90s``, or seconds;
    ``0`` keeps no history); ``usage_sampling_interval``: ``usageSamplingInterval`` (> 0,
    default ``5m``); ``resource_weights``: ``resourceWeights`` ({resource: weight >= 0},
    default 1 each). ``PYKUEUE_ADMISSION_FAIR_SHARING__ENABLE=true``,
    ``PYKUEUE_ADMISSION_FAIR_SHARING__USAGE_HALF_LIFE_TIME=168h``,
    ``PYKUEUE_ADMISSION_FAIR_SHARING__RESOURCE_WEIGHTS='{"cpu": 2, "memory": 1}'``."""

    model_config = ConfigDict(extra="forbid")

    enable: bool = False
    usage_half_life_time: str | float = "0s"
    usage_sampling_interval: str | float = "5m"
    resource_weights: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _kueue_rules(self) -> AdmissionFairSharingSettings:
        self.core_config()  # Kueue's validation (apis/config validateAdmissionFairSharing)
        return self

    def core_config(self) -> AdmissionFairSharing:
        """The core's ``AdmissionFairSharing``; ``ValueError`` naming the field when a
        duration is malformed, the interval is not positive or a weight is negative."""
        def seconds(value: str | float, name: str) -> float:
            try:
                return parse_duration_us(value) / US
            except ValueError as exc:
                raise ValueError(f"admission_fair_sharing.{name}: {exc}") from exc

        return AdmissionFairSharing(
            half_life_s=seconds(self.usage_half_life_time, "usage_half_life_time"),
            sampling_s=seconds(self.usage_sampling_interval, "usage_sampling_interval"),
            resource_weights={ResourceName(k): float(v) for k, v in self.resource_weights.items()},
        )

    def core(self) -> AdmissionFairSharing | None:
        """The core's ``AdmissionFairSharing`` (None when disabled)."""
        return self.core_config() if self.enable else None


class RequeuingStrategySettings(BaseModel):
    """Kueue Configuration ``waitForPodsReady.requeuingStrategy``: how a Workload evicted for
    ``PodsReadyTimeout`` is queued again. ``timestamp``: ``Eviction`` (default: it queues by
    its eviction time, behind what arrived meanwhile) or ``Creation`` (by its creation time).
    Backoff: requeueAt = eviction + base * 2^(n-1) seconds, at most ``backoff_max_seconds``, n
    = ``status.requeueState.count``; past ``backoff_limit_count`` requeues (None: no limit)
    the Workload is deactivated (``spec.active: false``, reason RequeuingLimitExceeded)."""

    model_config = ConfigDict(extra="forbid")

    timestamp: Literal["Eviction", "Creation"] = "Eviction"
    backoff_limit_count: int | None = Field(None, ge=0)
    backoff_base_seconds: int = Field(60, ge=0)
    backoff_max_seconds: int = Field(3600, ge=0)


class WaitForPodsReadySettings(BaseModel):
    """Kueue Configuration ``waitForPodsReady`` (reference 3.9, 3.10): an admitted Workload
    whose pods are not all Ready within ``timeout_seconds`` of its admission (or within
    ``recovery_timeout_seconds`` of a pod failing after they were: default the timeout) is
    evicted whole (reason ``PodsReadyTimeout``) and queued again with the backoff of
    ``requeuing_strategy``; the Workload's ``PodsReady`` condition says where it stands.
    ``block_admission``: no new admission while an admitted Workload is not ready yet.
    On by default, with Kueue v0.19's defaults (Kueue v0.19 ``apis/config/v1beta2``
    ``SetDefaults_Configuration``: timeout 30m, recoveryTimeout = timeout, blockAdmission
    false, requeuingStrategy {Eviction, backoffBaseSeconds 60, backoffMaxSeconds 3600,
    backoffLimitCount unset}): a gang half-placed on fragmented nodes is evicted whole and
    queued again rather than holding its quota while the hardware idles. Kueue v0.17.1's
    default is off (no ``waitForPodsReady`` section): ``PYKUEUE_WAIT_FOR_PODS_READY__ENABLE=
    false`` gives it. ``PYKUEUE_WAIT_FOR_PODS_READY__TIMEOUT_SECONDS=300``."""

    model_config = ConfigDict(extra="forbid")

    enable: bool = True
    timeout_seconds: float = Field(1800.0, gt=0)
    recovery_timeout_seconds: float | None = Field(None, gt=0)
    block_admission: bool = False
    requeuing_strategy: RequeuingStrategySettings = RequeuingStrategySettings()

    @property
    def recovery_seconds(self) -> float:
        """``recovery_timeout_seconds``, defaulting to ``timeout_seconds`` (Kueue)."""
        return (self.timeout_seconds if self.recovery_timeout_seconds is None
                else self.recovery_timeout_seconds)


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
    widens their objectSelector. ``PYKUEUE_JOBS__LOCAL_QUEUE_DEFAULTING=true``.

    ``deleted_quota_release``: when the quota of an admitted Workload deleted from the API
    (``kubectl delete job``: the garbage collector deletes its Workload with it) returns.
    ``WhenPodsGone`` (default, pykueue's): once no pod of its owner holds resources any more
    (gone from the API, or Succeeded/Failed, being deleted or not: Kueue KEP-10076
    ``OnTerminal``), so the pods' termination
    grace period, which the tenant sets, runs inside the quota (docs/security.md). Needs
    the Pod watch (``pykueue serve`` has it); without one it is released at once.
    ``Immediately`` (Kueue v0.17.1's): at the Workload's deletion, while its pods may still
    run. ``PYKUEUE_JOBS__DELETED_QUOTA_RELEASE=Immediately``.

    ``workload_finalizer``: the Workloads pykueue creates for jobs carry the finalizer
    ``kueue.x-k8s.io/resource-in-use``, as Kueue's do (v0.17.1 ``NewWorkload``), so a Workload
    deleted (with its job, or by hand) stays in the API, still holding its quota, until
    pykueue takes the finalizer off: once it is Finished, or once no pod of its owner holds
    resources (``WhenPodsGone``; at once with ``Immediately``, as Kueue). The deletion hold
    then survives a restart of pykueue. A Workload carrying it (Kueue's too) loses it by those
    rules whatever this setting says; with pykueue uninstalled, Workloads being deleted stay
    until the finalizer is removed by hand, as with Kueue (docs/security.md). Default on
    (Kueue's Workloads carry it); off: no finalizer, the deletion hold in memory only
    (forgotten by a restart while the pods terminate).
    ``PYKUEUE_JOBS__WORKLOAD_FINALIZER=false``.

    ``pod_replacement_policy``: ``AsSubmitted`` (default, Kueue v0.17.1's: a queued batch
    Job keeps its own ``spec.podReplacementPolicy``, which the API server defaults to
    ``TerminatingOrFailed`` without a ``podFailurePolicy``: the Job controller starts a
    replacement as soon as a pod is being deleted, so a tenant deleting its Running pods runs
    the replacements beside pods that run out the grace period it set, beyond the admission:
    brk32 H4). ``Failed`` (pykueue's, opt-in): the Job webhook sets ``Failed`` on every
    queued batch Job at CREATE, or when an update gives it a queue name (a replacement
    starts once the pod it replaces is terminal), and refuses an UPDATE, by anyone but
    pykueue, that changes it away from ``Failed`` on a queued Job; the scheduler extender
    then gives no node to a pod of an admitted Job that has as many GPU pods bound and not
    terminal as its admission. Jobs an ancestor's operator makes (a JobSet's) keep what
    that operator writes. ``PYKUEUE_JOBS__POD_REPLACEMENT_POLICY=Failed``."""

    model_config = ConfigDict(extra="forbid")

    local_queue_defaulting: bool = False
    pod_replacement_policy: Literal["AsSubmitted", "Failed"] = "AsSubmitted"
    deleted_quota_release: Literal["WhenPodsGone", "Immediately"] = "WhenPodsGone"
    workload_finalizer: bool = True
    manage_jobs_without_queue_name: bool = False
    managed_jobs_namespace_selector: dict[str, Any] = Field(default_factory=lambda: {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                              "values": ["kube-system", "pykueue-system"]}]})

    _selector: LabelSelector | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _readable_selector(self) -> JobsSettings:
        # Read once here; the webhook and the reconciler ask for every unlabelled Job.
        sel = label_selector(self.managed_jobs_namespace_selector)
        for i, e in enumerate(sel.match_expressions if sel is not None else ()):
            if e.operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
                raise ValueError(f"jobs.managed_jobs_namespace_selector.matchExpressions[{i}]"
                                 f".operator: unsupported operator {e.operator!r} (one of In, "
                                 "NotIn, Exists, DoesNotExist)")
        self._selector = sel
        return self

    def namespace_managed(self, labels: Mapping[str, str]) -> bool:
        """Whether a namespace with ``labels`` is managed (``managed_jobs_namespace_selector``)."""
        return self._selector is not None and self._selector.matches(labels)


# Kueue's ``integrations.frameworks`` names (Kueue v1beta2 Configuration, "Integrations"):
# the job kinds pykueue can manage. ``app.integrations.framework_of`` names each built-in kind
# by one of these (a unit test checks that both lists agree).
KUEUE_FRAMEWORKS: tuple[str, ...] = (
    "batch/job", "pod", "deployment", "statefulset", "jobset.x-k8s.io/jobset",
    "kubeflow.org/pytorchjob", "kubeflow.org/tfjob", "kubeflow.org/xgboostjob",
    "kubeflow.org/paddlejob", "kubeflow.org/jaxjob", "kubeflow.org/mpijob", "ray.io/rayjob",
    "ray.io/raycluster", "ray.io/rayservice",
    "trainer.kubeflow.org/trainjob", "leaderworkerset.x-k8s.io/leaderworkerset",
    "workload.codeflare.dev/appwrapper", "sparkoperator.k8s.io/sparkapplication")

# Kueue refuses a framework whose dependency is not listed: Deployments, StatefulSets and
# LeaderWorkerSets are queued through their Pods (Kueue's ``DependencyList: ["pod"]`` of
# those integrations).
_FRAMEWORK_NEEDS: dict[str, str] = {"deployment": "pod", "statefulset": "pod",
                                    "leaderworkerset.x-k8s.io/leaderworkerset": "pod"}


class IntegrationsSettings(BaseModel):
    """Which job kinds this process manages (Kueue v1beta2 Configuration
    ``integrations.frameworks``).

    ``frameworks``: Kueue's framework names (``KUEUE_FRAMEWORKS``; default: all of them). The
    Manager watches and reconciles only the kinds listed (Pods and pod groups are both
    ``"pod"``), and the admission webhooks of a kind not listed allow every request unchanged,
    as Kueue registers no webhook for a disabled integration. An unknown name, or
    ``deployment``/``statefulset`` without ``pod``, is refused at start-up with the known names.
    A listed operator kind whose CRD is not installed is still skipped with one log line
    (``app.controllers.manager.served_kinds``).
    ``PYKUEUE_INTEGRATIONS__FRAMEWORKS='["batch/job","pod"]'`` or in the YAML file::

        integrations:
          frameworks: [batch/job, kubeflow.org/pytorchjob]
    """

    model_config = ConfigDict(extra="forbid")

    frameworks: list[str] = Field(default_factory=lambda: list(KUEUE_FRAMEWORKS))

    @field_validator("frameworks")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = [n for n in value if n not in KUEUE_FRAMEWORKS]
        if unknown:
            raise ValueError(f"integrations.frameworks: unknown framework(s) "
                             f"{', '.join(map(repr, unknown))}; known: "
                             f"{', '.join(KUEUE_FRAMEWORKS)}")
        for name, needs in _FRAMEWORK_NEEDS.items():
            if name in value and needs not in value:
                raise ValueError(f"integrations.frameworks: {name!r} needs {needs!r} listed "
                                 f"too (Kueue queues its pods through the {needs} integration)")
        return list(dict.fromkeys(value))

    def enabled(self, framework: str) -> bool:
        """True when ``framework`` (a ``KUEUE_FRAMEWORKS`` name) is listed."""
        return framework in self.frameworks


class MultiKueueSettings(BaseModel):
    """MultiKueue on a manager cluster (docs/multikueue.md; Kueue v1beta2 Configuration
    ``multiKueue``). ``origin``: the value of label ``kueue.x-k8s.io/multikueue-origin`` on the
    objects pykueue creates on the workers (Kueue ``multiKueue.origin``, default
    ``multikueue``). ``namespace``: where the kubeconfig Secrets named by MultiKueueClusters
    are read (pykueue's own namespace). ``allow_kubeconfig_path``: honour
    ``locationType: Path`` (a kubeconfig file on pykueue's disk); off, such a cluster is
    Active=False (Kueue reads any path). ``dispatcher_name``: Kueue ``multiKueue.dispatcherName``:
    ``kueue.x-k8s.io/multikueue-dispatcher-all-at-once`` (every worker at once) or
    ``kueue.x-k8s.io/multikueue-dispatcher-incremental`` (``incremental_batch_size`` more
    workers, in name order, each ``incremental_round_seconds``; Kueue fixes them at 3 and
    5 min, pykueue lets them be set), or pykueue's ``pykueue.dev/multikueue-dispatcher-soonest``
    (copies to every worker, then kept only on the one whose pykueue expects to start it
    soonest, by its status API's ETA, and on those that give none; a new round each
    ``soonest_round_seconds``; a worker still computing its ETA is waited for
    ``soonest_patience_seconds``). ``worker_lost_timeout_seconds``: Kueue
    ``multiKueue.workerLostTimeout`` (15 min): how long a Workload whose worker lost its copy
    keeps its check Ready before it goes Retry (the Workload is evicted and requeued).
    ``gc_interval_seconds``: Kueue ``multiKueue.gcInterval`` (1 min; 0 turns it off): how often
    each worker's Workloads with this origin whose manager Workload is gone are deleted, with
    their job. ``no_worker_timeout_seconds`` (pykueue's, off by default: Kueue waits):
    ClusterQueue name -> seconds after which a Workload of that ClusterQueue holding quota on
    the manager that no worker reserved gets condition ``MultiKueueNoWorker`` True (it keeps
    waiting). ``sync_period_seconds``: how often clusters, checks and dispatched Workloads are
    looked at; ``probe_period_seconds``: how often a connected worker is probed again, and a
    cluster whose kubeconfig is unusable (Secret or key missing, refused) has its Secret read
    again."""

    origin: str = Field("multikueue", min_length=1, max_length=63)
    namespace: str = "pykueue-system"
    allow_kubeconfig_path: bool = False
    dispatcher_name: str = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
    incremental_batch_size: int = Field(3, ge=1)
    incremental_round_seconds: float = Field(300.0, gt=0)
    soonest_round_seconds: float = Field(300.0, gt=0)
    soonest_patience_seconds: float = Field(10.0, ge=0)
    gc_interval_seconds: float = Field(60.0, ge=0)
    no_worker_timeout_seconds: dict[str, float] = Field(default_factory=dict)
    sync_period_seconds: float = Field(1.0, gt=0)
    worker_lost_timeout_seconds: float = Field(900.0, ge=0)
    probe_period_seconds: float = Field(10.0, gt=0)

    @model_validator(mode="after")
    def _dispatcher(self) -> MultiKueueSettings:
        known = ("kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
                 "kueue.x-k8s.io/multikueue-dispatcher-incremental",
                 "pykueue.dev/multikueue-dispatcher-soonest")
        if self.dispatcher_name not in known:
            raise ValueError(
                f"multikueue.dispatcher_name {self.dispatcher_name!r}: one of "
                f"{', '.join(known)} (an external dispatcher is not supported)")
        bad = {k: v for k, v in self.no_worker_timeout_seconds.items() if not v > 0}
        if bad:
            raise ValueError(f"multikueue.no_worker_timeout_seconds {bad}: seconds must be > 0")
        return self


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
    visibility: VisibilitySettings = VisibilitySettings()
    fair_sharing: FairSharingSettings = FairSharingSettings()
    resources: ResourcesSettings = ResourcesSettings()
    admission_fair_sharing: AdmissionFairSharingSettings = AdmissionFairSharingSettings()
    wait_for_pods_ready: WaitForPodsReadySettings = WaitForPodsReadySettings()
    jobs: JobsSettings = JobsSettings()
    integrations: IntegrationsSettings = IntegrationsSettings()
    multikueue: MultiKueueSettings = MultiKueueSettings()
    controllers_enabled: bool = True

    @model_validator(mode="after")
    def _webhook_callers_need_a_client_ca(self) -> Settings:
        if self.webhook.client_names and self.server.client_ca_file is None:
            raise ValueError("webhook.client_names needs server.client_ca_file: without a CA "
                             "no client certificate is asked for, so every webhook call "
                             "would be refused")
        return self

    @model_validator(mode="after")
    def _visibility_port_is_its_own(self) -> Settings:
        if self.visibility.served and self.visibility.port == self.server.port:
            raise ValueError(f"visibility.port {self.visibility.port} is server.port: the "
                             "visibility API has a listener of its own (TLS asking for the "
                             "front-proxy certificate); give it another port, or 0 for none")
        return self

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment, then the YAML file ``PYKUEUE_CONFIG_FILE``."""
        sources = [init_settings, env_settings, dotenv_settings]
        path = os.environ.get("PYKUEUE_CONFIG_FILE")
        if path:
            if not Path(path).is_file():
                raise ValueError(f"PYKUEUE_CONFIG_FILE={path!r} is not a readable file")
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return (*sources, file_secret_settings)
