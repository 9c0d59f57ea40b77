package checkpoint

import (
	"errors"
	"os"
	"testing"
)

// TestUndo: an applied plan's Undo puts the file it replaced back, byte
// for byte and with its mode; over a file someone else wrote since, it
// refuses.
func TestUndo(t *testing.T) {
	path := copyCheckpoint(t, "v4")
	os.Chmod(path, 0o600)
	before, _ := os.ReadFile(path)
	p, err := PlanCPUManager(path, CPUTarget{Online: cpuRange(0, 15)})
	if err != nil || !p.Changed {
		t.Fatalf("plan: changed %v, %v", p != nil && p.Changed, err)
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	if err := p.Undo(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != string(before) {
		t.Fatal("Undo did not put back the file Apply replaced")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after Undo: %v %v, want 0600", fi.Mode(), err)
	}

	// The kubelet wrote the file after the rewrite: Undo leaves it.
	p, _ = PlanCPUManager(path, CPUTarget{Online: cpuRange(0, 15)})
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, []byte("the kubelet's own"), 0o600)
	if err := p.Undo(); !errors.Is(err, ErrChanged) {
		t.Errorf("Undo over a changed file: %v, want ErrChanged", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "the kubelet's own" {
		t.Error("Undo replaced a file it did not write")
	}
}
