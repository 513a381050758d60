//go:build tools

// Package tools pins JobSet v0.11.1's controller (main package at the module root), which `make operators` builds for the lab (hack/build-operators.sh).
package tools

import _ "sigs.k8s.io/jobset"
