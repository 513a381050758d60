//go:build tools

// Package tools pins KubeRay's ray-operator v1.6.0 (RayJob, RayCluster, RayService; main package at the module root), which `make operators` builds for the lab (hack/build-operators.sh).
package tools

import _ "github.com/ray-project/kuberay/ray-operator"
