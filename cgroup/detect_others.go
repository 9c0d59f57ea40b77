//go:build !linux

package cgroup

import "errors"

var errNotLinux = errors.New("cgroups exist on Linux only")

func detectMagic(root string) (Mode, error) {
	return "", errNotLinux
}
