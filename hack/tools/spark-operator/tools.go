//go:build tools

// Package tools pins Kubeflow spark-operator v2.5.0's operator binary (main package under cmd/operator, the version Kueue v0.17.1 requires), which `make operators` builds for the lab (hack/build-operators.sh).
package tools

import _ "github.com/kubeflow/spark-operator/v2/cmd/operator"
