package uevent

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Action is a typed kobject action, one of the kernel's kobject_actions.
type Action uint8

// The kobject actions. ActionUnknown stands for any name this package does
// not know; the raw name stays in Event.Env["ACTION"].
const (
	ActionUnknown Action = iota
	ActionAdd
	ActionRemove
	ActionChange
	ActionMove
	ActionOnline
	ActionOffline
	ActionBind
	ActionUnbind
)

var actionNames = [...]string{
	ActionUnknown: "unknown",
	ActionAdd:     "add",
	ActionRemove:  "remove",
	ActionChange:  "change",
	ActionMove:    "move",
	ActionOnline:  "online",
	ActionOffline: "offline",
	ActionBind:    "bind",
	ActionUnbind:  "unbind",
}

// String returns the kernel's name of a: "add", "remove", and so on, and
// "unknown" for ActionUnknown and any value out of range.
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return actionNames[ActionUnknown]
}

// ParseAction returns the Action named s, or ActionUnknown when s is not one
// of the kernel's action names. It is case-sensitive, as the kernel is.
func ParseAction(s string) Action {
	switch s {
	case "add":
		return ActionAdd
	case "remove":
		return ActionRemove
	case "change":
		return ActionChange
	case "move":
		return ActionMove
	case "online":
		return ActionOnline
	case "offline":
		return ActionOffline
	case "bind":
		return ActionBind
	case "unbind":
		return ActionUnbind
	}
	return ActionUnknown
}

// An Event is one kernel uevent.
//
// Action, DevPath, Subsystem and Seqnum are taken from the message's
// ACTION, DEVPATH, SUBSYSTEM and SEQNUM entries, which stay in Env as well.
// An Event is a value: nothing in this package changes it after it has been
// returned, so it may be shared between goroutines that only read it.
type Event struct {
	Action    Action            // ACTION; ActionUnknown for a name this package does not know
	DevPath   string            // DEVPATH, relative to /sys, e.g. /devices/system/cpu/cpu1
	Subsystem string            // SUBSYSTEM, e.g. cpu
	Seqnum    uint64            // SEQNUM, the kernel's uevent sequence number; 0 if absent
	Env       map[string]string // every KEY=VALUE entry; values may contain '='
	Received  time.Time         // when the Listener read the message (monotonic); zero from Parse
}

// ErrUdev is returned by Parse for a message of systemd-udevd's monitor
// protocol (it starts with "libudev\0"), which is not a kernel uevent.
var ErrUdev = errors.New("uevent: udev monitor message, not a kernel uevent")

// ErrMalformed is matched (errors.Is) by every *ParseError.
var ErrMalformed = errors.New("uevent: malformed message")

// A ParseError says why a message is not a well-formed kernel uevent.
// errors.Is(err, ErrMalformed) is true for it.
type ParseError struct {
	Offset int    // byte offset of the problem in the message; its length for a missing entry
	Reason string // what is wrong
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("uevent: malformed message at byte %d: %s", e.Offset, e.Reason)
}

// Unwrap returns ErrMalformed.
func (e *ParseError) Unwrap() error { return ErrMalformed }

// udevMagic starts every message of udev's monitor protocol.
const udevMagic = "libudev\x00"

// isUdev reports whether b is a udev monitor message.
func isUdev(b []byte) bool {
	return len(b) >= len(udevMagic) && string(b[:len(udevMagic)]) == udevMagic
}

// envSizeHint caps the map size Parse reserves up front, so that a message
// made of many empty entries cannot make it reserve a huge map. Kernel
// uevents carry about ten entries (at most 64).
const envSizeHint = 32

