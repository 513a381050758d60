"""workload.codeflare.dev/v1beta2 AppWrapper (project-codeflare): the kind (``KINDS``) and its
webhook routes (``ROUTES``, from its ``rules``)."""

from app.integrations.appwrapper.appwrapper import KIND

KINDS = (KIND,)
ROUTES = KIND.rules.routes()

__all__ = ["KIND", "KINDS", "ROUTES"]
