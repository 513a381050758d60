"""The replicas of the Deployments and StatefulSets an AppWrapper wraps (route
``/validate-apps-v1-appwrapper-wrapped``, pure rules plus the decider).

The AppWrapper controller (v1.2.0) creates each component once and never sets its replicas
back, and a Deployment's or StatefulSet's pods are not queued on their own under an
AppWrapper (its admission covers them, Kueue's managed-ancestor rule). So a tenant who may
edit Deployments could scale a wrapped one past the podSet the AppWrapper was admitted for
and run pods on the flavor's nodes with no quota behind them. An UPDATE of a wrapped
Deployment or StatefulSet, or of its ``scale`` subresource (``kubectl scale``, an autoscaler),
that raises ``replicas`` above the wrapping AppWrapper's podSet count is refused; lowering is
allowed. The AppWrapper's components are immutable (``_components_changed``), so the count
is fixed for the AppWrapper's life. So is what each pod asks for: a change of the wrapped
object's pod template (``spec.template``: a larger GPU request, another node's selector) is
refused, and so is removing or changing its ``workload.codeflare.dev/appwrapper`` label,
which the object webhook's objectSelector needs to see the next update (breaker14: the label
dropped in one patch, the replicas raised in the next, unseen).

An object that becomes controlled by a queued AppWrapper (created with the controller
ownerReference, or given it in an update; webhook ``vappwrapper-wrapped-owned``, selected by
that reference, since the label is the creator's to leave out) runs its pods under the
AppWrapper's admission, its managed ancestor. So it must be the component the AppWrapper
controller creates (``joined_object_errors``): one of that kind and name, no more replicas
than its podSet, pods asking for what the component's pods ask for (breaker14: the wrapped
Deployment deleted and created again with 3 replicas under the AppWrapper, unseen by the
UPDATE review). The controller's own create is that component and passes. Nothing joins
a suspended AppWrapper: its controller creates components only once it is resumed. A
``generateName`` component is any name with its prefix only while the controller creates
it (phase ``Resuming``, the component not deployed: ``names_component``), so a tenant's
extra object is refused before the AppWrapper runs, in a reset's pause and once the
component is deployed (brk29, brk30); while the controller creates,
``webhook.child_job_creators`` (the AppWrapper controller's identity) is what refuses it.

Goes beyond Kueue v0.17.1, whose AppWrapper integration leaves the wrapped objects to the
AppWrapper controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.integrations.appwrapper.appwrapper import APPWRAPPER_LABEL, wrapped_component
from app.integrations.framework import controller_identity
from app.integrations.statefulset.webhook_rules import replicas, scale_replicas
from app.integrations.webhook_toolkit import (
    ALLOW,
    Verdict,
    WebhookEnv,
    WebhookPolicy,
    WebhookRoute,
    refused,
    reviewed_objects,
)
from app.wire.podtemplate import template_differences, template_requests

if TYPE_CHECKING:
    from app.models.admissionreview import AdmissionRequest

FRAMEWORK = "workload.codeflare.dev/appwrapper"
PATH = "/validate-apps-v1-appwrapper-wrapped"
WRAPPED_KINDS = {"deployments": "Deployment", "statefulsets": "StatefulSet"}


def wrapped_replicas_errors(kind: str, name: str, before: int, after: int,
                            wrapper: tuple[str, int] | None, username: str,
                            policy: WebhookPolicy) -> list[str]:
    """Errors for raising apps/v1 ``kind`` ``name`` from ``before`` to ``after`` replicas
    (counts) while ``wrapper`` (``(<"AppWrapper ns/name">, podSet count)``; None: wrapped by
    no queued AppWrapper) wraps it; ``[]`` to allow. Lowering, keeping, and a controller's
    own writes (``policy.controller_usernames``) are allowed."""
    if wrapper is None or after <= before or username in policy.controller_usernames:
        return []
    owner, allowed = wrapper
    if after <= allowed:
        return []
    return [f"spec.replicas: {kind} {name} is wrapped by {owner}, whose Workload was sized "
            f"for {allowed} of its pods; {after} would run pods no quota covers (its "
            "components are immutable: delete and re-create the AppWrapper to change them)"]


def wrapped_object_errors(kind: str, name: str, old: Mapping[str, Any], new: Mapping[str, Any],
                          wrapper: tuple[str, int] | None, username: str,
                          policy: WebhookPolicy) -> list[str]:
    """Errors for an UPDATE of apps/v1 ``kind`` ``name`` (not its scale) from ``old`` to
    ``new`` that changes its pod template or its ``workload.codeflare.dev/appwrapper`` label
    while ``wrapper`` wraps it; ``[]`` to allow (as ``wrapped_replicas_errors``)."""
    if wrapper is None or username in policy.controller_usernames:
        return []
    owner = wrapper[0]
    errors = []

    def label(obj: Mapping[str, Any]) -> Any:
        return ((obj.get("metadata") or {}).get("labels") or {}).get(APPWRAPPER_LABEL)
    if label(old) != label(new):
        errors.append(f"metadata.labels[{APPWRAPPER_LABEL}]: {kind} {name} is wrapped by "
                      f"{owner}; its label cannot be removed or changed")
    if (old.get("spec") or {}).get("template") != (new.get("spec") or {}).get("template"):
        errors.append(f"spec.template: {kind} {name} is wrapped by {owner}, whose Workload "
                      "was sized for the pod template it wraps; a changed template would run "
                      "pods no quota covers (delete and re-create the AppWrapper to change it)")
    return errors


def joined_object_errors(kind: str, name: str, obj: Mapping[str, Any],
                         wrapper: tuple[str, Mapping[str, Any]] | None, username: str,
                         policy: WebhookPolicy,
                         creators: frozenset[str] = frozenset()) -> list[str]:
    """Errors for apps/v1 ``kind`` ``name`` (``namespace/name``, for the messages; ``obj``,
    as created or updated) becoming controlled by ``wrapper`` (``(<"AppWrapper ns/name">,
    the AppWrapper as stored)``; None: no queued AppWrapper controls it): created with the
    controller ownerReference, or given it (or another one) by an update. Its pods then run
    under the AppWrapper's admission, so it must be the component the AppWrapper controller
    creates (``wrapped_component``): of that kind and name, with no more ``spec.replicas``
    than its podSet (counts), and pods that ask for what the component's ask for (per-pod
    requests as Kubernetes computes them, ``template_requests``), claim its DRA devices and
    are placed as the controller places them under the admission (``template_differences``:
    nodeSelector, affinity, tolerations, nodeName, the admitted flavor's added; brk31 M1,
    M2); the rest of the template is not compared: the controller adds labels, scheduling
    gates and a schedulerName to it, and the API server its defaults. The controller
    creates components only while the AppWrapper runs (appwrapper v1.2.0 phase
    ``Resuming``), so nothing may join a suspended one; with ``creators`` set
    (``webhook.child_job_creators``) only those identities may. ``[]`` to allow; pykueue's
    own writes (``policy.controller_usernames``) are allowed."""
    if wrapper is None or username in policy.controller_usernames:
        return []
    owner, aw = wrapper
    if creators and username not in creators:
        return [f"metadata.ownerReferences: {kind} {name} names {owner} as its controller; "
                f"only {', '.join(sorted(creators))} may create objects under a queued "
                "AppWrapper (webhook.child_job_creators)"]
    if (aw.get("spec") or {}).get("suspend") is True:
        return [f"metadata.ownerReferences: {kind} {name} names {owner} as its controller, "
                "which is suspended: its controller creates its components only once it is "
                "admitted and resumed, so these pods would run on no admission"]
    found = wrapped_component(aw, kind, str((obj.get("metadata") or {}).get("name", "")))
    if found is None:
        return [f"metadata.ownerReferences: {kind} {name} names {owner} as its controller, "
                f"which wraps no {kind} of that name: its pods would run on that AppWrapper's "
                "admission with no quota of their own"]
    allowed, component = found
    errors = wrapped_replicas_errors(kind, name, 0, replicas(obj), (owner, allowed),
                                     username, policy)
    placed = (component.get("spec") or {}).get("template")
    theirs = (obj.get("spec") or {}).get("template")
    want, have = template_requests(placed), template_requests(theirs)
    if have != want:
        errors.append(f"spec.template: {kind} {name} is controlled by {owner}, whose Workload "
                      f"was sized for pods requesting {want}; these would request {have} "
                      "(milli-CPU, bytes, counts; delete and re-create the AppWrapper to "
                      "change them)")
        return errors
    errors += [f"spec.template.{field}: {kind} {name} is controlled by {owner}, whose "
               f"admission was given for pods with {field} {mine!r} (its component's, with "
               f"the nodeSelector and tolerations of the flavor it was admitted on); these "
               f"have {other!r}" for field, mine, other in template_differences(placed, theirs)]
    return errors


def _decide(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
    resource = req.resource
    if req.operation not in ("CREATE", "UPDATE") or resource is None \
            or resource.group != "apps" or req.sub_resource not in ("", "scale") \
            or req.operation == "CREATE" and req.sub_resource:
        return ALLOW
    kind = WRAPPED_KINDS.get(resource.resource)
    if kind is None or (env.settings is not None
                        and not env.settings.integrations.enabled(FRAMEWORK)):
        return ALLOW

    def count(obj: Mapping[str, Any]) -> int:
        return scale_replicas(obj, "spec") if req.sub_resource else replicas(obj)
    old, new = reviewed_objects(req, count)
    meta = new.get("metadata") or {}
    # A generated name is in the object, not in the request, on CREATE.
    name, user = f"{req.namespace}/{meta.get('name') or req.name}", req.user_info.username
    errors: list[str] = []
    if not req.sub_resource and (old is None
                                 or controller_identity(old) != controller_identity(new)):
        asked = env.ask("wrapping_controller",
                        {**new, "metadata": {**meta, "namespace": req.namespace}})
        creators = frozenset(env.settings.webhook.child_job_creators) \
            if env.settings is not None else frozenset()
        errors += joined_object_errors(kind, name, new,
                                       asked if isinstance(asked, tuple) else None, user,
                                       env.policy, creators)
    if old is None:
        return refused(errors)
    asked = env.ask("wrapped_replicas", req.namespace, kind, req.name)
    wrapper = asked if isinstance(asked, tuple) else None
    errors += wrapped_replicas_errors(kind, name, count(old), count(new), wrapper, user,
                                      env.policy)
    if not req.sub_resource:
        errors += wrapped_object_errors(kind, name, old, new, wrapper, user, env.policy)
    return refused(list(dict.fromkeys(errors)))  # joining and raising: one message


ROUTES = (WebhookRoute(PATH, None, _decide),)
