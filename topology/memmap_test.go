package topology

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/node-resized/node-resized/topology/topologytest"
)

func TestParseMemmapAddr(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0x0\n", 0, true},
		{"0x9fbff\n", 0x9fbff, true},
		{"0x63fffffff\n", 0x63fffffff, true},
		{"0xffffffffffffffff\n", ^uint64(0), true},
		{"0x10000000000000000\n", 0, false}, // overflows
		{"9fbff\n", 0, false},               // the kernel writes 0x
		{"0x\n", 0, false},
		{"0xg\n", 0, false},
		{"", 0, false},
	} {
		got, ok := parseMemmapAddr([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("parseMemmapAddr(%q) = %#x, %v; want %#x, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestFirmwareMemmap(t *testing.T) {
	const bs = 128 * miB
	m := hotplugMachine()
	m.Memmap = m.PCMemmap()
	// An empty entry, as a zero-sized range would show (end one below
	// start), is left out.
	m.Memmap = append(m.Memmap, topologytest.MemmapEntry{Index: 9, Start: 0x200000, End: 0x1fffff, Type: "Reserved"})
	got, err := newFixtureFS(t, m).FirmwareMemmap()
	if err != nil {
		t.Fatal(err)
	}
	want := []MemmapEntry{
		{Index: 0, Start: 0, End: 0x9fc00, Type: "System RAM"},
		{Index: 1, Start: 0x9fc00, End: 0x100000, Type: "Reserved"},
		{Index: 2, Start: 0x100000, End: 16 * bs, Type: "System RAM"}, // boot memory, memory0-15
		{Index: 3, Start: 16 * bs, End: 20 * bs, Type: "System RAM"},  // PNP0C80:00
		{Index: 4, Start: 20 * bs, End: 26 * bs, Type: "System RAM"},  // PNP0C80:01
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FirmwareMemmap\n got %+v\nwant %+v", got, want)
	}

	m.Memmap = nil
	if _, err := newFixtureFS(t, m).FirmwareMemmap(); !errors.Is(err, ErrNoFirmwareMemmap) {
		t.Errorf("no memmap: error %v, want ErrNoFirmwareMemmap", err)
	}
}

func TestFirmwareMemmapBadAddress(t *testing.T) {
	m := hotplugMachine()
	m.Memmap = m.PCMemmap()
	m.Extra = func(sys string) {
		if err := os.WriteFile(filepath.Join(sys, "firmware/memmap/1/end"), []byte("fffff\n"), 0o644); err != nil {
			panic(err)
		}
	}
	if _, err := newFixtureFS(t, m).FirmwareMemmap(); err == nil {
		t.Error("an end without 0x: no error")
	}
}
