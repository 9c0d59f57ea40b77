package systemd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"unicode"

	"github.com/coreos/go-systemd/v22/journal"
)

// UnderJournal reports whether the process's stderr is connected to the
// journal (systemd sets JOURNAL_STREAM for a service) and the journal socket
// can be reached.
func UnderJournal() bool {
	if !journal.Enabled() {
		return false
	}
	ok, err := journal.StderrIsJournalStream()
	return err == nil && ok
}

// JournalHandler is a slog.Handler that sends each record to the journal
// as one entry with its attributes as journal fields (upper-cased, e.g.
// CHANGE_ID=7), so `journalctl -u node-resized CHANGE_ID=7` finds it and
// `journalctl -o verbose` shows every field. It is safe for concurrent use.
type JournalHandler struct {
	level  slog.Leveler
	attrs  []slog.Attr
	groups []string
	ident  string
}

// NewJournalHandler returns a handler that logs at level and above under
// the syslog identifier ident.
func NewJournalHandler(ident string, level slog.Leveler) *JournalHandler {
	return &JournalHandler{level: level, ident: ident}
}

// Enabled implements slog.Handler.
func (h *JournalHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

// WithAttrs implements slog.Handler.
func (h *JournalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h2 := *h
	h2.attrs = append(append([]slog.Attr(nil), h.attrs...), qualify(h.groups, as)...)
	return &h2
}

// WithGroup implements slog.Handler.
func (h *JournalHandler) WithGroup(name string) slog.Handler {
	h2 := *h
	h2.groups = append(append([]string(nil), h.groups...), name)
	return &h2
}

func qualify(groups []string, as []slog.Attr) []slog.Attr {
	if len(groups) == 0 {
		return as
	}
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = slog.Attr{Key: strings.Join(groups, "_") + "_" + a.Key, Value: a.Value}
	}
	return out
}

// Handle implements slog.Handler.
func (h *JournalHandler) Handle(_ context.Context, r slog.Record) error {
	vars := map[string]string{"SYSLOG_IDENTIFIER": h.ident}
	var text strings.Builder
	text.WriteString(r.Message)
	add := func(a slog.Attr) {
		a.Value = a.Value.Resolve()
		if a.Equal(slog.Attr{}) {
			return
		}
		if a.Value.Kind() == slog.KindGroup {
			for _, g := range a.Value.Group() {
				vars[fieldName(a.Key+"_"+g.Key)] = g.Value.String()
			}
			return
		}
		v := a.Value.String()
		vars[fieldName(a.Key)] = v
		fmt.Fprintf(&text, " %s=%s", a.Key, quoteIfNeeded(v))
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool {
		add(slog.Attr{Key: strings.Join(append(append([]string(nil), h.groups...), a.Key), "_"), Value: a.Value})
		return true
	})
	if err := journal.Send(text.String(), priority(r.Level), vars); err != nil {
		// The journal went away: do not lose the line.
		fmt.Fprintln(os.Stderr, text.String())
	}
	return nil
}

func priority(l slog.Level) journal.Priority {
	switch {
	case l >= slog.LevelError:
		return journal.PriErr
	case l >= slog.LevelWarn:
		return journal.PriWarning
	case l >= slog.LevelInfo:
		return journal.PriInfo
	default:
		return journal.PriDebug
	}
}

// fieldName turns an attribute key into a valid journal field name:
// upper-case letters, digits and underscores, not starting with '_' or a
// digit.
func fieldName(key string) string {
	var b strings.Builder
	for _, r := range key {
		switch {
		case r >= 'a' && r <= 'z':
			b.WriteRune(unicode.ToUpper(r))
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := strings.TrimLeft(b.String(), "_")
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		s = "F_" + s
	}
	switch s {
	case "MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "MESSAGE_ID", "CODE_FILE", "CODE_LINE", "CODE_FUNC":
		s = "F_" + s
	}
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"=") {
		return fmt.Sprintf("%q", s)
	}
	return s
}
