"""kubeflow.org/v2beta1 MPIJob (mpi-operator): the Kubeflow adapter with podSets ``launcher``
then ``worker`` (Kueue ``pkg/controller/jobs/mpijob``, kueue-integrations.md 6.2)."""

from app.integrations.kubeflow.kubeflow import KubeflowJob

KIND = KubeflowJob("MPIJob", "mpijobs", "mpiReplicaSpecs", ("Launcher", "Worker"),
                   version="v2beta1")

__all__ = ["KIND"]
