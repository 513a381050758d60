//go:build tools

// Package tools pins Kubeflow Trainer v2.2.0's controller manager (the version Kueue v0.17.1 builds against), which `make operators` builds for the lab (hack/build-operators.sh).
package tools

import _ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
