package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRemoveDropIn: --uninstall removes the plain install's kubelet
// drop-in and reloads systemd; it leaves a file of that name that is not
// node-resized's (a mask), and says when systemd could not be reloaded.
func TestRemoveDropIn(t *testing.T) {
	dir := t.TempDir()
	ours, err := os.ReadFile("../../packaging/kubelet/90-node-resized.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		make      func(path string)
		reloadErr error
		gone      bool
		reloads   int
		err       bool
	}{
		{"none", func(string) {}, nil, true, 0, false},
		{"ours", func(p string) { os.WriteFile(p, ours, 0o644) }, nil, true, 1, false},
		{"a mask", func(p string) { os.Symlink("/dev/null", p) }, nil, false, 0, false},
		{"ours, systemd unreachable", func(p string) { os.WriteFile(p, ours, 0o644) }, errors.New("no bus"), true, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".conf")
			tc.make(path)
			reloads := 0
			u := &uninstaller{dropIn: path, reload: func(context.Context) error { reloads++; return tc.reloadErr }}
			done, err := u.removeDropIn(context.Background())
			t.Logf("%s, %v", done, err)
			if (err != nil) != tc.err || reloads != tc.reloads {
				t.Errorf("err %v, %d reloads; want error %v, %d reloads", err, reloads, tc.err, tc.reloads)
			}
			if _, serr := os.Lstat(path); (serr != nil) != tc.gone {
				t.Errorf("the file is there: %v, want gone %v", serr == nil, tc.gone)
			}
		})
	}
}
