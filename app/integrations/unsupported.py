"""Kueue labels and annotations a user may write that pykueue does not implement.

A queued object (one whose ``kueue.x-k8s.io/queue-name`` label is set) that carries one of
them is refused by pykueue's webhooks with a message naming the field, instead of being
queued as if the key were absent (Kueue would act on it):

- label ``kueue.x-k8s.io/prebuilt-workload-name`` (Kueue v1beta2 jobframework: the object
  adopts an existing Workload of that name) on any kind but the own metadata of a kind
  MultiKueue dispatches (batch/v1 Job, JobSet, the Kubeflow jobs, MPIJob, RayJob, RayCluster,
  RayService, TrainJob, AppWrapper: ``app.core.multikueue.ADAPTERS``, the worker protocol:
  ``adopts_prebuilt``);
  other kinds' Workloads pykueue always creates itself.
- annotation ``kueue.x-k8s.io/elastic-job: "true"`` (Kueue ``ElasticJobsViaWorkloadSlices``:
  a resize becomes a new Workload slice); pykueue builds no slices.
- Topology Aware Scheduling annotations on any pod template or Pod
  (``kueue.x-k8s.io/podset-required-topology``, ``-preferred-topology``,
  ``-unconstrained-topology``, ``-slice-required-topology``, ``-slice-size``,
  ``-group-name``); pykueue has no topology cache (a ResourceFlavor's ``topologyName`` is
  refused too).

On UPDATE only keys the old object did not carry (at the same place) while queued are
refused, so an object created before pykueue was installed can still be changed or cleaned
up; one stored unqueued that is given a queue name is checked as on CREATE.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from app.core.multikueue import ORIGIN_LABEL, adapter_for
from app.wire.fields import WorkloadSpecError
from app.wire.names import ADOPTED_BY_ANNOTATION, PREBUILT_WORKLOAD_LABEL, QUEUE_NAME_LABEL
from app.wire.workload import check_dns_subdomain

ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"

TAS_ANNOTATIONS = tuple(f"kueue.x-k8s.io/podset-{s}" for s in (
    "required-topology", "preferred-topology", "unconstrained-topology",
    "slice-required-topology", "slice-size", "group-name"))

_WHY_TAS = ("Topology Aware Scheduling is not supported by pykueue (no topology cache; "
            "ResourceFlavor topologyName is refused too): remove the annotation")
_WHY_PREBUILT = ("pykueue does not adopt prebuilt Workloads: it creates the object's Workload "
                 "itself; remove the label")
_WHY_ELASTIC = ("elastic jobs (Kueue ElasticJobsViaWorkloadSlices) are not supported by "
                "pykueue: remove the annotation or set it to \"false\"")
# Pod templates sit at most a few levels deep (JobSet: spec.replicatedJobs[].template.spec.
# template); the bound keeps a hostile, deeply nested body cheap to walk.
_MAX_DEPTH = 16


def _metadata(obj: Any, path: str, depth: int) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every ``metadata`` object in ``obj`` with its JSON path (``spec.template.metadata``)."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            where = f"{path}.{k}" if path else str(k)
            if k == "metadata" and isinstance(v, Mapping):
                yield where, v
            elif isinstance(v, (Mapping, list)):
                yield from _metadata(v, where, depth + 1)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _metadata(v, f"{path}[{i}]", depth + 1)


def _found(obj: Mapping[str, Any]) -> dict[str, str]:
    """``{field path: why}`` of the unsupported keys ``obj`` carries."""
    out: dict[str, str] = {}
    for where, meta in _metadata(obj, "", 0):
        labels = meta.get("labels")
        if isinstance(labels, Mapping) and labels.get(PREBUILT_WORKLOAD_LABEL):
            out[f"{where}.labels[{PREBUILT_WORKLOAD_LABEL}]"] = _WHY_PREBUILT
        anns = meta.get("annotations")
        if not isinstance(anns, Mapping):
            continue
        for key in TAS_ANNOTATIONS:
            if key in anns:
                out[f"{where}.annotations[{key}]"] = _WHY_TAS
        if str(anns.get(ELASTIC_JOB_ANNOTATION, "")).lower() in ("true", "t", "1"):
            out[f"{where}.annotations[{ELASTIC_JOB_ANNOTATION}]"] = _WHY_ELASTIC
    return out


def is_queued(obj: Mapping[str, Any]) -> bool:
    """The object's own ``kueue.x-k8s.io/queue-name`` label is set (non-empty)."""
    labels = (obj.get("metadata") or {}).get("labels") if isinstance(obj, Mapping) else None
    return isinstance(labels, Mapping) and bool(labels.get(QUEUE_NAME_LABEL))


