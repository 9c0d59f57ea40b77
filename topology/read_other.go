//go:build !linux

package topology

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/node-resized/node-resized/internal/capped"
)

// The daemon runs on Linux; this portable fallback only keeps the package
// building (and its fixture tests running) elsewhere.

var cwd = dir{fd: -1}

func openDir(path string) (dir, error) {
	st, err := os.Stat(path)
	if err != nil {
		return dir{fd: -1}, fmt.Errorf("open directory %s: %w", path, err)
	}
	if !st.IsDir() {
		return dir{fd: -1}, fmt.Errorf("open directory %s: not a directory", path)
	}
	return dir{fd: -1, path: path}, nil
}

func (d dir) close() {}

func (r *reader) readIn(d dir, rel []byte) ([]byte, error) {
	b, err := capped.ReadFile(d.join(rel), maxFileSize)
	if err != nil {
		return nil, err
	}
	r.buf = b
	return b, nil
}

func (r *reader) scanIn(d dir, rel []byte, fn func(name []byte)) error {
	path := d.join(rel)
	entries, err := os.ReadDir(path)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", path, err)
	}
	for _, e := range entries {
		fn([]byte(e.Name()))
	}
	return nil
}

func readHead(pathZ string, buf []byte) (int, error) {
	f, err := os.Open(strings.TrimSuffix(pathZ, "\x00"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := f.Read(buf)
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func statfsCapacity(path string) (uint64, error) {
	return 0, errors.ErrUnsupported
}

func (r *reader) exists(d dir, rel []byte) (bool, error) {
	path := d.join(rel)
	if _, err := os.Lstat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	return true, nil
}
