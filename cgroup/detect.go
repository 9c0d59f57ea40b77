package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// DefaultRoot is where the cgroup hierarchy is mounted.
const DefaultRoot = "/sys/fs/cgroup"

// Mode is the layout of the cgroup hierarchy.
type Mode string

// The cgroup modes.
const (
	// ModeUnified is the cgroup v2 unified hierarchy: the only one the
	// Enforcer writes to.
	ModeUnified Mode = "unified"
	// ModeHybrid is cgroup v1 controllers with a v2 hierarchy beside them
	// (at <root>/unified) that holds no controller the kubelet uses.
	ModeHybrid Mode = "hybrid"
	// ModeLegacy is cgroup v1 only.
	ModeLegacy Mode = "legacy"
)

// ErrUnsupported is wrapped by the error Detect returns on a cgroup v1 or
// hybrid host.
var ErrUnsupported = errors.New("cgroup v1 (or hybrid): enforcement is not supported; detection and reporting go on")

// DetectOption adjusts Detect.
type DetectOption func(*detectOptions)

type detectOptions struct {
	skipMagic bool
}

// SkipMagicCheck makes Detect judge the root by its layout alone instead of
// by its filesystem type (statfs), for synthetic trees in tests: a root with
// a cgroup.controllers file is unified, one with unified/cgroup.controllers
// is hybrid, one with v1 controller directories (memory, cpu, cpuset, pids)
// is legacy.
func SkipMagicCheck() DetectOption {
	return func(o *detectOptions) { o.skipMagic = true }
}

// Detect tells how the cgroup hierarchy at root ("" means DefaultRoot) is
// laid out. On a cgroup v1 or hybrid host it returns the mode together with
// an error that wraps ErrUnsupported; any other error means that root is not
// a cgroup hierarchy at all.
func Detect(root string, opts ...DetectOption) (Mode, error) {
	var o detectOptions
	for _, opt := range opts {
		opt(&o)
	}
	if root == "" {
		root = DefaultRoot
	}
	var (
		mode Mode
		err  error
	)
	if o.skipMagic {
		mode, err = detectLayout(root)
	} else {
		mode, err = detectMagic(root)
	}
	if err != nil {
		return "", err
	}
	if mode != ModeUnified {
		return mode, fmt.Errorf("%s is a %s hierarchy: %w", root, describeMode(mode), ErrUnsupported)
	}
	return mode, nil
}

func describeMode(m Mode) string {
	switch m {
	case ModeHybrid:
		return "hybrid cgroup v1/v2"
	case ModeLegacy:
		return "cgroup v1"
	}
	return "cgroup v2"
}

// detectLayout judges a root by the files in it.
func detectLayout(root string) (Mode, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return "", fmt.Errorf("cgroup root: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("cgroup root %s is not a directory", root)
	}
	if isFile(filepath.Join(root, "cgroup.controllers")) {
		return ModeUnified, nil
	}
	if isFile(filepath.Join(root, "unified", "cgroup.controllers")) {
		return ModeHybrid, nil
	}
	for _, c := range v1Controllers {
		if isDir(filepath.Join(root, c)) {
			return ModeLegacy, nil
		}
	}
	return "", fmt.Errorf("cgroup root %s holds neither cgroup.controllers (v2) nor v1 controller directories", root)
}

// v1Controllers are directories a cgroup v1 root has (one is enough).
var v1Controllers = []string{"memory", "cpu", "cpuset", "pids", "cpu,cpuacct", "systemd"}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// errNotExist reports whether err says a file is absent.
func errNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