// Parse parses one kernel uevent in the kernel's wire format,
//
//	ACTION@DEVPATH\0KEY=VALUE\0KEY=VALUE\0...
//
// Parse is a pure function; it does not keep b. It accepts what the kernel
// sends and refuses what the kernel never sends:
//
//   - A message starting with "libudev\0" is refused with ErrUdev.
//   - The header must be ACTION@DEVPATH, split at its first '@' (DEVPATH
//     itself may contain '@', e.g. /devices/platform/soc@0), with a
//     non-empty ACTION and a DEVPATH that starts with '/'.
//   - Every other non-empty entry must be KEY=VALUE with a non-empty KEY;
//     the first '=' ends the key and VALUE is the rest, '=' included. Empty
//     entries (double or trailing NULs) are skipped, and the last entry may
//     lack its NUL. A key that appears twice keeps its last value, as udev
//     does. Bytes are kept as they are: nothing needs to be UTF-8.
//   - ACTION, DEVPATH and a non-empty SUBSYSTEM entry must be present, and
//     ACTION and DEVPATH must equal the header's. The kernel writes both
//     from the same strings, so a disagreement means the message was not
//     written by the kernel, and it is refused rather than guessed at.
//   - SEQNUM is optional (Seqnum is then 0) but, when present, must be a
//     decimal uint64.
//
// An action name this package does not know is not an error: Action is then
// ActionUnknown and Env["ACTION"] holds the name. Every other failure is a
// *ParseError, matched by errors.Is(err, ErrMalformed).
//
// The strings of the returned Event share one copy of b.
func Parse(b []byte) (Event, error) {
	if len(b) == 0 {
		return Event{}, &ParseError{Offset: 0, Reason: "empty message"}
	}
	if isUdev(b) {
		return Event{}, ErrUdev
	}

	s := string(b) // the one copy every string of the Event points into
	header, rest, _ := strings.Cut(s, "\x00")
	at := strings.IndexByte(header, '@')
	switch {
	case at < 0:
		return Event{}, &ParseError{Offset: 0, Reason: fmt.Sprintf("header %s is not ACTION@DEVPATH", quote(header))}
	case at == 0:
		return Event{}, &ParseError{Offset: 0, Reason: "header has an empty ACTION"}
	case at+1 == len(header) || header[at+1] != '/':
		return Event{}, &ParseError{Offset: at + 1, Reason: fmt.Sprintf("header DEVPATH %s does not start with '/'", quote(header[at+1:]))}
	}
	hAction, hDevPath := header[:at], header[at+1:]

	env := make(map[string]string, min(strings.Count(rest, "\x00")+1, envSizeHint))
	off := len(header) + 1
	for rest != "" {
		var entry string
		entry, rest, _ = strings.Cut(rest, "\x00")
		if entry != "" {
			key, value, ok := strings.Cut(entry, "=")
			if !ok {
				return Event{}, &ParseError{Offset: off, Reason: fmt.Sprintf("entry %s is not KEY=VALUE", quote(entry))}
			}
			if key == "" {
				return Event{}, &ParseError{Offset: off, Reason: fmt.Sprintf("entry %s has an empty key", quote(entry))}
			}
			env[key] = value
		}
		off += len(entry) + 1
	}

	action, ok := env["ACTION"]
	if !ok {
		return Event{}, &ParseError{Offset: len(b), Reason: "no ACTION entry"}
	}
	if action != hAction {
		return Event{}, &ParseError{Offset: len(b), Reason: fmt.Sprintf("ACTION=%s disagrees with header action %s", quote(action), quote(hAction))}
	}
	devPath, ok := env["DEVPATH"]
	if !ok {
		return Event{}, &ParseError{Offset: len(b), Reason: "no DEVPATH entry"}
	}
	if devPath != hDevPath {
		return Event{}, &ParseError{Offset: len(b), Reason: fmt.Sprintf("DEVPATH=%s disagrees with header devpath %s", quote(devPath), quote(hDevPath))}
	}
	subsystem := env["SUBSYSTEM"]
	if subsystem == "" {
		return Event{}, &ParseError{Offset: len(b), Reason: "no SUBSYSTEM entry"}
	}
	var seqnum uint64
	if v, ok := env["SEQNUM"]; ok {
		if seqnum, ok = parseSeqnum(v); !ok {
			return Event{}, &ParseError{Offset: len(b), Reason: fmt.Sprintf("SEQNUM=%s is not a decimal uint64", quote(v))}
		}
	}

	return Event{
		Action:    ParseAction(action),
		DevPath:   devPath,
		Subsystem: subsystem,
		Seqnum:    seqnum,
		Env:       env,
	}, nil
}

// scan is the cheap first look the Listener takes at every message: it finds
// the SUBSYSTEM and SEQNUM entries without allocating and without building
// anything. Like Parse, it takes the last of repeated entries. subsystem is
// nil when there is no such entry; hasSeqnum is false when the SEQNUM entry
// is missing or not a number.
func scan(b []byte) (subsystem []byte, seqnum uint64, hasSeqnum bool) {
	const (
		subsystemKey = "SUBSYSTEM="
		seqnumKey    = "SEQNUM="
	)
	// Skip the header; entries start after it.
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return nil, 0, false
	}
	for p := b[i+1:]; len(p) > 0; {
		entry := p
		if j := bytes.IndexByte(p, 0); j >= 0 {
			entry, p = p[:j], p[j+1:]
		} else {
			p = nil
		}
		switch {
		case len(entry) >= len(subsystemKey) && string(entry[:len(subsystemKey)]) == subsystemKey:
			subsystem = entry[len(subsystemKey):]
		case len(entry) >= len(seqnumKey) && string(entry[:len(seqnumKey)]) == seqnumKey:
			seqnum, hasSeqnum = parseSeqnum(entry[len(seqnumKey):])
		}
	}
	return subsystem, seqnum, hasSeqnum
}

// parseSeqnum parses a SEQNUM value: 1 to 20 decimal digits that fit a
// uint64, nothing else (no sign, no spaces). The kernel prints it with %llu.
func parseSeqnum[T string | []byte](s T) (uint64, bool) {
	if len(s) == 0 || len(s) > 20 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false // overflow
		}
		n = n*10 + d
	}
	return n, true
}

// quote quotes s for an error message, cut short so that a huge value
// cannot make a huge error.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
