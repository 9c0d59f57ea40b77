package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// fuzzParse fuzzes a codec's parse, seeded with its files in testdata/dir:
// whatever it is given, parse refuses it with an error that wraps
// ErrCorrupt, or names the layout it read.
func fuzzParse(f *testing.F, dir string, parse func([]byte) (format string, err error)) {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		format, err := parse(b)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Errorf("error %v does not wrap ErrCorrupt", err)
		}
		if err == nil && format == "" {
			t.Error("no format")
		}
	})
}
