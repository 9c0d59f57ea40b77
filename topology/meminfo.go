package topology

import (
	"fmt"
)

// MemTotal returns MemTotal from procRoot/meminfo, in bytes. It reads only
// the head of the file (MemTotal is its first line) into a stack buffer
// and does not allocate, so it can run every second.
func (fs FS) MemTotal() (uint64, error) {
	if err := fs.ready(); err != nil {
		return 0, err
	}
	var buf [256]byte
	n, err := readHead(fs.meminfoZ, buf[:])
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", fs.meminfo, err)
	}
	head := buf[:n]
	// Only complete lines count: the number may be cut at the buffer end.
	for len(head) > 0 && head[len(head)-1] != '\n' {
		head = head[:len(head)-1]
	}
	if kb, ok, err := meminfoKB(head, "MemTotal"); err == nil && ok {
		return kb * 1024, nil
	}
	// Not in the head: read and parse the whole file.
	r := getReader()
	defer putReader(r)
	b, err := r.read(r.at(fs.meminfo, -1, ""))
	if err != nil {
		return 0, err
	}
	mem, _, err := parseMeminfo(b)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", fs.meminfo, err)
	}
	return mem, nil
}

// parseMeminfo returns MemTotal and SwapTotal in bytes from a
// /proc/meminfo. MemTotal is required; a missing SwapTotal is 0.
//
// Like cAdvisor it takes the first "MemTotal:" line whose value is a number
// followed by "kB", and multiplies by 1024.
func parseMeminfo(b []byte) (memTotal, swapTotal uint64, err error) {
	mem, ok, err := meminfoKB(b, "MemTotal")
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		return 0, 0, fmt.Errorf("no MemTotal")
	}
	swap, _, err := meminfoKB(b, "SwapTotal")
	if err != nil {
		return 0, 0, err
	}
	return mem * 1024, swap * 1024, nil
}

// parseNodeMemTotal returns "Node N MemTotal:" from a nodeN/meminfo, in
// bytes.
func parseNodeMemTotal(b []byte) (uint64, error) {
	kb, ok, err := meminfoKB(b, "MemTotal")
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("no MemTotal")
	}
	return kb * 1024, nil
}

// meminfoKB finds the line "key: N kB" (or "Node X key: N kB" as in
// nodeN/meminfo) and returns N. It does not allocate.
func meminfoKB(b []byte, key string) (kb uint64, found bool, err error) {
	for len(b) > 0 {
		line := b
		if i := indexByteFrom(b, '\n', 0); i < len(b) {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		colon := indexByteFrom(line, ':', 0)
		if colon == len(line) {
			continue
		}
		name := line[:colon]
		if len(name) > 5 && string(name[:5]) == "Node " {
			// "Node 0 MemTotal": skip the node number.
			rest := name[5:]
			sp := indexByteFrom(rest, ' ', 0)
			if sp == len(rest) {
				continue
			}
			name = rest[sp+1:]
		}
		if string(name) != key {
			continue
		}
		val := trimSpace(line[colon+1:])
		if len(val) < 3 || string(val[len(val)-3:]) != " kB" {
			return 0, false, fmt.Errorf("%s: value %q is not in kB", key, string(val))
		}
		v, ok := parseUint(val[:len(val)-3], 10)
		if !ok {
			return 0, false, fmt.Errorf("%s: bad value %q", key, string(val))
		}
		return v, true, nil
	}
	return 0, false, nil
}
