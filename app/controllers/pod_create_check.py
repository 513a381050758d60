"""What the Pod webhook checks at CREATE of a pod whose controller is an object of a job kind
pykueue manages, run under a queued object (``PodCreateCheck``), from the reconciler's stores.

Kueue v0.17.1 leaves such a pod to its owner: it is neither gated nor counted, and its
operator is trusted to make only the pods it was admitted for. A tenant who may create Pods
in the namespace can name an admitted object as the controller of pods of its own. The
scheduler extender catches some of them (a pod requesting ``nvidia.com/gpu`` not covered by
an admission, or bigger than its podSet's pods), but kube-scheduler calls it only for pods
requesting that resource, and it does not count pods. So, beyond Kueue, a pod created under a
queued object (its controller ownerReference names a stored object of a registered kind,
uid included, whose top-most queued ancestor, or itself, has a Workload) is refused when:

- no store holds its controller (that name and uid) and it asks devices or GPUs (DRA claims
  or a resource ``_device_requests`` counts): nothing else would see it;
- its controller is a child the ancestor's kind disowns (``KindDefaults.withholds``: a
  RayCluster claiming a RayJob it does not run for);
- its controller is a batch Job whose ``spec.selector`` does not take it (the Job
  controller neither counts nor keeps it: it releases it);
- that Workload is not admitted and the pod asks devices or GPUs: DRA claims
  (``spec.resourceClaims``) or a resource ``_device_requests`` counts (a DeviceClass's implicit
  extended resource ``deviceclass.resource.kubernetes.io/<class>``, a
  ``resources.deviceClassMappings`` name, ``extender.gpu_resource``);
- the Workload is admitted and its controller's kind names the podSets whose pods it makes
  itself (``KindDefaults.direct_podsets``: a PyTorchJob's replica types, a RayCluster's
  groups, a SparkApplication's driver, an AppWrapper's Pod components; none for a JobSet or
  a RayJob, whose pods run under objects their operators make), and its
  ``kueue.x-k8s.io/podset`` label names none of them;
- its pod-level ``resourceClaims`` are not among those of its podSet's template in the
  admitted Workload (a batch Job's pod: of the Job's template, which the Job and child-Job
  rules hold to the admission; a kind without ``direct_podsets``: of any podSet's), or take,
  with the ResourceClaimTemplates as stored now, more devices than its podSet's
  ``podSetAssignments[].resourceUsage`` gives a pod (a template made again bigger);
- it asks more of such a resource than a pod of that template (as the API server makes
  it: ``made_pod_requests``);
- with ``direct_podsets``, its ``spec.nodeSelector`` lacks the node labels of a flavor its
  podSet was admitted on (``_placement_errors``);
- with ``direct_podsets``, the pods not terminal (``pod_holds_quota``) already under its
  controller with its podSet label, and those allowed here in the last ``LEDGER_SECONDS``
  that the Pod store does not show yet, reach the podSet's admitted count
  (``status.admission.podSetAssignments[].count``, else ``spec.podSets[].count``). The
  podSets of an object the queued one's operator made are the queued kind's names for
  them where it has its own (``podsets_under``: an AppWrapper's ``<name>-<n>`` on a
  wrapped PyTorchJob's pods).

A pod made by a pod of a queued object whose pods make pods (``made_by_queued_pod``: a
Spark executor, controlled by its driver) is held the same way to the podSets its object's
pods make (``KindDefaults.made_podsets``), its count taken over the object's made pods of
every maker (``made_pods_of``).

Answers are synchronous dict lookups (the pods of a controller through the Pod store's
index by controller uid). The ledger of allowed creates is this process's (replicas of
pykueue behind one Service each keep their own): the reconciler deletes what got past it
(``JobReconciler._delete_excess``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from app.core.quantity import parse_quantity
from app.integrations.admitted_pods import admitted, admitted_counts
from app.integrations.framework import (
    JobKind,
    Registry,
    lookup,
    made_pods_of,
    pod_holds_quota,
    pod_of,
    podsets_under,
    queued_top,
)
from app.integrations.podsets import InjectionConflict, podset_assignments, podset_scheduling
from app.integrations.reconciler import (
    component_pods,
    holding_pods_controlled_by,
)
from app.kube.context import CHILD_JOB_STORES, JOB, LR, POD, RCT, RF, WL, Context, in_namespace
from app.wire.dra import pod_claim_requests
from app.wire.fields import Obj, WorkloadSpecError
from app.wire.names import PODSET_LABEL
from app.wire.owners import OwnerRef, controller_of_object
from app.wire.podadjust import CONTAINER, LimitSummary, made_pod_requests, summarize
from app.wire.podtemplate import pod_requests
from app.wire.queues import label_selector

# How long a pod allowed at CREATE counts for its podSet before the Pod store shows it: far
# above the watch's usual delay; a create refused after this webhook (by another) holds its
# place this long at most, and the operator's retry then passes.
LEDGER_SECONDS = 30.0
_LEDGER_KEYS_MAX = 4096  # controllers with entries, before every expired entry is dropped
# Kubernetes DRA extended resources: a container asking this prefix + a DeviceClass name gets
# a claim the scheduler makes for it (feature DRAExtendedResource).
DRA_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"


def container_limits(ctx: Context, namespace: str) -> LimitSummary | None:
    """The ``Container`` LimitRange summary of ``namespace`` (``podadjust.summarize``),
    None without one. Raises ``WorkloadSpecError`` for an unreadable LimitRange."""
    return summarize(in_namespace(ctx, LR, namespace)).get(CONTAINER)


def unlabelled_job(ctx: Context, key: str) -> Obj | None:
    """Batch Job ``namespace/name`` from the stores of Jobs without a queue name
    (``CHILD_JOB_STORES``, watched while the Job kind's own store is selective)."""
    for store in CHILD_JOB_STORES:
        try:
            found = ctx.store(store).get(key)
        except KeyError:
            continue  # not watched
        if found is not None:
            return found
    return None


def stored_controller(ctx: Context, registry: Registry | None, namespace: str,
                      ref: OwnerRef | None) -> tuple[JobKind, Obj | None] | None:
    """The registered kind (not a top-level one) of controller ownerReference ``ref`` of a
    pod of ``namespace`` and that object as stored, None for the object when the stores
    hold none of that name and uid; None when ``ref`` is of no such kind (or no registry)."""
    if ref is None or registry is None:
        return None
    kind = registry.kind_for(ref.group, ref.kind)
    if kind is None or kind.top_level:
        return None
    owner = lookup(kind, ctx, namespace, ref.name)
    if owner is None and kind.key == JOB:
        # An unlabelled batch Job (a JobSet's, an MPIJob's launcher) is in a store of its
        # own: its pods run on its ancestor's admission.
        owner = unlabelled_job(ctx, f"{namespace}/{ref.name}")
    if owner is None or (ref.uid and owner["metadata"].get("uid") != ref.uid):
        return kind, None
    return kind, owner


def made_by_queued_pod(ctx: Context, registry: Registry | None, pod: Obj
                       ) -> tuple[JobKind, Obj, Obj, tuple[JobKind, Obj]] | None:
    """For ``pod`` whose controller ownerReference names a core Pod: (kind, object, maker,
    the queued object covering it) when that Pod is a stored pod of a queued object
    (``queued_top``) of a kind whose pods make pods (``pods_make_pods``: a
    SparkApplication's driver, the controller of its executors in Spark 4.0), and ``pod``
    is one of that object's pods by ``pod_of``'s rule (its name label, one hop: the maker
    is the object's own pod, never a pod made by one).
    None otherwise, or without a registry or a watched Pod store. Kueue v0.17.1
    ``FindAncestorJobManagedByKueue`` walks the same chain (pod, Pod, SparkApplication), so
    such a pod is its ancestor's business: not gated, not a Workload of its own."""
    ref = controller_of_object(pod)
    informers = getattr(ctx, "informers", None)
    if registry is None or ref is None or not ref.is_pod \
            or informers is None or POD not in informers.informers:
        return None
    ns = str((pod.get("metadata") or {}).get("namespace", ""))
    maker = ctx.store(POD).get(f"{ns}/{ref.name}")
    if maker is None or (maker.get("metadata") or {}).get("uid") != ref.uid:
        return None
    found = stored_controller(ctx, registry, ns, controller_of_object(maker))
    if found is None or found[1] is None or not getattr(found[0], "pods_make_pods", False):
        return None
    kind, owner = found
    meta = owner.get("metadata") or {}
    if not pod_of(kind, pod, str(meta.get("name", "")), str(meta.get("uid", "")), ctx=ctx):
        return None
    top = queued_top(ctx, registry, kind, owner)
    return None if top is None else (kind, owner, maker, top)


def pod_claims(pod_or_template: Any) -> Counter[str]:
    """The entries of ``spec.resourceClaims`` of a pod or pod template, each as one
    comparable string (its fields, empty ones left out): what decides which DRA devices
    the pod is allocated (a container's ``resources.claims`` only shares them out)."""
    spec = pod_or_template.get("spec") if isinstance(pod_or_template, Mapping) else None
    claims = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    if not isinstance(claims, list):
        return Counter()
    return Counter(json.dumps({k: v for k, v in c.items() if v not in (None, "", {}, [])}
                              if isinstance(c, Mapping) else c, sort_keys=True, default=str)
                   for c in claims)


def _podset_templates(wl: Obj) -> dict[str, Obj]:
    """PodSet name -> its pod template in Workload ``wl``."""
    return {str(ps.get("name", "")): ps.get("template") or {}
            for ps in (wl.get("spec") or {}).get("podSets") or [] if isinstance(ps, Mapping)}


def _shown(claims: Counter[str]) -> str:
    return ", ".join(sorted(claims.elements())) or "none"


def _claims_errors(claims: Counter[str], allowed: list[Obj], which: str, under: str
                   ) -> list[str]:
    """Why pod-level ``claims`` (``pod_claims``) are among those of no template of
    ``allowed`` (module doc), or []."""
    if not claims or any(not claims - pod_claims(t) for t in allowed):
        return []
    theirs = " | ".join(_shown(pod_claims(t)) for t in allowed)
    return [f"spec.resourceClaims: the pod claims {_shown(claims)}, beyond the claims of "
            f"{which} in {under}'s admission ({theirs})"]


def job_selects(job: Obj, labels: Mapping[str, Any]) -> bool:
    """Whether batch Job ``job``'s ``spec.selector`` takes a pod of ``labels``; a Job
    without a readable selector takes every pod (the API server always sets one)."""
    selector = (job.get("spec") or {}).get("selector")
    if not isinstance(selector, dict):
        return True
    try:
        found = label_selector(selector)
    except (AttributeError, TypeError):
        return True
    return found is None or found.matches({str(k): str(v) for k, v in labels.items()})


class PodCreateCheck:
    """The rules of the module doc over the reconciler's stores (``ctx``) and the kinds of
    ``registry``; ``clock``: seconds, monotonic (the ledger's)."""

    def __init__(self, ctx: Context, registry: Registry | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ctx = ctx
        self.registry = registry
        self.clock = clock
        # (controller uid, podSet) -> {pod uid (or name): when its place lapses}
        self._ledger: dict[tuple[str, str], dict[str, float]] = {}
        self._ledger_key: dict[str, tuple[str, str]] = {}  # pod uid -> its ledger key

    def on_pod(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """The Pod store's handler: a pod the store shows (made, changed or gone) leaves the
        ledger, where the store itself now counts it (or, gone, no longer holds)."""
        meta = (new or old or {}).get("metadata") or {}
        uid = str(meta.get("uid") or meta.get("name") or "")
        key = self._ledger_key.pop(uid, None)
        if key is not None and key in self._ledger:
            self._ledger[key].pop(uid, None)
            if not self._ledger[key]:
                del self._ledger[key]

    def errors(self, pod: Obj, *, dry_run: bool = False) -> list[str] | None:
        """Errors (each naming a field) for creating ``pod`` (core/v1, as the API server
        will store it: defaulted, name and uid set); ``[]`` to allow; None when unknown
        (stores not synced, no registry). ``dry_run``: a dry-run create, which takes no
        place in the ledger. Raises nothing for a malformed pod or object (read leniently;
        an object whose spec cannot be read is not checked)."""
        if not self.ctx.synced or self.registry is None:
            return None
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
        ns = str(meta.get("namespace", ""))
        ref = controller_of_object(pod)
        made = made_by_queued_pod(self.ctx, self.registry, pod)
        if made is not None and ref is not None:
            # A Spark executor: its driver made it, so its podSet is one the object's pods
            # make (``made_podsets``), counted over the object's made pods of every maker
            # (``made_pods_of``: a replaced driver's executors may still run).
            kind, owner, maker, top = made
            return self._admitted_errors(
                pod, ns, kind, owner, top, kind.made_podsets(owner),
                str((owner.get("metadata") or {}).get("uid", "")),
                f"the pods of {kind.kind} {(owner.get('metadata') or {}).get('name')} "
                f"(Pod {(maker.get('metadata') or {}).get('name')} made this one)", dry_run,
                holders=made_pods_of(self.ctx, kind, owner))
        found = stored_controller(self.ctx, self.registry, ns, ref)
        if found is None or ref is None:
            return []  # not controlled by a managed kind: other rules' business
        kind, owner = found
        if owner is None:
            # Left ungated for an owner no store holds (of that name and uid), a pod asking
            # DRA devices is seen by nothing else (kube-scheduler sends it to no extender).
            # An operator's pod of an object just made is refused until the store shows
            # the object, and its retry passes.
            if not pod_claims(pod) and not self._device_requests(pod):
                return []
            return [f"metadata.ownerReferences: the pod asks devices or GPUs under "
                    f"{kind.kind} {ns}/{ref.name} (uid {ref.uid}), which pykueue does not "
                    "know: no admission covers it"]
        top = queued_top(self.ctx, self.registry, kind, owner)
        if top is None:
            return []  # an object pykueue does not queue
        top_kind, top_obj = top
        if top_obj is not owner:
            why = str(kind.withholds(self.ctx, owner, top_kind, top_obj) or "")
            if why:  # a RayCluster claiming a RayJob it does not run for, say
                return [f"metadata.ownerReferences: {why}"]
        under = f"{top_kind.kind} {ns}/{(top_obj.get('metadata') or {}).get('name')}"
        mine = f"{kind.kind} {(owner.get('metadata') or {}).get('name')}"
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        if kind.key == JOB and not job_selects(owner, labels):
            # The Job controller neither counts nor keeps such a pod (it releases it), and
            # kube-scheduler sends one without nvidia.com/gpu to no extender.
            return [f"metadata.labels: the pod does not match the spec.selector of {mine}, "
                    "its controller, so the Job does not count it and no admission of "
                    f"{under} covers it"]
        try:
            direct = podsets_under(kind, owner, top)
        except WorkloadSpecError:
            direct = None
        # Counted per component of an AppWrapper (every object its generateName prefix
        # names while being made), in a ledger of the AppWrapper's (brk36b B2).
        holders = component_pods(self.ctx, kind, owner, top, direct)
        if holders is not None:
            mine = f"the {kind.kind}s of its component ({mine} among them)"
        count_uid = ref.uid if holders is None else \
            str((top_obj.get("metadata") or {}).get("uid") or ref.uid)
        return self._admitted_errors(pod, ns, kind, owner, top, direct, count_uid, mine,
                                     dry_run, holders)

    def _admitted_errors(self, pod: Obj, ns: str, kind: JobKind, owner: Obj,
                         top: tuple[JobKind, Mapping[str, Any]],
                         podsets: frozenset[str] | None, count_uid: str, mine: str,
                         dry_run: bool, holders: list[Obj] | None = None) -> list[str]:
        """The rules of the module doc from the Workload on: ``pod`` under ``owner`` (of
        ``kind``), whose admission is ``top``'s; ``podsets``: the podSets whose pods may
        be made under ``count_uid`` (the controller named ``mine``), None when not known
        (claims and requests checked, no count); ``holders``: the pods counted against them
        (default: those ``count_uid`` controls)."""
        top_kind, top_obj = top
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        under = f"{top_kind.kind} {ns}/{(top_obj.get('metadata') or {}).get('name')}"
        wl = self.ctx.store(WL).get(f"{ns}/{top_kind.workload_name(top_obj)}")
        claims = pod_claims(pod)
        asked = self._device_requests(pod)
        if not admitted(wl):
            if not claims and not asked:
                return []  # it asks no devices or GPUs: nothing for an admission to cover
            what = ", ".join(sorted(asked)) or "DRA devices (spec.resourceClaims)"
            return [f"spec: the pod asks {what} under {under}, whose Workload is not "
                    "admitted: only its operator's pods run, once it is admitted"]
        assert wl is not None
        podset = labels.get(PODSET_LABEL)
        if podsets is not None and podset not in podsets:
            if not podsets:
                return [f"metadata.ownerReferences: no operator makes a pod controlled by "
                        f"{mine} itself (its pods run under the objects it makes), so no "
                        f"admission of {under} covers this one"]
            return [f"metadata.labels[{PODSET_LABEL}]: a pod controlled by {mine} carries "
                    f"the label of one of the podSets its operator makes "
                    f"({', '.join(sorted(podsets))}) as admitted for {under}; got {podset!r}"]
        if kind.key == JOB:
            allowed = [((owner.get("spec") or {}).get("template") or {})]
            which = f"Job {(owner.get('metadata') or {}).get('name')}'s pod template"
        else:
            templates = _podset_templates(wl)
            allowed = [templates[podset]] if podset in templates else list(templates.values())
            which = f"podSet {podset}'s template" if podset in templates else "any podSet's"
        errors = _claims_errors(claims, allowed, which, under) \
            + self._requests_errors(asked, allowed, which, under, ns)
        if claims and not errors:
            errors = self._devices_errors(pod, ns, wl, podset, under)
        if not errors and podsets is not None:
            errors = self._placement_errors(pod, wl, str(podset), under)
        if errors or podsets is None or not self._watches(POD):
            return errors
        return self._count_errors(pod, ns, count_uid, str(podset), mine, under, wl, dry_run,
                                  holders)

    def _watches(self, key: str) -> bool:
        """Whether this process watches store ``key`` (every store in a bare context)."""
        informers = getattr(self.ctx, "informers", None)
        return informers is None or key in informers.informers

    def _device_requests(self, pod: Obj) -> dict[str, int]:
        """The pod's effective requests (``pod_requests``, counts) of the resources a pod
        could take devices or GPUs by that the scheduler extender does not check for every
        pod: a DeviceClass's implicit extended resource
        (``deviceclass.resource.kubernetes.io/<class>``, Kubernetes DRA extended resources),
        a name of ``resources.deviceClassMappings``, ``extender.gpu_resource``; ``{}`` when
        unreadable."""
        spec = pod.get("spec")
        try:
            asked = pod_requests(spec if isinstance(spec, Mapping) else {}, field="spec")
        except WorkloadSpecError:
            return {}
        settings = self.ctx.settings
        named = {settings.extender.gpu_resource,
                 *(m.name for m in settings.resources.device_class_mappings)}
        return {r: int(v) for r, v in asked.items()
                if v and (r in named or r.startswith(DRA_EXTENDED_PREFIX))}

    def _devices_errors(self, pod: Obj, ns: str, wl: Obj, podset: Any, under: str
                        ) -> list[str]:
        """Why the devices ``pod``'s claims take now (``dra.pod_claim_requests`` over the
        ResourceClaimTemplates as stored: one deleted and made again with more devices since
        the admission counts its new size) are more than a pod of its podSet was admitted
        for (``podSetAssignments[].resourceUsage`` over its ``count``; a podSet not known:
        the largest), or []. Nothing to compare without the template store or the usage."""
        classes = self.ctx.settings.resources.device_classes()
        if not classes or not self._watches(RCT):
            return []
        spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
        try:
            now = pod_claim_requests(spec, ns, lambda n, name: self.ctx.store(RCT).get(
                f"{n}/{name}"), classes)
        except WorkloadSpecError:
            return []  # a template gone or unreadable: no claim is made from it either
        per_pod: dict[str, dict[str, int]] = {}
        for psa in ((wl.get("status") or {}).get("admission") or {}).get(
                "podSetAssignments") or []:
            count = psa.get("count") if isinstance(psa, Mapping) else None
            if not isinstance(count, int) or count <= 0:
                continue
            try:
                per_pod[str(psa.get("name", ""))] = {
                    str(r): parse_quantity(v, str(r)) // count
                    for r, v in (psa.get("resourceUsage") or {}).items()}
            except (ValueError, WorkloadSpecError):
                return []
        sets = [per_pod[podset]] if podset in per_pod else list(per_pod.values())
        if not sets or any(all(n <= got.get(r, 0) for r, n in now.items()) for got in sets):
            return []
        shown = ", ".join(f"{r}: {n}" for r, n in sorted(now.items()))
        return [f"spec.resourceClaims: the pod's claims take {shown} with the "
                f"ResourceClaimTemplates as they are now, more than a pod of "
                f"{f'podSet {podset}' if podset in per_pod else 'any podSet'} of {under} was "
                "admitted for (a template deleted and made again bigger since?)"]

    def _placement_errors(self, pod: Obj, wl: Obj, podset: str, under: str) -> list[str]:
        """Why ``pod`` may run on nodes other than those of the flavors its podSet was
        admitted on: its ``spec.nodeSelector`` lacks a ``spec.nodeLabels`` entry of a
        ResourceFlavor in its ``podSetAssignments[].flavors`` (``podsets.podset_scheduling``,
        what the start puts in every template, so the operator's pods carry them; a pod a
        tenant makes under the object with another flavor's selector would take that
        flavor's GPUs on this admission: brk36b M1), or []. Nothing to compare without the
        ResourceFlavor store or for a flavor not stored, nor with
        ``scheduling.inject_node_selector`` off (the start then puts no selector in the
        templates: brk37b P1)."""
        if not self._watches(RF) or not self.ctx.settings.scheduling.inject_node_selector:
            return []
        names = podset_assignments(wl).get(podset) or []
        flavors = {n: rf for n in names if (rf := self.ctx.store(RF).get(n)) is not None}
        try:
            want, _ = podset_scheduling(names, flavors)
        except InjectionConflict as e:
            return [f"spec.nodeSelector: podSet {podset} of {under}: {e}"]
        spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
        selector = spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"),
                                                          Mapping) else {}
        missing = {k: v for k, v in want.items() if selector.get(k) != v}
        if not missing:
            return []
        shown = ", ".join(f"{k}={v}" for k, v in sorted(missing.items()))
        return [f"spec.nodeSelector: podSet {podset} of {under} was admitted on flavor(s) "
                f"{', '.join(sorted(set(names)))}, whose node labels the pod does not select "
                f"({shown}): it could run on another flavor's nodes"]

    def _requests_errors(self, asked: dict[str, int], allowed: list[Obj], which: str,
                         under: str, ns: str) -> list[str]:
        """Why requests ``asked`` (``_device_requests``) are beyond every template of
        ``allowed`` as the API server makes its pods (``made_pod_requests``), or []."""
        if not asked:
            return []
        try:
            limits = container_limits(self.ctx, ns)
            specs = [t.get("spec") for t in allowed]
            theirs = [made_pod_requests(spec if isinstance(spec, Mapping) else {}, limits)
                      for spec in specs]
        except WorkloadSpecError:
            return []  # an unreadable LimitRange or template: nothing to compare with
        if any(all(v <= got.get(r, 0) for r, v in asked.items()) for got in theirs):
            return []
        shown = ", ".join(f"{r}: {v}" for r, v in sorted(asked.items()))
        return [f"spec.containers: the pod asks {shown}, beyond a pod of {which} in "
                f"{under}'s admission"]

    def _count_errors(self, pod: Obj, ns: str, owner_uid: str, podset: str, mine: str,
                      under: str, wl: Obj, dry_run: bool,
                      holders: list[Obj] | None = None) -> list[str]:
        """Why one more pod of ``podset`` under controller ``owner_uid`` (the pods it
        controls, or ``holders``) is beyond the admitted count (module doc), or []; an
        allowed one takes its place in the ledger."""
        count = admitted_counts(wl).get(podset)
        if count is None:
            return [f"metadata.labels[{PODSET_LABEL}]: podSet {podset!r} is not in "
                    f"{under}'s admission"]
        meta = pod.get("metadata") or {}
        me = str(meta.get("uid") or meta.get("name") or "")
        seen: set[str] = set()
        held = 0
        for p in holders if holders is not None else holding_pods_controlled_by(
                self.ctx, ns, owner_uid):
            pm = p.get("metadata") or {}
            if (pm.get("labels") or {}).get(PODSET_LABEL) != podset:
                continue
            uid = str(pm.get("uid") or pm.get("name") or "")
            seen.add(uid)
            if uid != me and pod_holds_quota(p):
                held += 1
        now = self.clock()
        if len(self._ledger) > _LEDGER_KEYS_MAX:
            self._prune(now)
        key = (owner_uid, podset)
        places = {u: t for u, t in self._ledger.get(key, {}).items()
                  if t > now and u not in seen and u != me}
        if held + len(places) >= count:
            if places:
                self._ledger[key] = places
            return [f"metadata.ownerReferences: podSet {podset} of {under} is admitted for "
                    f"{count} pod(s) and {held + len(places)} not terminal already run under "
                    f"{mine} (its operator makes them; one more would run beyond the "
                    "admission)"]
        if not dry_run and me:
            places[me] = now + LEDGER_SECONDS
            self._ledger_key[me] = key
        if places:
            self._ledger[key] = places
        else:
            self._ledger.pop(key, None)
        return []

    def _prune(self, now: float) -> None:
        """Drop every lapsed ledger entry, and the keys left empty."""
        for key in list(self._ledger):
            live = {u: t for u, t in self._ledger[key].items() if t > now}
            if live:
                self._ledger[key] = live
            else:
                del self._ledger[key]
        self._ledger_key = {u: k for u, k in self._ledger_key.items()
                            if u in self._ledger.get(k, {})}
