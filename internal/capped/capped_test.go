package capped

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFile(t *testing.T) {
	const max = 64
	regular := func(b []byte) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	full := bytes.Repeat([]byte("x"), max)
	for _, tc := range []struct {
		name  string
		make  func(t *testing.T, path string) // nil: nothing at path
		want  []byte
		isErr error // the error wraps it; nil: no error
	}{
		{name: "small", make: regular([]byte("0-3\n")), want: []byte("0-3\n")},
		{name: "empty", make: regular(nil), want: []byte{}},
		{name: "at the cap", make: regular(full), want: full},
		{name: "one byte over the cap", make: regular(append(full, 'y')), isErr: ErrTooLarge},
		{name: "far over the cap", make: regular(make([]byte, 1<<20)), isErr: ErrTooLarge},
		{name: "missing", isErr: fs.ErrNotExist},
		{name: "directory", make: func(t *testing.T, path string) { os.Mkdir(path, 0o755) }, isErr: errAny},
		// A FIFO reports a size of 0, as sysfs and cgroup files do: what
		// it holds is read all the same, and the cap holds.
		{name: "FIFO", make: fifo([]byte("online_movable")), want: []byte("online_movable")},
		{name: "FIFO over the cap", make: fifo(bytes.Repeat([]byte("z"), 4*max)), isErr: ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			if tc.make != nil {
				tc.make(t, path)
			}
			got, err := ReadFile(path, max)
			if tc.isErr == nil {
				if err != nil || !bytes.Equal(got, tc.want) {
					t.Fatalf("ReadFile = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			var pe *fs.PathError
			if got != nil || !errors.As(err, &pe) || pe.Path != path || strings.Count(err.Error(), path) != 1 {
				t.Fatalf("ReadFile = %q, %v; want an *fs.PathError naming %s once", got, err, path)
			}
			if tc.isErr != errAny && !errors.Is(err, tc.isErr) {
				t.Fatalf("ReadFile error %v does not wrap %v", err, tc.isErr)
			}
		})
	}
}

// errAny stands for an error of any kind in the table.
var errAny = errors.New("any error")
