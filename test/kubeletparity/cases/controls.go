package cases

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/node-resized/node-resized/kubelet/checkpoint"
)

// A control is a rewritten checkpoint altered into one that some kubelets
// must refuse: it shows that their Start really checks what the parity
// tests rely on.
type control struct {
	name string
	// alter returns the altered file.
	alter func(b []byte) ([]byte, error)
	// refused reports whether kubelet k must refuse the altered file on
	// the new machine.
	refused func(k Kubelet) bool
}

var controls = []control{
	// Every checksum wrong: every kubelet refuses the file ("checkpoint is
	// corrupted").
	{"checksums", bumpChecksums("checksum", "dataChecksum"), func(Kubelet) bool { return true }},
	// Only the legacy checksum wrong: the kubelets that read the legacy
	// fields refuse it; v1.37 trusts data and its dataChecksum, and starts.
	{"legacy-checksum", bumpChecksums("checksum"), func(k Kubelet) bool { return !k.ReadsData() }},
	// Only dataChecksum wrong: v1.37 refuses it and does not fall back to
	// the legacy fields; older kubelets ignore data and start.
	{"data-checksum", bumpChecksums("dataChecksum"), Kubelet.ReadsData},
}

// bumpChecksums returns an alteration that adds one to the top-level
// checksum fields named.
func bumpChecksums(fields ...string) func([]byte) ([]byte, error) {
	return func(b []byte) ([]byte, error) {
		var top map[string]json.RawMessage
		if err := json.Unmarshal(b, &top); err != nil {
			return nil, err
		}
		for _, f := range fields {
			v, ok := top[f]
			if !ok {
				return nil, fmt.Errorf("no field %s", f)
			}
			n, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f, err)
			}
			top[f] = json.RawMessage(strconv.FormatUint(n+1, 10))
		}
		return json.Marshal(top)
	}
}

// runControls starts kubelet k (start) on each control made from the
// rewritten checkpoint b (named file), on the new machine, and on b
// itself on the old machine, which no kubelet may accept: the rewrite is
// for the new machine only.
func runControls(t *testing.T, k Kubelet, b []byte, file string, start func(dir string, m Machine) error, old, new Machine) {
	t.Helper()
	run := func(name string, b []byte, m Machine, refused bool) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
				t.Fatal(err)
			}
			err := start(dir, m)
			switch {
			case refused && err == nil:
				t.Errorf("%s accepts it", k)
			case !refused && err != nil:
				t.Errorf("%s refuses it: %v", k, err)
			}
		})
	}
	for _, c := range controls {
		altered, err := c.alter(b)
		if err != nil {
			t.Fatalf("control %s: %v", c.name, err)
		}
		run(c.name, altered, new, c.refused(k))
	}
	run("old-machine", b, old, true)
}

// legacyLayout returns the layout of b's legacy fields: b without data and
// dataChecksum, as node-resized reads it (format: ParseCPUManager or
// ParseMemoryManager and the layout it found).
func legacyLayout(b []byte, format func([]byte) (string, error)) (string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return "", err
	}
	delete(top, "data")
	delete(top, "dataChecksum")
	legacy, err := json.Marshal(top)
	if err != nil {
		return "", err
	}
	return format(legacy)
}

func cpuFormat(b []byte) (string, error) {
	st, err := checkpoint.ParseCPUManager(b)
	return st.Format, err
}

func memoryFormat(b []byte) (string, error) {
	st, err := checkpoint.ParseMemoryManager(b)
	return st.Format, err
}
