"""sparkoperator.k8s.io/v1beta2 SparkApplication (Kubeflow spark-operator): the kind
(``KINDS``) and its webhook routes (``ROUTES``, from its ``rules``)."""

from app.integrations.sparkapplication.sparkapplication import KIND

KINDS = (KIND,)
ROUTES = KIND.rules.routes()

__all__ = ["KIND", "KINDS", "ROUTES"]
