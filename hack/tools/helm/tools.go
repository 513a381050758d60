//go:build tools

// Package tools pins Helm v4's command line (helm.sh/helm/v4/cmd/helm), which `make helm`
// builds for `make chart-lint` and the chart tests.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
