package cluster

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
	"syscall"
	"time"
)

// EnvBinDir names the environment variable that overrides [DefaultBinDir].
const EnvBinDir = "NODE_RESIZED_CLUSTER_BIN"

// testModulePath is the module that holds this package and the cmd/ mains.
const testModulePath = "github.com/node-resized/node-resized/test"

// Binaries are the control-plane programs [Build] puts in the binary
// directory, each built from the test module's cmd/<name>.
var Binaries = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"}

// DefaultBinDir returns $NODE_RESIZED_CLUSTER_BIN when set, otherwise
// node-resized/cluster/bin under the user's cache directory
// ($XDG_CACHE_HOME or $HOME/.cache).
func DefaultBinDir() (string, error) {
	if d := os.Getenv(EnvBinDir); d != "" {
		return filepath.Abs(d)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cluster: finding the binary directory (set %s): %w", EnvBinDir, err)
	}
	return filepath.Join(cache, "node-resized", "cluster", "bin"), nil
}

// Build compiles etcd, kube-apiserver and kube-scheduler from the test
// module's cmd/ directory into binDir ("" means [DefaultBinDir]) with the go
// command. go build leaves a binary alone when it is already up to date, so
// with a warm build cache this takes seconds; the first build takes minutes.
// Concurrent Builds into the same directory, from any process, are
// serialised with a lock file.
func Build(ctx context.Context, binDir string) error {
	if binDir == "" {
		d, err := DefaultBinDir()
		if err != nil {
			return err
		}
		binDir = d
	}
	modDir, err := moduleDir()
	if err != nil {
		return err
	}
	goTool, err := goCommand()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return fmt.Errorf("cluster: creating binary directory: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(binDir, ".build.lock"))
	if err != nil {
		return err
	}
	defer unlock()

	// The API server's /version says the Kubernetes release it is built
	// from, as a released binary's does: without it, it says
	// v0.0.0-master, and clients that check the server's version (Helm's
	// kubeVersion, kubectl's skew warning) refuse or warn.
	ldflags, err := versionLDFlags(ctx, goTool, modDir)
	if err != nil {
		return err
	}
	args := []string{"build", "-ldflags", ldflags, "-o", binDir + string(filepath.Separator)}
	for _, b := range Binaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = modDir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cluster: building %s in %s (go %s): %w\n%s",
			strings.Join(Binaries, ", "), modDir, strings.Join(args, " "), err, tail(out.String(), 60))
	}
	return checkBinaries(binDir)
}

// versionLDFlags returns the -ldflags that stamp k8s.io/component-base's
// version with the k8s.io/kubernetes version the test module requires
// (v1.37.2: gitVersion v1.37.2, gitMajor 1, gitMinor 37).
func versionLDFlags(ctx context.Context, goTool, modDir string) (string, error) {
	cmd := exec.CommandContext(ctx, goTool, "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	cmd.Dir = modDir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("cluster: the k8s.io/kubernetes version of %s: %w", modDir, err)
	}
	v := strings.TrimSpace(string(out))
	major, rest, ok := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	minor, _, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return "", fmt.Errorf("cluster: k8s.io/kubernetes version %q is not vMAJOR.MINOR.PATCH", v)
	}
	const pkg = "k8s.io/component-base/version"
	return fmt.Sprintf("-X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean",
		pkg, v, pkg, major, pkg, minor, pkg), nil
}

// checkBinaries reports the first control-plane binary missing from binDir.
func checkBinaries(binDir string) error {
	for _, b := range Binaries {
		p := filepath.Join(binDir, b)
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("cluster: control-plane binary %s: %w (run Build or test/cluster/up --build-only)", p, err)
		}
		if fi.Mode()&0o111 == 0 {
			return fmt.Errorf("cluster: control-plane binary %s is not executable", p)
		}
	}
	return nil
}

// moduleDir finds the test module's directory: next to this source file
// when the sources are where they were compiled, otherwise from the go
// command run in the working directory.
func moduleDir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Dir(filepath.Dir(file))
		if isTestModule(dir) {
			return dir, nil
		}
	}
	goTool, err := goCommand()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(goTool, "list", "-m", "-f", "{{.Dir}}", testModulePath).Output()
	if err == nil {
		if dir := strings.TrimSpace(string(out)); dir != "" && isTestModule(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("cluster: cannot find the sources of module %s (run from inside it)", testModulePath)
}

func isTestModule(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == testModulePath
		}
	}
	return false
}

// goCommand finds the go command: on $PATH, else in $GOROOT/bin.
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("cluster: the go command is needed to build the control plane and is not on $PATH")
}

// lockFile takes an exclusive flock on path, creating it, waiting for it
// until ctx ends, and returns the function that releases it.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: opening lock %s: %w", path, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("cluster: locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("cluster: waiting for lock %s (another build?): %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
