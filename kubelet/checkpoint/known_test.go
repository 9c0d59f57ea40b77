package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A kubelet newer than every layout node-resized knows may write a field
// none of them has, anywhere in the file. Such a file must be refused as
// an unknown layout, never rewritten: a rewrite would drop the field. The
// files here are the kubelet's own (testdata) with one field added, and,
// where the field is inside a v4 or v3 data payload, its dataChecksum
// recomputed, so that only the guard stands between the file and a
// rewrite.
func TestUnknownLayoutNeverRewritten(t *testing.T) {
	type edit func(m map[string]any)
	// add adds field path[len-1] under path[:len-1]; "*" descends into
	// any one entry of a map keyed by ids.
	add := func(path ...string) edit {
		return func(m map[string]any) {
			for _, k := range path[:len(path)-1] {
				if k == "*" {
					for _, v := range m {
						m = v.(map[string]any)
						break
					}
					continue
				}
				m = m[k].(map[string]any)
			}
			m[path[len(path)-1]] = json.Number("1")
		}
	}
	for _, tc := range []struct {
		kind, file string
		top        edit // applied to the file
		data       edit // applied to its data payload
	}{
		{kind: "cpu", file: "v2", top: add("future")},
		{kind: "cpu", file: "v3", top: add("future")},
		{kind: "cpu", file: "v3", top: add("podEntries", "*", "future")},
		{kind: "cpu", file: "v4", top: add("future")},
		{kind: "cpu", file: "v4", data: add("future")},
		{kind: "cpu", file: "v4", data: add("podEntries", "*", "future")},
		{kind: "memory", file: "v1", top: add("future")},
		{kind: "memory", file: "v1", top: add("machineState", "0", "future")},
		{kind: "memory", file: "v2", top: add("podEntries", "*", "future")},
		{kind: "memory", file: "v3", top: add("future")},
		{kind: "memory", file: "v3", data: add("future")},
		{kind: "memory", file: "v3", data: add("machineState", "0", "memoryMap", "memory", "future")},
		{kind: "memory", file: "v3", data: add("podEntries", "*", "future")},
	} {
		name := tc.kind + "/" + tc.file + "/top"
		if tc.data != nil {
			name = tc.kind + "/" + tc.file + "/data"
		}
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", tc.kind+"_manager_state")
			orig, err := os.ReadFile(filepath.Join(dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			parse := func(b []byte) error { _, err := ParseCPUManager(b); return err }
			if tc.kind == "memory" {
				parse = func(b []byte) error { _, err := ParseMemoryManager(b); return err }
			}
			// The control: the same file through the same re-encoding,
			// without the field, loads.
			if err := parse(reencode(t, orig, nil, nil)); err != nil {
				t.Fatalf("re-encoded without the field: %v", err)
			}
			b := reencode(t, orig, tc.top, tc.data)
			err = parse(b)
			if !errors.Is(err, ErrUnknownLayout) || errors.Is(err, ErrCorrupt) {
				t.Fatalf("err %v, want ErrUnknownLayout (and not ErrCorrupt)", err)
			}
			t.Log(err)
			// A plan refuses it, and the file stays as it is.
			path := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.kind == "cpu" {
				_, err = PlanCPUManager(path, CPUTarget{Online: []int{0, 1}})
			} else {
				_, err = PlanMemoryManager(path, nil, nil)
			}
			if !errors.Is(err, ErrUnknownLayout) {
				t.Fatalf("plan: %v", err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, b) {
				t.Fatal("the file changed")
			}
		})
	}
}

// reencode decodes a checkpoint, applies top to it and data to its data
// payload (recomputing the dataChecksum), and encodes it again.
func reencode(t *testing.T, b []byte, top, data func(map[string]any)) []byte {
	t.Helper()
	m := decodeMap(t, b)
	if data != nil {
		d := decodeMap(t, []byte(m["data"].(string)))
		data(d)
		db, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		m["data"] = string(db)
		m["dataChecksum"] = json.Number(jsonUint(dataChecksum(string(db))))
	} else if s, ok := m["data"].(string); ok {
		// Keep the payload byte for byte: its checksum covers it.
		m["data"] = s
	}
	if top != nil {
		top(m)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func jsonUint(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}
