package monitor

import (
	"encoding/json"
	"strconv"
	"strings"
)

// maxSeqRanges bounds the memory one change can spend on its SEQNUMs. A
// burst whose SEQNUMs do not fit is marked truncated.
const maxSeqRanges = 256

// SeqRange is an inclusive range of kernel SEQNUMs.
type SeqRange struct{ First, Last uint64 }

// Seqnums is a compact set of the kernel SEQNUMs that caused a change, kept
// as ranges in arrival order. In JSON it is a string such as
// "1200-2223,2230". It is not safe for concurrent use.
type Seqnums struct {
	Ranges    []SeqRange
	Count     int
	Truncated bool
}

// Add records one SEQNUM. Consecutive SEQNUMs extend the last range.
func (s *Seqnums) Add(n uint64) {
	s.Count++
	if k := len(s.Ranges); k > 0 {
		last := &s.Ranges[k-1]
		if n == last.Last+1 {
			last.Last = n
			return
		}
		if n >= last.First && n <= last.Last {
			return
		}
	}
	if len(s.Ranges) == maxSeqRanges {
		s.Truncated = true
		return
	}
	s.Ranges = append(s.Ranges, SeqRange{n, n})
}

// String formats the set as a kernel-style list ("1200-2223,2230").
func (s Seqnums) String() string {
	var b strings.Builder
	for i, r := range s.Ranges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(r.First, 10))
		if r.Last != r.First {
			b.WriteByte('-')
			b.WriteString(strconv.FormatUint(r.Last, 10))
		}
	}
	if s.Truncated {
		b.WriteString(",...")
	}
	return b.String()
}

// MarshalJSON encodes the set as its list string.
func (s Seqnums) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON decodes a list string written by MarshalJSON.
func (s *Seqnums) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return err
	}
	*s = Seqnums{}
	for part := range strings.SplitSeq(str, ",") {
		if part == "" {
			continue
		}
		if part == "..." {
			s.Truncated = true
			continue
		}
		lo, hi, found := strings.Cut(part, "-")
		first, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return err
		}
		last := first
		if found {
			if last, err = strconv.ParseUint(hi, 10, 64); err != nil {
				return err
			}
		}
		s.Ranges = append(s.Ranges, SeqRange{first, last})
		s.Count += int(last-first) + 1
	}
	return nil
}
