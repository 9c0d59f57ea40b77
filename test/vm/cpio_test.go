package vm

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

func TestCPIORoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := newCPIOWriter(&buf)
	w.File("/bin/busybox", 0o755, []byte("ELF..."))
	w.Symlink("bin/sh", "/bin/busybox")
	w.File("etc/vm/agent", 0o755, []byte("#!/bin/sh\n"))
	w.Dir("run", 0o755)
	w.File("empty", 0o644, nil)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d is not 4-byte aligned", buf.Len())
	}
	entries, err := readCPIO(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name)
	}
	want := "bin bin/busybox bin/sh etc etc/vm etc/vm/agent run empty"
	if strings.Join(got, " ") != want {
		t.Errorf("entries %q, want %q (parents before children)", strings.Join(got, " "), want)
	}
	byName := map[string]cpioEntry{}
	for _, e := range entries {
		byName[e.Name] = e
	}
	if e := byName["bin/busybox"]; e.Mode != 0o100755 || string(e.Data) != "ELF..." {
		t.Errorf("bin/busybox: mode %o data %q", e.Mode, e.Data)
	}
	if e := byName["bin/sh"]; e.Mode != 0o120777 || string(e.Data) != "/bin/busybox" {
		t.Errorf("bin/sh: mode %o target %q", e.Mode, e.Data)
	}
	if e := byName["etc"]; e.Mode != 0o040755 {
		t.Errorf("etc: mode %o", e.Mode)
	}

	// GNU cpio, when present, must read it too.
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("no cpio tool")
	}
	cmd := exec.Command("cpio", "-it", "--quiet")
	cmd.Stdin = bytes.NewReader(buf.Bytes())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -it: %v\n%s", err, out)
	}
	if got := strings.Join(strings.Fields(string(out)), " "); got != want {
		t.Errorf("cpio -it lists %q, want %q", got, want)
	}
}

func TestReadCPIORejectsGarbage(t *testing.T) {
	if _, err := readCPIO(strings.NewReader(strings.Repeat("x", 200))); err == nil {
		t.Error("no error for a non-cpio input")
	}
	if _, err := readCPIO(strings.NewReader("070701")); err == nil {
		t.Error("no error for a truncated header")
	}
}
