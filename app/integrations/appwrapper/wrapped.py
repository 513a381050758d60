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
dropped in one patch, the replicas raised in the next, unseen). Goes beyond Kueue v0.17.1,
whose AppWrapper integration leaves the wrapped objects to the AppWrapper controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.integrations.appwrapper.appwrapper import APPWRAPPER_LABEL
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


def _decide(req: AdmissionRequest, env: WebhookEnv) -> Verdict:
    resource = req.resource
    if req.operation != "UPDATE" or resource is None or resource.group != "apps" \
            or req.sub_resource not in ("", "scale"):
        return ALLOW
    kind = WRAPPED_KINDS.get(resource.resource)
    if kind is None or (env.settings is not None
                        and not env.settings.integrations.enabled(FRAMEWORK)):
        return ALLOW

    def count(obj: Mapping[str, Any]) -> int:
        return scale_replicas(obj, "spec") if req.sub_resource else replicas(obj)
    old, new = reviewed_objects(req, count)
    assert old is not None
    asked = env.ask("wrapped_replicas", req.namespace, kind, req.name)
    wrapper = asked if isinstance(asked, tuple) else None
    name, user = f"{req.namespace}/{req.name}", req.user_info.username
    errors = wrapped_replicas_errors(kind, name, count(old), count(new), wrapper, user,
                                     env.policy)
    if not req.sub_resource:
        errors += wrapped_object_errors(kind, name, old, new, wrapper, user, env.policy)
    return refused(errors)


ROUTES = (WebhookRoute(PATH, None, _decide),)
