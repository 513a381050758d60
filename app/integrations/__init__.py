"""Job kinds pykueue queues (Kueue's integrations): one folder per kind, each with a ``KIND``
(``app.integrations.framework.JobKind``), registered below."""

from __future__ import annotations

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


def managed_kinds() -> frozenset[tuple[str, str]]:
    """(API group, kind) of every built-in kind: Pods such an object controls are its own
    business, not plain Pods (Kueue's "managed ancestor" rule)."""
    return frozenset((k.api_group, k.kind) for k in BUILTIN_KINDS
                     if k.kind not in ("Pod", "PodGroup"))


def default_registry() -> Registry:
    """A registry of the built-in kinds (a new one per Manager: tests register their own)."""
    return Registry(BUILTIN_KINDS)
