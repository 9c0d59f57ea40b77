package guesttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/node-resized/node-resized/test/vm"
)

// GoBuild builds a static binary of pkg, relative to dir, for the guest's
// architecture arch ("" is this machine's), into out: with the tags of
// make build (the daemon must fit the guest as shipped) and stripped as
// make build strips the binaries it installs. Stripping also matters here:
// the guest's root is a tmpfs, so every byte of the binaries stays in its
// RAM, out of the memory the kubelet configuration reserves for the
// system. The go command is the one on $PATH: go test puts that of its
// own GOROOT first.
func GoBuild(arch vm.Arch, out, pkg, dir string) error {
	out, err := filepath.Abs(out)
	if err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	cmd := exec.Command("go", "build", "-tags", "grpcnotrace", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	what := pkg
	if arch != "" {
		cmd.Env = append(cmd.Env, "GOARCH="+string(arch))
		what += " for " + string(arch)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", what, err, b)
	}
	return nil
}
