//go:build unix

package capped

import (
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// fifo makes a FIFO at path that a writer fills with b once the reader
// opens it; the test waits for the writer.
func fifo(b []byte) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		if err := unix.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			w, err := os.OpenFile(path, os.O_WRONLY, 0) // waits for the reader
			if err != nil {
				t.Error(err)
				return
			}
			defer w.Close()
			w.Write(b) // a reader that stops at its cap makes the rest fail
		})
		t.Cleanup(wg.Wait)
	}
}
