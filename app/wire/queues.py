"""CRD objects (plain JSON dicts from the watch) -> the core's configuration dataclasses.

Kueue v1beta2 field names (reference section 1): ResourceFlavor ``spec.nodeLabels``,
``nodeTaints``, ``tolerations``; ClusterQueue ``spec.resourceGroups``, ``cohortName`` (the
pre-v1beta2 ``cohort`` accepted as a deprecated alias), ``queueingStrategy``,
``namespaceSelector`` (unset = no namespace, ``{}`` = all), ``preemption``,
``flavorFungibility``, ``stopPolicy``, ``admissionScope``; LocalQueue ``spec.clusterQueue``,
``fairSharing.weight``; WorkloadPriorityClass
``value``; Cohort ``spec.parentName``, ``resourceGroups``, ``fairSharing.weight``. Quantities
are parsed once here into exact integers (``app.core.quantity``).

A ClusterQueue that cannot be parsed (a malformed quantity, say) is returned with no resource
groups, its cohort and the rest of its spec, and a ``ConfigProblem`` naming the field, also in
``ClusterQueueSpec.object_problem``: the core keeps it inactive in its cohort with the last
readable quotas (``Scheduler.add_cluster_queue``), rather than crashing anything or letting its
usage leave the cohort. A ClusterQueue being deleted (``metadata.deletionTimestamp``, held by
the ``kueue.x-k8s.io/resource-in-use`` finalizer while Workloads are admitted in it) is read
the same way with reason ``Terminating``, as Kueue reports it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from app.core.multikueue import MULTIKUEUE_CONTROLLER
from app.core.quantity import (
    US,
    QuantityError,
    format_quantity,
    is_bytes,
    is_milli,
    parse_duration_us,
    parse_exact,
    parse_quantity,
)
from app.core.scheduling_cycle import MIN_RUNTIME_ANNOTATION, RECLAIM_BACKOFF_ANNOTATION
from app.core.spec import (
    AdmissionCheckRef,
    AdmissionMode,
    BorrowWithinCohort,
    ClusterQueueSpec,
    CohortSpec,
    ConfigProblem,
    FlavorFungibility,
    FlavorQuotas,
    FungibilityPolicy,
    FungibilityPreference,
    LabelSelector,
    LabelSelectorRequirement,
    LocalQueue,
    PreemptionPolicy,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
    WithinClusterQueue,
)
from app.core.types import ClusterQueueName, CohortName, FlavorName, ResourceName
from app.core.workload import Taint
from app.wire.fields import Obj, WorkloadSpecError, mapping, sequence, string
from app.wire.podtemplate import tolerations


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def taints(value: Any, field: str) -> tuple[Taint, ...]:
    """A ResourceFlavor's ``spec.nodeTaints`` (core/v1 Taint: ``key`` required, ``effect``
    one of NoSchedule, PreferNoSchedule, NoExecute; default NoSchedule as the CRD's) ->
    ``Taint``s. Raises ``WorkloadSpecError`` naming ``<field>[i].<key>``."""
    out = []
    for i, t in enumerate(sequence(value, field)):
        where = f"{field}[{i}]"
        t = mapping(t, where, required=True)
        key = string(t.get("key"), f"{where}.key")
        if not key:
            raise WorkloadSpecError(f"{where}.key", "required")
        effect = string(t.get("effect"), f"{where}.effect", default="NoSchedule")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise WorkloadSpecError(f"{where}.effect", "must be NoSchedule, PreferNoSchedule or "
                                    f"NoExecute, got {effect!r}")
        out.append(Taint(key=key, value=string(t.get("value"), f"{where}.value"), effect=effect))
    return tuple(out)


def resource_flavor(obj: Obj) -> ResourceFlavor:
    """ResourceFlavor object (Kueue v1beta2 ``spec.nodeLabels``, ``nodeTaints``,
    ``tolerations``) -> ``ResourceFlavor``. Raises ``WorkloadSpecError`` naming the field
    of a label, taint or toleration the API server should have refused."""
    spec = mapping(obj.get("spec"), "spec")
    labels = mapping(spec.get("nodeLabels"), "spec.nodeLabels")
    return ResourceFlavor(
        name=FlavorName(_name(obj)),
        node_labels={str(k): string(v, f"spec.nodeLabels[{k}]") for k, v in labels.items()},
        node_taints=taints(spec.get("nodeTaints"), "spec.nodeTaints"),
        tolerations=tolerations(spec.get("tolerations"), "spec.tolerations"),
    )


def label_selector(sel: Obj | None) -> LabelSelector | None:
    """metav1 LabelSelector dict -> ``LabelSelector``; ``None`` stays ``None`` (no match)."""
    if sel is None:
        return None
    return LabelSelector(
        match_labels=dict(sel.get("matchLabels") or {}),
        match_expressions=tuple(
            LabelSelectorRequirement(key=str(e.get("key", "")), operator=str(e.get("operator", "")),
                                     values=tuple(e.get("values") or ()))
            for e in sel.get("matchExpressions") or []),
    )


def cohort_of(spec: Obj) -> tuple[str | None, str | None]:
    """(cohort, warning): ``cohortName``, else the deprecated ``cohort`` with a warning."""
    name = spec.get("cohortName") or None
    alias = spec.get("cohort") or None
    if alias and not name:
        return alias, ("spec.cohort is deprecated in kueue.x-k8s.io/v1beta2; "
                       "use spec.cohortName")
    return name, None


def _quota(r: Obj, where: str) -> ResourceQuota:
    res = str(r.get("name", ""))

    def amount(field: str) -> int | None:
        v = r.get(field)
        return None if v is None else parse_quantity(v, res, field=f"{where}.{field}")

    return ResourceQuota(name=ResourceName(res), nominal=amount("nominalQuota") or 0,
                         borrowing_limit=amount("borrowingLimit"),
                         lending_limit=amount("lendingLimit"))


def _resource_groups(spec: Obj) -> tuple[tuple[ResourceGroup, ...], ConfigProblem | None]:
    """``spec.resourceGroups`` (ClusterQueue and Cohort share the struct) -> groups, or no
    groups and the problem naming the first unreadable quantity."""
    groups: list[ResourceGroup] = []
    try:
        for gi, g in enumerate(spec.get("resourceGroups") or []):
            flavors = []
            for fi, f in enumerate(g.get("flavors") or []):
                where = f"spec.resourceGroups[{gi}].flavors[{fi}]"
                flavors.append(FlavorQuotas(
                    name=FlavorName(str(f.get("name", ""))),
                    resources=tuple(_quota(r, f"{where}.resources[{ri}]")
                                    for ri, r in enumerate(f.get("resources") or []))))
            groups.append(ResourceGroup(
                covered_resources=tuple(ResourceName(str(r))
                                        for r in g.get("coveredResources") or []),
                flavors=tuple(flavors)))
    except QuantityError as exc:
        return (), ConfigProblem("InvalidSpec", exc.field, f"Can't admit new workloads: {exc}")
    return tuple(groups), None


def fair_weight_milli(spec: Obj) -> int:
    """``spec.fairSharing.weight`` (Kueue v1beta2, a Quantity, default 1) in milli-units;
    ``QuantityError`` when malformed or negative."""
    w = (spec.get("fairSharing") or {}).get("weight")
    if w is None:
        return 1000
    return parse_quantity(w, "cpu", field="spec.fairSharing.weight")  # cpu: milli-units


def _weight(spec: Obj) -> tuple[int, ConfigProblem | None]:
    try:
        return fair_weight_milli(spec), None
    except QuantityError as exc:
        return 1000, ConfigProblem("InvalidSpec", exc.field, f"Can't admit new workloads: {exc}")


def _durations(obj: Obj) -> tuple[float | None, float | None, ConfigProblem | None]:
    """(min runtime, reclaim backoff) in seconds from a ClusterQueue's pykueue annotations,
    or the problem naming the unreadable one (a Go-style duration: ``90s``, ``5m``, ``1h``)."""
    ann = (obj.get("metadata") or {}).get("annotations") or {}
    out: list[float | None] = []
    for key in (MIN_RUNTIME_ANNOTATION, RECLAIM_BACKOFF_ANNOTATION):
        v = ann.get(key)
        if v is None:
            out.append(None)
            continue
        try:
            out.append(parse_duration_us(v) / US)
        except ValueError as exc:
            return None, None, ConfigProblem(
                "InvalidSpec", f"metadata.annotations[{key}]",
                f"Can't admit new workloads: metadata.annotations[{key}]: {exc}")
    return out[0], out[1], None




def cluster_queue(obj: Obj) -> tuple[ClusterQueueSpec, ConfigProblem | None]:
    """ClusterQueue object -> (spec, parse problem or None). Enum values are passed through
    as written so ``validate_cluster_queue`` can name an unsupported one (e.g. an unknown
    ``spec.admissionScope.admissionMode``; UsageBasedAdmissionFairSharing takes effect when
    pykueue's ``admission_fair_sharing`` setting is enabled, as Kueue's Configuration
    ``admissionFairSharing``)."""
    name = ClusterQueueName(_name(obj))
    spec = obj.get("spec") or {}
    groups, problem = _resource_groups(spec)
    weight, bad_weight = _weight(spec)
    min_runtime, backoff, bad_duration = _durations(obj)
    problem = problem or bad_weight or bad_duration
    mode = (spec.get("admissionScope") or {}).get("admissionMode")
    if problem is None and (obj.get("metadata") or {}).get("deletionTimestamp"):
        problem = ConfigProblem("Terminating", "metadata.deletionTimestamp",
                                "Can't admit new workloads: clusterQueue is terminating")
    cohort, _ = cohort_of(spec)
    pre = spec.get("preemption") or {}
    bwc = pre.get("borrowWithinCohort") or {}
    ff = spec.get("flavorFungibility") or {}
    return ClusterQueueSpec(
        name=name,
        resource_groups=tuple(groups),
        cohort=CohortName(cohort) if cohort else None,
        queueing_strategy=_enum(QueueingStrategy, spec.get("queueingStrategy"),
                                QueueingStrategy.BEST_EFFORT_FIFO),
        namespace_selector=label_selector(spec.get("namespaceSelector")),
        preemption=PreemptionPolicy(
            within_cluster_queue=_enum(WithinClusterQueue, pre.get("withinClusterQueue"),
                                       WithinClusterQueue.NEVER),
            reclaim_within_cohort=_enum(ReclaimWithinCohort, pre.get("reclaimWithinCohort"),
                                        ReclaimWithinCohort.NEVER),
            borrow_within_cohort=_enum(BorrowWithinCohort, bwc.get("policy"),
                                       BorrowWithinCohort.NEVER),
            max_priority_threshold=bwc.get("maxPriorityThreshold"),
        ),
        flavor_fungibility=FlavorFungibility(
            when_can_borrow=_enum(FungibilityPolicy, ff.get("whenCanBorrow"),
                                  FungibilityPolicy.MAY_STOP_SEARCH),
            when_can_preempt=_enum(FungibilityPolicy, ff.get("whenCanPreempt"),
                                   FungibilityPolicy.TRY_NEXT_FLAVOR),
            preference=_enum(FungibilityPreference, ff.get("preference"), None),
        ),
        stop_policy=_enum(StopPolicy, spec.get("stopPolicy"), StopPolicy.NONE),
        object_problem=problem,
        fair_weight_milli=weight,
        min_runtime_s=min_runtime,
        reclaim_backoff_s=backoff,
        admission_mode=_enum(AdmissionMode, mode, AdmissionMode.NONE),
        admission_checks=_admission_checks(spec),
    ), problem


def _admission_checks(spec: Obj) -> tuple[AdmissionCheckRef, ...]:
    """``spec.admissionChecksStrategy.admissionChecks[]`` (Kueue v1beta2; the v1beta1
    ``spec.admissionChecks`` list is not in the v1beta2 schema) -> refs, in order."""
    strategy = spec.get("admissionChecksStrategy") or {}
    return tuple(
        AdmissionCheckRef(name=str(c.get("name", "")),
                          on_flavors=tuple(FlavorName(str(f)) for f in c.get("onFlavors") or ()))
        for c in strategy.get("admissionChecks") or () if isinstance(c, Mapping))


def admission_check(obj: Obj) -> tuple[str, bool]:
    """AdmissionCheck object (Kueue v1beta2: ``spec.controllerName``, ``spec.parameters``,
    ``status.conditions[type=Active]``) -> (name, active). The check is active only while its
    ``Active`` condition is True: the controller named by ``controllerName`` sets it, and
    until it does, ClusterQueues naming the check admit nothing (Kueue's rule)."""
    meta = obj.get("metadata") or {}
    conds = (obj.get("status") or {}).get("conditions") or []
    active = any(isinstance(c, Mapping) and c.get("type") == "Active"
                 and c.get("status") == "True" for c in conds)
    return str(meta.get("name", "")), active


def is_multikueue_check(obj: Obj) -> bool:
    """Whether AdmissionCheck ``obj``'s ``spec.controllerName`` is MultiKueue's (Kueue: a
    ClusterQueue may name one such check, for all its flavors)."""
    return (obj.get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER


def cohort(obj: Obj) -> tuple[CohortSpec, ConfigProblem | None]:
    """Cohort object (Kueue v1beta2 ``Cohort``: ``spec.parentName``, ``spec.resourceGroups``,
    ``spec.fairSharing.weight``) -> (spec, parse problem or None). An unreadable quantity
    gives no resource groups and the problem (the core then disables the cohort's subtree
    with it rather than guess its quota)."""
    spec = obj.get("spec") or {}
    groups, problem = _resource_groups(spec)
    weight, bad_weight = _weight(spec)
    problem = problem or bad_weight
    parent = spec.get("parentName") or None
    return CohortSpec(
        name=CohortName(_name(obj)),
        parent=CohortName(str(parent)) if parent else None,
        resource_groups=groups,
        fair_weight_milli=weight,
        object_problem=problem,
    ), problem


def _enum(enum: Any, value: Any, default: Any) -> Any:
    """The enum member for ``value``; an unknown string is kept as is (validation names it)."""
    if value is None or value == "":
        return default
    return enum._value2member_map_.get(value, value)


def local_queue(obj: Obj) -> LocalQueue:
    """LocalQueue object (Kueue v1beta2 ``spec.clusterQueue``, ``spec.stopPolicy``,
    ``spec.fairSharing.weight``: its weight under Admission Fair Sharing, a Quantity, default
    1) -> ``LocalQueue``. A ``stopPolicy`` value the CRD would refuse reads as ``Hold``: a
    queue asked to stop in a way pykueue cannot read admits nothing rather than everything.
    Raises ``WorkloadSpecError`` naming ``spec.fairSharing.weight`` when the weight is
    malformed or negative (the CRD refuses both)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    stop = spec.get("stopPolicy") or StopPolicy.NONE
    policy = StopPolicy._value2member_map_.get(stop, StopPolicy.HOLD)
    try:
        weight = fair_weight_milli(spec)
    except QuantityError as exc:
        raise WorkloadSpecError(exc.field, exc.why) from exc
    return LocalQueue(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
                      cluster_queue=ClusterQueueName(str(spec.get("clusterQueue", ""))),
                      stop_policy=policy,  # type: ignore[arg-type]
                      fair_weight_milli=weight)


def consumed_resources(consumed: Mapping[ResourceName, float]) -> dict[str, str]:
    """The core's decayed consumed resources (``LocalQueueFairSharing.consumed``: milli-CPU,
    bytes, counts; floats) -> Kueue LocalQueue
    ``status.fairSharing.admissionFairSharingStatus.consumedResources`` (a ResourceList):
    rounded down to a milli-unit of the resource's Kubernetes unit (whole bytes), as Kueue's
    ``MulByFloat`` rounds down."""
    out: dict[str, str] = {}
    for r in sorted(consumed):
        v = max(0.0, consumed[r])
        if is_milli(r) or is_bytes(r):
            out[r] = format_quantity(math.floor(v), r)
        else:
            milli = math.floor(v * 1000)
            out[r] = format_quantity(milli // 1000, r) if milli % 1000 == 0 else f"{milli}m"
    return out


def consumed_from_status(obj: Obj) -> dict[ResourceName, float] | None:
    """A LocalQueue's persisted ``status.fairSharing.admissionFairSharingStatus
    .consumedResources`` in the core's units (None when absent or unreadable: the history
    then starts empty, as for a new LocalQueue)."""
    st = (((obj.get("status") or {}).get("fairSharing") or {})
          .get("admissionFairSharingStatus") or {})
    raw = st.get("consumedResources")
    if not isinstance(raw, Mapping):
        return None
    out: dict[ResourceName, float] = {}
    try:
        for r, v in raw.items():
            exact = parse_exact(v, field=f"consumedResources[{r}]")
            out[ResourceName(str(r))] = float(exact * 1000 if is_milli(str(r)) else exact)
    except QuantityError:
        return None
    return out


def priority_class_value(obj: Obj) -> int:
    """WorkloadPriorityClass / PriorityClass ``value`` (0 when missing)."""
    return int(obj.get("value") or 0)
