//go:build tools

// Package tools pins Kubeflow's training-operator v1.9.3 (PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob), which `make operators` builds for the lab (hack/build-operators.sh).
package tools

import _ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
