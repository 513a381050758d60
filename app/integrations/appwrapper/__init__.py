"""workload.codeflare.dev/v1beta2 AppWrapper (project-codeflare): the kind (``KINDS``) and its
webhook routes (``ROUTES``: from its ``rules``, and the replicas of the Deployments and
StatefulSets it wraps, ``wrapped``)."""

from app.integrations.appwrapper import wrapped
from app.integrations.appwrapper.appwrapper import KIND

KINDS = (KIND,)
ROUTES = (*KIND.rules.routes(), *wrapped.ROUTES)

__all__ = ["KIND", "KINDS", "ROUTES"]
