"""jobset.x-k8s.io/v1alpha2 JobSet: the kind (``KINDS``) and its webhook routes (``ROUTES``,
from its ``rules``)."""

from app.integrations.jobset.jobset import KIND

KINDS = (KIND,)
ROUTES = KIND.rules.routes()

__all__ = ["KIND", "KINDS", "ROUTES"]
