//go:build tools

// Package tools pins the control-plane commands that scripts/build-kube builds.
package tools
