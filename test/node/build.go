package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// EnvBinDir names the environment variable that overrides [DefaultBinDir].
const EnvBinDir = "NODE_RESIZED_NODE_BIN"

// Binaries are the programs [Build] puts in the binary directory: the real
// kubelet and the fake CRI runtime, built with the test module's own
// flags so that they share its build cache (see test/node/build).
var Binaries = []string{"kubelet", "fakecri"}

// DefaultBinDir returns $NODE_RESIZED_NODE_BIN when set, otherwise
// node-resized/node/bin under the user's cache directory.
func DefaultBinDir() (string, error) {
	if d := os.Getenv(EnvBinDir); d != "" {
		return filepath.Abs(d)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("node: finding the binary directory (set %s): %w", EnvBinDir, err)
	}
	return filepath.Join(cache, "node-resized", "node", "bin"), nil
}

// Build runs the script test/node/build, which compiles the kubelet
// (k8s.io/kubernetes/cmd/kubelet at the test module's version) and fakecri
// into binDir ("" means [DefaultBinDir]). go build leaves an up-to-date
// binary alone, so with a warm build cache this takes seconds; the first
// kubelet build takes minutes. Concurrent builds are serialised by a lock
// file in binDir.
func Build(ctx context.Context, binDir string) error {
	if binDir == "" {
		d, err := DefaultBinDir()
		if err != nil {
			return err
		}
		binDir = d
	}
	dir, err := packageDir()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "build"), binDir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("node: building %s: %w\n%s", strings.Join(Binaries, " and "), err, tail(out.String(), 40))
	}
	return checkBinaries(binDir)
}

func checkBinaries(binDir string) error {
	for _, b := range Binaries {
		if err := checkExecutable(filepath.Join(binDir, b)); err != nil {
			return err
		}
	}
	return nil
}

// checkExecutable fails unless p is an executable file.
func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("node: binary %s: %w (run test/node/build, or test/node/build-matrix for an older kubelet)", p, err)
	}
	if fi.Mode()&0o111 == 0 || fi.IsDir() {
		return fmt.Errorf("node: binary %s is not an executable file", p)
	}
	return nil
}

// packageDir is this package's source folder, which holds the build script.
func packageDir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Dir(file)
		if _, err := os.Stat(filepath.Join(dir, "build")); err == nil {
			return dir, nil
		}
	}
	if wd, err := os.Getwd(); err == nil {
		for _, d := range []string{wd, filepath.Join(wd, "node"), filepath.Join(wd, "test", "node")} {
			if _, err := os.Stat(filepath.Join(d, "build")); err == nil {
				return d, nil
			}
		}
	}
	return "", errors.New("node: cannot find the script test/node/build (run from the repository)")
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