def unsupported_errors(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """Errors (``<field path>: <why>``) for the unsupported Kueue keys a queued ``new``
    object carries and ``old`` (the stored object on UPDATE, None on CREATE) did not carry
    while queued. On an object of a kind that ``adopts_prebuilt``, queued or not, its own
    ``kueue.x-k8s.io/prebuilt-workload-name`` label must be a Workload name (a DNS-1123
    subdomain): Kueue v0.17.1 ``ValidateJobOnCreate`` (``ValidateLabelAsCRDName``) runs for
    every object its webhooks see, on CREATE and, for a Job or JobSet, on every UPDATE; pykueue
    checks every CREATE and UPDATE (its webhooks see an unqueued object under the
    ``unlabelled-jobs`` overlay, whose Workload it then adopts the same way, and one whose
    queue name an UPDATE removes)."""
    field = f"metadata.labels[{PREBUILT_WORKLOAD_LABEL}]"
    value = _prebuilt(new) if adopts_prebuilt(new) else None
    changed: list[str] = []
    if is_queued(new) and value and old is not None and _prebuilt(old) != value:
        # Set on CREATE, then immutable (Kueue lets it change while the Job is suspended).
        changed = [f"{field}: field is immutable (set it when the Job is created)"]
    elif value:
        try:
            check_dns_subdomain(str(value), field)
        except WorkloadSpecError as exc:
            changed = [str(exc)]
    if not is_queued(new):
        return changed
    before = _found(old) if isinstance(old, Mapping) and is_queued(old) else {}
    if adopts_prebuilt(new):
        before = {**before, field: ""}
    return changed + [f"{where}: {why}" for where, why in sorted(_found(new).items())
                      if where not in before]


def _prebuilt(obj: Mapping[str, Any] | None) -> Any:
    labels = ((obj or {}).get("metadata") or {}).get("labels")
    return labels.get(PREBUILT_WORKLOAD_LABEL) if isinstance(labels, Mapping) else None


def adopts_prebuilt(obj: Mapping[str, Any]) -> bool:
    """An object of a kind MultiKueue dispatches (``ADAPTERS``: batch/v1 Job, JobSet, the
    Kubeflow jobs, MPIJob v2beta1, KubeRay's RayJob, RayCluster and RayService, TrainJob,
    AppWrapper) adopts the Workload its own ``kueue.x-k8s.io/prebuilt-workload-name`` label
    names (the MultiKueue worker protocol, Kueue jobframework); other kinds do not."""
    return adapter_for(str(obj.get("apiVersion", "")), str(obj.get("kind", ""))) is not None


def adoptable_copy(obj: Mapping[str, Any], wl: Mapping[str, Any]) -> bool:
    """Whether ``obj`` (of a kind ``adopts_prebuilt``) may adopt Workload ``wl``: its own
    ``kueue.x-k8s.io/prebuilt-workload-name`` label names ``wl``, and ``wl`` is a MultiKueue
    copy (label ``kueue.x-k8s.io/multikueue-origin``, which only a Workload writer sets: tenants
    do not). Ownerless is checked by the caller. Departure from Kueue, which adopts any
    prebuilt Workload: otherwise a tenant's new Job could take over the admission of an
    orphaned Workload (``delete --cascade=orphan``) whose pods still run. A copy adopted
    once (annotation ``pykueue.dev/adopted-by: <Job uid>``, written at the adoption) is
    adopted again only by that Job: the worker's Job deleted with ``--cascade=orphan``
    leaves the copy ownerless and its pods running, and the manager re-creates the Job,
    which would otherwise start a second set of pods on the one admission. An object being
    deleted (``deletionTimestamp``) adopts nothing (Kueue v0.17.1 ``ReconcileGenericJob``
    only drops its finalizers): after ``delete --cascade=orphan`` the garbage collector has
    stripped its owner reference from the copy, and taking the copy back would make the
    collector delete it as garbage once the Job is gone, while the orphaned pods run on."""
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return False
    meta = wl.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not (adopts_prebuilt(obj) and _prebuilt(obj) == meta.get("name")
            and isinstance(labels, Mapping) and ORIGIN_LABEL in labels):
        return False
    adopted_by = (meta.get("annotations") or {}).get(ADOPTED_BY_ANNOTATION)
    return not adopted_by or adopted_by == str((obj.get("metadata") or {}).get("uid", ""))
