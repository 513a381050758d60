//go:build tools

// Package tools pins kwok for pykueue's lab.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
