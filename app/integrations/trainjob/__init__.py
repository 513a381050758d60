"""trainer.kubeflow.org/v1alpha1 TrainJob (Kubeflow Trainer v2): the kind (``KINDS``) and its
webhook routes (``ROUTES``, from its ``rules``)."""

from app.integrations.trainjob.trainjob import KIND

KINDS = (KIND,)
ROUTES = KIND.rules.routes()

__all__ = ["KIND", "KINDS", "ROUTES"]
