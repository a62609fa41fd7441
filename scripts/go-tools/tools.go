//go:build tools

// Package tools pins the Go test tools Foothold's CI builds; nothing here ships in the product.
package tools

import (
	_ "github.com/google/go-containerregistry/cmd/crane"
	_ "github.com/opencontainers/distribution-spec/conformance"
)
