//go:build tools

// Package tools pins etcd for pykueue's lab.
package tools

import _ "go.etcd.io/etcd/server/v3"
