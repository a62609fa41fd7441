//go:build tools

// Package tools pins the Kubernetes test environment (kube-apiserver and etcd)
// that the reconciler tests run against; nothing here ships in the product.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
