package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/node-resized/node-resized/topology/topologytest"
)

func TestReaderRead(t *testing.T) {
	dir := topologytest.Dir(t)
	r := getReader()
	defer putReader(r)

	// Larger than the scratch buffer: it grows.
	big := strings.Repeat("0123456789abcdef", 5000)
	p := filepath.Join(dir, "big")
	if err := os.WriteFile(p, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := r.read(r.at(p, -1, ""))
	if err != nil || string(b) != big {
		t.Fatalf("read %d bytes, %v; want %d", len(b), err, len(big))
	}
	// Larger than the cap: an error, not a huge allocation.
	if err := os.WriteFile(p, make([]byte, maxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.read(r.at(p, -1, "")); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("read of an oversized file: %v", err)
	}
	// Empty file.
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := r.read(r.at(p, -1, "")); err != nil || len(b) != 0 {
		t.Errorf("read of an empty file: %q, %v", b, err)
	}
	if _, err := r.read(r.at(dir, -1, "/missing")); !isNotExist(err) || !strings.Contains(err.Error(), dir+"/missing") {
		t.Errorf("read of a missing file: %v", err)
	}
}

func TestReaderScan(t *testing.T) {
	dir := topologytest.Dir(t)
	var want []string
	for i := range 3000 { // several getdents batches
		name := fmt.Sprintf("memory%d", i)
		want = append(want, name)
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := getReader()
	defer putReader(r)
	var got []string
	if err := r.scan(r.at(dir, -1, ""), func(name []byte) { got = append(got, string(name)) }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("scan found %d names, want %d", len(got), len(want))
	}
	if err := r.scan(r.at(dir, -1, "/missing"), func([]byte) {}); !isNotExist(err) {
		t.Errorf("scan of a missing directory: %v", err)
	}
}

func TestNumberedName(t *testing.T) {
	for _, c := range []struct {
		name, prefix string
		id           int
		ok           bool
	}{
		{"cpu0", "cpu", 0, true},
		{"cpu1023", "cpu", 1023, true},
		{"cpu", "cpu", 0, false},
		{"cpufreq", "cpu", 0, false},
		{"cpulist", "cpu", 0, false},
		{"memory4095", "memory", 4095, true},
		{"memory_side_cache", "memory", 0, false},
		{"node1", "cpu", 0, false},
	} {
		id, ok := numberedName([]byte(c.name), c.prefix)
		if id != c.id || ok != c.ok {
			t.Errorf("numberedName(%q, %q) = %d, %v", c.name, c.prefix, id, ok)
		}
	}
}

func TestMeminfoKB(t *testing.T) {
	node := []byte("Node 3 MemTotal:       5072672 kB\nNode 3 MemFree:  1 kB\n")
	if kb, ok, err := meminfoKB(node, "MemTotal"); kb != 5072672 || !ok || err != nil {
		t.Errorf("node meminfo: %d %v %v", kb, ok, err)
	}
	if _, ok, err := meminfoKB(node, "SwapTotal"); ok || err != nil {
		t.Errorf("absent key: %v %v", ok, err)
	}
	for _, bad := range []string{"MemTotal: 12\n", "MemTotal: x kB\n", "MemTotal: 12 MB\n"} {
		if _, _, err := meminfoKB([]byte(bad), "MemTotal"); err == nil {
			t.Errorf("meminfoKB(%q) accepted", bad)
		}
	}
}
