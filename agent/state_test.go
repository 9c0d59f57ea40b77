package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/node-resized/node-resized/decide"
)

// TestRemoveState: the state file and the temporary files of a cut-short
// save go, files moved aside and other files stay, and a second removal
// finds nothing.
func TestRemoveState(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := SaveState(path, decide.State{Version: decide.StateVersion, Generation: 3}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"state.json.tmp-123", "state.json.corrupt-20260101T000000", "other.json", "other.json.tmp-1"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveState(path)
	if err != nil || !removed {
		t.Fatalf("RemoveState = %v, %v; want true, nil", removed, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"other.json", "other.json.tmp-1", "state.json.corrupt-20260101T000000"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	if st, err := LoadState(path, time.Now()); st != nil || err != nil {
		t.Errorf("LoadState after the removal = %+v, %v; want no state", st, err)
	}
	if removed, err := RemoveState(path); err != nil || removed {
		t.Errorf("second RemoveState = %v, %v; want false, nil", removed, err)
	}
	if removed, err := RemoveState(filepath.Join(dir, "absent", "state.json")); err != nil || removed {
		t.Errorf("RemoveState in a missing directory = %v, %v; want false, nil", removed, err)
	}
}
