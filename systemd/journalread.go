package systemd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// JournalEntry is one entry of a unit's journal, as ReadJournal reads it.
// It is a plain value.
type JournalEntry struct {
	// Time is when the journal received it, PID the process that wrote
	// it (0 when unknown), Message its text.
	Time    time.Time `json:"time"`
	PID     uint32    `json:"pid,omitempty"`
	Message string    `json:"message"`
}

// journalctl is the journal's reader. The journal is read through it and
// not through go-systemd's sdjournal, which needs cgo (it dlopens
// libsystemd) while node-resized is built without; journalctl is on every
// host that runs systemd.
var journalctl = "journalctl"

// maxJournalBytes caps what ReadJournal reads of journalctl's output.
const maxJournalBytes = 8 << 20

// ReadJournal reads the journal of unit from since (the host's clock),
// oldest first, at most the last max entries (journalctl -u unit -o json
// --since @t -n max).
func ReadJournal(ctx context.Context, unit string, since time.Time, max int) ([]JournalEntry, error) {
	if max <= 0 {
		max = 1000
	}
	at := fmt.Sprintf("@%d.%06d", since.Unix(), since.Nanosecond()/1000)
	cmd := exec.CommandContext(ctx, journalctl, "--no-pager", "--quiet", "-o", "json",
		"--output-fields=MESSAGE,_PID", "-u", unit, "--since", at, "-n", strconv.Itoa(max))
	var out, errb capBuffer
	out.max, errb.max = maxJournalBytes, 4096
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("read the journal of %s: %w: %s", unit, err, strings.TrimSpace(errb.String()))
	}
	return parseJournal(out.Bytes())
}

// parseJournal decodes journalctl -o json: one JSON object per line (a
// line that is not one, as the last after the cap, is skipped). A MESSAGE
// that is not valid UTF-8 comes as an array of bytes.
func parseJournal(b []byte) ([]JournalEntry, error) {
	var out []JournalEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), maxJournalBytes)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var raw map[string]json.RawMessage
		if json.Unmarshal(line, &raw) != nil {
			continue // a line cut at the cap
		}
		var e JournalEntry
		if us, err := strconv.ParseInt(jsonString(raw["__REALTIME_TIMESTAMP"]), 10, 64); err == nil {
			e.Time = time.UnixMicro(us)
		}
		if pid, err := strconv.ParseUint(jsonString(raw["_PID"]), 10, 32); err == nil {
			e.PID = uint32(pid)
		}
		e.Message = jsonString(raw["MESSAGE"])
		out = append(out, e)
	}
	return out, sc.Err()
}

// jsonString is a journal field's value: a string, or an array of bytes.
func jsonString(m json.RawMessage) string {
	var s string
	if json.Unmarshal(m, &s) == nil {
		return s
	}
	var bs []byte
	var ns []int
	if json.Unmarshal(m, &ns) == nil {
		for _, n := range ns {
			bs = append(bs, byte(n))
		}
		return string(bs)
	}
	return ""
}

// capBuffer keeps the first max bytes written to it and drops the rest.
type capBuffer struct {
	bytes.Buffer
	max int
}

func (c *capBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		if len(p) > room {
			c.Buffer.Write(p[:room])
		} else {
			c.Buffer.Write(p)
		}
	}
	return len(p), nil
}
