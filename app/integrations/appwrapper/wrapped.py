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
is fixed for the AppWrapper's life. Goes beyond Kueue v0.17.1, whose AppWrapper integration
leaves the wrapped objects to the AppWrapper controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

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
    wrapper = env.ask("wrapped_replicas", req.namespace, kind, req.name)
    return refused(wrapped_replicas_errors(
        kind, f"{req.namespace}/{req.name}", count(old), count(new),
        wrapper if isinstance(wrapper, tuple) else None, req.user_info.username, env.policy))


ROUTES = (WebhookRoute(PATH, None, _decide),)
