//go:build tools

// Package tools pins AppWrapper v1.2.0's controller (main package under cmd/, the version Kueue v0.17.1 requires), which `make operators` builds for the lab (hack/build-operators.sh).
package tools

import _ "github.com/project-codeflare/appwrapper/cmd"
