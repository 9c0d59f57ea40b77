//go:build !linux

package cgroup

type noWriter struct{}

func newWriter(string) writer { return noWriter{} }

func (noWriter) set(*op) error { return errNotLinux }
