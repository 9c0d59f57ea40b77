package topology

import (
	"testing"
	"time"
	"path/filepath"
	"os"
)

func TestTmpTime(t *testing.T) {
	for _, sc := range append(scenarios(), scenario{name: "1024", fix: machine1024()}) {
		d, _ := os.MkdirTemp("", "x")
		t0 := time.Now()
		sc.fix.write(t, d)
		el := time.Since(t0)
		n := 0
		filepath.Walk(d, func(string, os.FileInfo, error) error { n++; return nil })
		t0 = time.Now()
		os.RemoveAll(d)
		t.Logf("%s: %v, %d entries, remove %v", sc.name, el, n, time.Since(t0))
	}
}
