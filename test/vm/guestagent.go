package vm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// guestAgents holds the agent built for each architecture.
var guestAgents struct {
	mu     sync.Mutex // guards byArch
	byArch map[Arch]*guestAgent
}

type guestAgent struct {
	once sync.Once
	data []byte
	err  error
}

// guestAgentBinary returns the guest's command agent (the guestagent
// command next to this file) for an architecture, built once per process
// with CGO_ENABLED=0 (from the build cache after the first time: a link,
// under a second).
func guestAgentBinary(arch Arch) ([]byte, error) {
	guestAgents.mu.Lock()
	if guestAgents.byArch == nil {
		guestAgents.byArch = map[Arch]*guestAgent{}
	}
	a := guestAgents.byArch[arch]
	if a == nil {
		a = new(guestAgent)
		guestAgents.byArch[arch] = a
	}
	guestAgents.mu.Unlock()
	a.once.Do(func() {
		a.data, a.err = buildGuestAgent(arch)
	})
	return a.data, a.err
}

func buildGuestAgent(arch Arch) ([]byte, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("build the guest agent: no source path")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, fmt.Errorf("build the guest agent: %w", err)
	}
	dir := filepath.Join(cache, "node-resized", "vm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("build the guest agent: %w", err)
	}
	// Another test process may build at the same time: each writes its
	// own file, and the one read is the one this process built.
	out, err := os.CreateTemp(dir, "guestagent-*")
	if err != nil {
		return nil, fmt.Errorf("build the guest agent: %w", err)
	}
	out.Close()
	defer os.Remove(out.Name())
	cmd := exec.Command("go", "build", "-o", out.Name(), "./guestagent")
	cmd.Dir = filepath.Dir(self)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH="+string(arch))
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the guest agent: go build ./guestagent: %w\n%s", err, b)
	}
	data, err := os.ReadFile(out.Name())
	if err != nil {
		return nil, fmt.Errorf("build the guest agent: %w", err)
	}
	if err := checkStatic(out.Name()); err != nil {
		return nil, fmt.Errorf("build the guest agent: %w", err)
	}
	return data, nil
}
