// Package test holds cross-package integration, interop, conformance and soak tests.
package test
