//go:build tools

// Package tools pins Kubeflow's mpi-operator v0.8.0 (MPIJob kubeflow.org/v2beta1), which `make operators` builds for the lab (hack/build-operators.sh).
package tools

import _ "github.com/kubeflow/mpi-operator/cmd/mpi-operator"
