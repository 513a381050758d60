//go:build tools

// Package tools pins LeaderWorkerSet v0.8.0's controller (main package under cmd/, the version Kueue v0.17.1 requires), which `make operators` builds for the lab (hack/build-operators.sh).
package tools

import _ "sigs.k8s.io/lws/cmd"
