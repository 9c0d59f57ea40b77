package topology

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// MaxCPUID is the largest logical CPU id ParseCPUSet accepts. The kernel's
// NR_CPUS tops out at 8192 on every architecture today; the bound only
// stops a corrupt list such as "0-4294967295" from allocating gigabytes.
const MaxCPUID = 1<<16 - 1

// CPUSet is a sorted set of logical CPU ids without duplicates. The empty
// set is nil. In JSON it is the kernel's list string ("0-3,8"); the empty
// set is "".
//
// A CPUSet is a plain slice: it is safe for concurrent reads, and its
// methods never modify it.
type CPUSet []int

// NewCPUSet returns the set of ids, in any order and with repeats; ids is
// not modified.
func NewCPUSet(ids ...int) CPUSet {
	if len(ids) == 0 {
		return nil
	}
	s := slices.Clone(ids)
	slices.Sort(s)
	return slices.Compact(s)
}

// ParseCPUSet parses the kernel's list format, as in
// /sys/devices/system/cpu/online: comma-separated ids and inclusive ranges
// ("0-3,8,10-11"). Surrounding white space (the trailing newline) is
// ignored; "" gives the empty set. Elements out of order or overlapping are
// accepted and normalised.
func ParseCPUSet(s string) (CPUSet, error) {
	return parseCPUList([]byte(s))
}

// parseCPUList parses one kernel CPU list. It does not retain b.
func parseCPUList(b []byte) (CPUSet, error) {
	b = trimSpace(b)
	if len(b) == 0 {
		return nil, nil
	}
	// Count the elements first so that the usual case allocates once.
	n := 0
	for start := 0; start <= len(b); {
		end := indexByteFrom(b, ',', start)
		lo, hi, err := parseCPURange(b[start:end])
		if err != nil {
			return nil, fmt.Errorf("parse cpu list %q: %w", b, err)
		}
		n += hi - lo + 1
		if n > 4*(MaxCPUID+1) {
			return nil, fmt.Errorf("parse cpu list: more than %d elements", 4*(MaxCPUID+1))
		}
		start = end + 1
	}
	set := make(CPUSet, 0, min(n, MaxCPUID+1))
	sorted := true
	for start := 0; start <= len(b); {
		end := indexByteFrom(b, ',', start)
		lo, hi, _ := parseCPURange(b[start:end])
		if len(set) > 0 && lo <= set[len(set)-1] {
			sorted = false
		}
		for id := lo; id <= hi; id++ {
			set = append(set, id)
		}
		start = end + 1
	}
	if !sorted {
		slices.Sort(set)
		set = slices.Compact(set)
	}
	return set, nil
}

// indexByteFrom returns the index of c in b at or after from, or len(b).
func indexByteFrom(b []byte, c byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] == c {
			return i
		}
	}
	return len(b)
}

// parseCPURange parses "N" or "N-M".
func parseCPURange(b []byte) (lo, hi int, err error) {
	dash := indexByteFrom(b, '-', 0)
	lo, err = parseCPUID(b[:dash])
	if err != nil {
		return 0, 0, err
	}
	if dash == len(b) {
		return lo, lo, nil
	}
	hi, err = parseCPUID(b[dash+1:])
	if err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("range %q ends before it starts", b)
	}
	return lo, hi, nil
}

// parseCPUID parses a decimal CPU id without allocating.
func parseCPUID(b []byte) (int, error) {
	b = trimSpace(b)
	if len(b) == 0 {
		return 0, fmt.Errorf("empty element")
	}
	id := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("bad cpu id %q", b)
		}
		id = id*10 + int(c-'0')
		if id > MaxCPUID {
			return 0, fmt.Errorf("cpu id %q above %d", b, MaxCPUID)
		}
	}
	return id, nil
}

// String returns the set in the kernel's list format ("0-3,8"), "" when
// the set is empty.
func (s CPUSet) String() string {
	return string(s.appendList(nil))
}

// appendList appends the set in list format to b.
func (s CPUSet) appendList(b []byte) []byte {
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(s[i]), 10)
		if j > i {
			b = append(b, '-')
			b = strconv.AppendInt(b, int64(s[j]), 10)
		}
		i = j + 1
	}
	return b
}

// Len returns the number of CPUs in the set.
func (s CPUSet) Len() int { return len(s) }

// Contains reports whether cpu is in the set.
func (s CPUSet) Contains(cpu int) bool {
	_, ok := slices.BinarySearch(s, cpu)
	return ok
}

// Difference returns the CPUs of s that are not in o, as a new set.
func (s CPUSet) Difference(o CPUSet) CPUSet {
	var out CPUSet
	j := 0
	for _, id := range s {
		for j < len(o) && o[j] < id {
			j++
		}
		if j < len(o) && o[j] == id {
			continue
		}
		out = append(out, id)
	}
	return out
}

// equal reports whether s and o hold the same CPUs.
func (s CPUSet) equal(o CPUSet) bool { return slices.Equal(s, o) }

// MarshalJSON encodes the set as its list string.
func (s CPUSet) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 2+4*len(s))
	b = append(b, '"')
	b = s.appendList(b)
	return append(b, '"'), nil
}

// UnmarshalJSON decodes a list string; null leaves the set unchanged.
func (s *CPUSet) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return fmt.Errorf("cpu set: %w", err)
	}
	set, err := ParseCPUSet(str)
	if err != nil {
		return err
	}
	*s = set
	return nil
}

// trimSpace trims ASCII white space without allocating.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}
