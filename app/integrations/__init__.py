"""Job kinds pykueue queues (Kueue's integrations): one folder per kind (or family of kinds),
registered below.

Each folder's package exposes ``KINDS`` (its ``app.integrations.framework.JobKind`` objects,
possibly none: a Deployment's or StatefulSet's pods are queued as Pods) and ``ROUTES`` (its
webhook endpoints, ``app.integrations.webhook_toolkit.WebhookRoute``, served by
``app.api.webhook``), and optionally ``GROUP_PARENTS`` (owners whose pods form pod groups,
``app.integrations.parents.GroupParent``: a StatefulSet's, a LeaderWorkerSet's). Nothing
outside the folder names the kind.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.integrations import (
    appwrapper,
    batchjob,
    deployment,
    jobset,
    kubeflow,
    leaderworkerset,
    pod,
    ray,
    sparkapplication,
    statefulset,
    trainjob,
    webhook_toolkit,
)
from app.integrations.crdrules import CrdRules
from app.integrations.framework import JobKind, Registry
from app.integrations.parents import GroupParent
from app.integrations.webhook_toolkit import WebhookRoute

# Adding a job kind: its folder, and one line here (the order is the registry's).
PACKAGES = (
    batchjob,
    pod,
    deployment,
    statefulset,
    jobset,
    kubeflow,
    ray,
    leaderworkerset,
    trainjob,
    appwrapper,
    sparkapplication,
)

BUILTIN_KINDS: tuple[JobKind, ...] = tuple(k for p in PACKAGES for k in p.KINDS)

# Every webhook endpoint: the framework's own (a pod of any admitted job) and each folder's.
WEBHOOK_ROUTES: tuple[WebhookRoute, ...] = (*webhook_toolkit.ROUTES,
                                            *(r for p in PACKAGES for r in p.ROUTES))

# The owners whose pods form pod groups (``parents.GroupParent``): each folder's optional
# ``GROUP_PARENTS``, read by the Pod webhook through its ``WebhookEnv``.
GROUP_PARENTS: tuple[GroupParent, ...] = tuple(g for p in PACKAGES
                                               for g in getattr(p, "GROUP_PARENTS", ()))

# The webhook rules of the operators' kinds that carry them (``rules``: ``CrdRules``).
CRD_RULES: tuple[CrdRules, ...] = tuple(k.rules for k in BUILTIN_KINDS
                                        if isinstance(k.rules, CrdRules))


def managed_kinds(frameworks: Iterable[str] | None = None) -> frozenset[tuple[str, str]]:
    """(API group, kind) of every built-in kind, or with ``frameworks`` (Kueue names,
    ``framework_of``) of those it enables: Pods such an object controls are its own business,
    not plain Pods (Kueue's "managed ancestor" rule, which counts enabled kinds only)."""
    wanted = None if frameworks is None else frozenset(frameworks)
    return frozenset((k.api_group, k.kind) for k in BUILTIN_KINDS
                     if not k.top_level
                     and (wanted is None or framework_of(k) in wanted))


def framework_of(kind: JobKind) -> str:
    """Kueue's ``integrations.frameworks`` name of ``kind`` (``app.config.KUEUE_FRAMEWORKS``):
    ``<API group>/<kind lower-cased>`` (``"batch/job"``, ``"kubeflow.org/pytorchjob"``); Pods
    and pod groups (core group) are both ``"pod"``, as in Kueue's pod integration."""
    return "pod" if not kind.api_group else f"{kind.api_group}/{kind.kind.lower()}"


def default_registry(frameworks: Iterable[str] | None = None) -> Registry:
    """A registry of the built-in kinds (a new one per Manager: tests register their own);
    with ``frameworks`` (Kueue names, ``framework_of``), only the kinds those name."""
    wanted = None if frameworks is None else frozenset(frameworks)
    return Registry(k for k in BUILTIN_KINDS if wanted is None or framework_of(k) in wanted)
