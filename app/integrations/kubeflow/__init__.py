"""The Kubeflow kinds (``kubeflow.org``) on one shared adapter (``kubeflow.KubeflowJob``):
the training-operator's PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob (``v1``) and the
mpi-operator's MPIJob (``v2beta1``), all in ``KINDS``; their webhook routes
(``ROUTES``, from each kind's ``rules``)."""

from app.integrations.kubeflow.kubeflow import KUBEFLOW_KINDS, MPIJOB

KINDS = KUBEFLOW_KINDS

ROUTES = tuple(r for k in KINDS for r in k.rules.routes())

__all__ = ["KINDS", "MPIJOB", "ROUTES"]
