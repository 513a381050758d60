//go:build tools

// Package tools pins Kueue v0.17.1's manager and its scheduler performance harness
// (minimalkueue, runner, checker), which `make kueue` builds for `make bench-versus`.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
	_ "sigs.k8s.io/kueue/test/performance/scheduler/minimalkueue"
	_ "sigs.k8s.io/kueue/test/performance/scheduler/runner"
)
