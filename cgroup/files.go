package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/node-resized/node-resized/internal/capped"
)

// maxFileSize caps what is read from one cgroup file: the largest one read
// here, memory.stat, is a few kilobytes. Reads do not trust stat: cgroup
// files report a size of 0 or 4096.
const maxFileSize = 1 << 20

// readFile reads a whole cgroup file, at most maxFileSize bytes.
func readFile(path string) ([]byte, error) {
	return capped.ReadFile(path, maxFileSize)
}

// readValue reads a one-line cgroup file without its trailing newline.
func readValue(path string) (string, error) {
	b, err := readFile(path)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}

// parseMax parses a cgroup v2 limit: a decimal number or "max" (returned as
// math.MaxInt64).
func parseMax(s string) (int64, error) {
	if s == "max" {
		return math.MaxInt64, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse limit %q: %w", s, err)
	}
	return v, nil
}

// readKey reads the value of one key from a flat keyed file
// (memory.events, memory.stat: "key value" lines); ok is false when the key
// is absent.
func readKey(path, key string) (v uint64, ok bool, err error) {
	b, err := readFile(path)
	if err != nil {
		return 0, false, err
	}
	return parseKey(b, key, path)
}

// parseKey finds one key in the contents of a flat keyed file.
func parseKey(b []byte, key, path string) (uint64, bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, val, found := strings.Cut(sc.Text(), " ")
		if !found || k != key {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("parse %s in %s: %w", key, path, err)
		}
		return v, true, nil
	}
	return 0, false, sc.Err()
}
