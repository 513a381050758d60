"""Kubeflow's training-operator kinds (``kubeflow.org/v1``): PyTorchJob, TFJob, XGBoostJob,
PaddleJob, JAXJob, on one shared adapter (``kubeflow.KubeflowJob``)."""

from app.integrations.kubeflow.kubeflow import JAXJOB, PADDLEJOB, PYTORCHJOB, TFJOB, XGBOOSTJOB

KINDS = (PYTORCHJOB, TFJOB, XGBOOSTJOB, PADDLEJOB, JAXJOB)

__all__ = ["KINDS"]
