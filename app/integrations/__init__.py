"""Job kinds pykueue queues (Kueue's integrations): one folder per kind, each with a ``KIND``
(``app.integrations.framework.JobKind``), registered below."""

from __future__ import annotations

from collections.abc import Iterable

from app.integrations import batchjob, jobset, kubeflow, mpijob, pod, podgroup, ray
from app.integrations.crdrules import CrdRules
from app.integrations.framework import JobKind, Registry

# Adding a job kind: its folder, and one line here.
BUILTIN_KINDS: tuple[JobKind, ...] = (
    batchjob.KIND,
    pod.KIND,
    podgroup.KIND,
    jobset.KIND,
    *kubeflow.KINDS,
    mpijob.KIND,
    *ray.KINDS,
)

# The webhook rules of the operators' kinds that carry them (``rules``: ``CrdRules``), served by
# ``app.api.webhook`` at each one's ``mutate_path`` / ``validate_path``.
CRD_RULES: tuple[CrdRules, ...] = tuple(r for k in BUILTIN_KINDS
                                        if isinstance(r := getattr(k, "rules", None), CrdRules))


def managed_kinds(frameworks: Iterable[str] | None = None) -> frozenset[tuple[str, str]]:
    """(API group, kind) of every built-in kind, or with ``frameworks`` (Kueue names,
    ``framework_of``) of those it enables: Pods such an object controls are its own business,
    not plain Pods (Kueue's "managed ancestor" rule, which counts enabled kinds only)."""
    wanted = None if frameworks is None else frozenset(frameworks)
    return frozenset((k.api_group, k.kind) for k in BUILTIN_KINDS
                     if not getattr(k, "top_level", False)
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
