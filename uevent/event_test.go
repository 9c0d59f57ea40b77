package uevent

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Messages as the kernel sent them on a 2-CPU x86 VM (kernel 6.18) for
// `echo 0 > /sys/devices/system/cpu/cpu1/online`; the MODALIAS of the cpu
// message is shortened.
const (
	msgCPUOffline = "offline@/devices/system/cpu/cpu1\x00" +
		"ACTION=offline\x00DEVPATH=/devices/system/cpu/cpu1\x00SUBSYSTEM=cpu\x00" +
		"MODALIAS=cpu:type:x86,ven0002fam001Amod0002:feature:,0000,0001,0002,0003,0004,0005,0006,0007\n\x00" +
		"SEQNUM=823\x00"
	msgCPUIDRemove = "remove@/devices/virtual/cpuid/cpu1\x00" +
		"ACTION=remove\x00DEVPATH=/devices/virtual/cpuid/cpu1\x00SUBSYSTEM=cpuid\x00" +
		"MAJOR=203\x00MINOR=1\x00DEVNAME=cpu/1/cpuid\x00SEQNUM=822\x00"
	msgMemoryOnline = "online@/devices/system/memory/memory42\x00" +
		"ACTION=online\x00DEVPATH=/devices/system/memory/memory42\x00SUBSYSTEM=memory\x00SEQNUM=5001\x00"
)

// uev builds a kernel-format message: the header from action and devpath,
// then ACTION, DEVPATH, the given entries, each NUL-terminated.
func uev(action, devpath string, entries ...string) []byte {
	var b strings.Builder
	b.WriteString(action + "@" + devpath + "\x00")
	b.WriteString("ACTION=" + action + "\x00")
	b.WriteString("DEVPATH=" + devpath + "\x00")
	for _, e := range entries {
		b.WriteString(e + "\x00")
	}
	return []byte(b.String())
}

func TestParse(t *testing.T) {
	hugeValue := strings.Repeat("x", 1<<20)
	var hugeEntries []string
	for i := range 10000 {
		hugeEntries = append(hugeEntries, "K"+strconv.Itoa(i)+"=v"+strconv.Itoa(i))
	}

	tests := []struct {
		name string
		in   []byte
		want Event  // when err is nil; Env is checked through env and kv
		env  int    // expected len(Env), checked when > 0
		kv   string // one "KEY=VALUE" that must be in Env, checked when set
		err  error  // errors.Is target; nil means success
	}{
		{
			name: "kernel cpu offline",
			in:   []byte(msgCPUOffline),
			want: Event{Action: ActionOffline, DevPath: "/devices/system/cpu/cpu1", Subsystem: "cpu", Seqnum: 823},
			env:  5,
			kv:   "MODALIAS=cpu:type:x86,ven0002fam001Amod0002:feature:,0000,0001,0002,0003,0004,0005,0006,0007\n",
		},
		{
			name: "kernel cpuid remove",
			in:   []byte(msgCPUIDRemove),
			want: Event{Action: ActionRemove, DevPath: "/devices/virtual/cpuid/cpu1", Subsystem: "cpuid", Seqnum: 822},
			env:  7,
			kv:   "DEVNAME=cpu/1/cpuid",
		},
		{
			name: "memory block online",
			in:   []byte(msgMemoryOnline),
			want: Event{Action: ActionOnline, DevPath: "/devices/system/memory/memory42", Subsystem: "memory", Seqnum: 5001},
			env:  4,
		},
		{
			name: "node add",
			in:   uev("add", "/devices/system/node/node1", "SUBSYSTEM=node", "SEQNUM=7"),
			want: Event{Action: ActionAdd, DevPath: "/devices/system/node/node1", Subsystem: "node", Seqnum: 7},
		},
		{
			name: "values containing '='",
			in:   uev("change", "/devices/x", "SUBSYSTEM=s", "ARGS=a=b==c=", "EMPTY=", "SEQNUM=1"),
			want: Event{Action: ActionChange, DevPath: "/devices/x", Subsystem: "s", Seqnum: 1},
			kv:   "ARGS=a=b==c=",
		},
		{
			name: "empty value kept",
			in:   uev("change", "/devices/x", "SUBSYSTEM=s", "EMPTY="),
			want: Event{Action: ActionChange, DevPath: "/devices/x", Subsystem: "s"},
			kv:   "EMPTY=",
		},
		{
			name: "devpath containing '@'",
			in:   uev("bind", "/devices/platform/soc@0/3f000000.usb", "SUBSYSTEM=platform", "DRIVER=dwc2"),
			want: Event{Action: ActionBind, DevPath: "/devices/platform/soc@0/3f000000.usb", Subsystem: "platform"},
		},
		{
			name: "every action",
			in:   uev("unbind", "/devices/x", "SUBSYSTEM=s"),
			want: Event{Action: ActionUnbind, DevPath: "/devices/x", Subsystem: "s"},
		},
		{
			name: "move keeps DEVPATH_OLD",
			in:   uev("move", "/devices/new", "SUBSYSTEM=net", "DEVPATH_OLD=/devices/old"),
			want: Event{Action: ActionMove, DevPath: "/devices/new", Subsystem: "net"},
			kv:   "DEVPATH_OLD=/devices/old",
		},
		{
			name: "unknown action is not an error",
			in:   uev("explode", "/devices/x", "SUBSYSTEM=s"),
			want: Event{Action: ActionUnknown, DevPath: "/devices/x", Subsystem: "s"},
			kv:   "ACTION=explode",
		},
		{
			name: "no SEQNUM",
			in:   uev("add", "/devices/x", "SUBSYSTEM=s"),
			want: Event{Action: ActionAdd, DevPath: "/devices/x", Subsystem: "s"},
			env:  3,
		},
		{
			name: "largest SEQNUM",
			in:   uev("add", "/devices/x", "SUBSYSTEM=s", "SEQNUM=18446744073709551615"),
			want: Event{Action: ActionAdd, DevPath: "/devices/x", Subsystem: "s", Seqnum: 1<<64 - 1},
		},
		{
			name: "repeated key keeps the last value",
			in:   uev("add", "/devices/x", "SUBSYSTEM=a", "SUBSYSTEM=b", "SEQNUM=1", "SEQNUM=2"),
			want: Event{Action: ActionAdd, DevPath: "/devices/x", Subsystem: "b", Seqnum: 2},
		},
		{
			name: "double and trailing NULs",
			in:   []byte("add@/devices/x\x00\x00ACTION=add\x00\x00\x00DEVPATH=/devices/x\x00SUBSYSTEM=s\x00\x00\x00\x00"),
			want: Event{Action: ActionAdd, DevPath: "/devices/x", Subsystem: "s"},
			env:  3,
		},
		{
			name: "no trailing NUL",
			in:   []byte("add@/devices/x\x00ACTION=add\x00DEVPATH=/devices/x\x00SUBSYSTEM=s"),
			want: Event{Action: ActionAdd, DevPath: "/devices/x", Subsystem: "s"},
			env:  3,
		},
		{
			name: "non-UTF-8 bytes kept as they are",
			in:   uev("add", "/devices/\xff\xfe", "SUBSYSTEM=s\x80", "NAME=\xc3\x28"),
			want: Event{Action: ActionAdd, DevPath: "/devices/\xff\xfe", Subsystem: "s\x80"},
			kv:   "NAME=\xc3\x28",
		},
		{
			name: "huge value",
			in:   uev("change", "/devices/x", "SUBSYSTEM=s", "BIG="+hugeValue, "SEQNUM=9"),
			want: Event{Action: ActionChange, DevPath: "/devices/x", Subsystem: "s", Seqnum: 9},
			kv:   "BIG=" + hugeValue,
		},
		{
			name: "huge number of entries",
			in:   uev("change", "/devices/x", append([]string{"SUBSYSTEM=s"}, hugeEntries...)...),
			want: Event{Action: ActionChange, DevPath: "/devices/x", Subsystem: "s"},
			env:  3 + len(hugeEntries),
			kv:   "K9999=v9999",
		},

		// Refused.
		{name: "empty", in: nil, err: ErrMalformed},
		{name: "only NULs", in: []byte("\x00\x00\x00"), err: ErrMalformed},
		{name: "no '@' in header", in: []byte("add/devices/x\x00ACTION=add\x00DEVPATH=/devices/x\x00SUBSYSTEM=s\x00"), err: ErrMalformed},
		{name: "empty header action", in: []byte("@/devices/x\x00ACTION=\x00DEVPATH=/devices/x\x00SUBSYSTEM=s\x00"), err: ErrMalformed},
		{name: "header devpath not absolute", in: uev("add", "devices/x", "SUBSYSTEM=s"), err: ErrMalformed},
		{name: "header devpath empty", in: uev("add", "", "SUBSYSTEM=s"), err: ErrMalformed},
		{name: "missing SUBSYSTEM", in: uev("add", "/devices/x", "SEQNUM=1"), err: ErrMalformed},
		{name: "empty SUBSYSTEM", in: uev("add", "/devices/x", "SUBSYSTEM="), err: ErrMalformed},
		{name: "missing ACTION", in: []byte("add@/devices/x\x00DEVPATH=/devices/x\x00SUBSYSTEM=s\x00"), err: ErrMalformed},
		{name: "missing DEVPATH", in: []byte("add@/devices/x\x00ACTION=add\x00SUBSYSTEM=s\x00"), err: ErrMalformed},
		{name: "ACTION disagrees with header", in: []byte("add@/devices/x\x00ACTION=remove\x00DEVPATH=/devices/x\x00SUBSYSTEM=s\x00"), err: ErrMalformed},
		{name: "DEVPATH disagrees with header", in: []byte("add@/devices/x\x00ACTION=add\x00DEVPATH=/devices/y\x00SUBSYSTEM=s\x00"), err: ErrMalformed},
		{name: "entry without '='", in: uev("add", "/devices/x", "SUBSYSTEM=s", "JUNK"), err: ErrMalformed},
		{name: "entry with empty key", in: uev("add", "/devices/x", "SUBSYSTEM=s", "=v"), err: ErrMalformed},
		{name: "SEQNUM not a number", in: uev("add", "/devices/x", "SUBSYSTEM=s", "SEQNUM=12a"), err: ErrMalformed},
		{name: "SEQNUM signed", in: uev("add", "/devices/x", "SUBSYSTEM=s", "SEQNUM=+12"), err: ErrMalformed},
		{name: "SEQNUM empty", in: uev("add", "/devices/x", "SUBSYSTEM=s", "SEQNUM="), err: ErrMalformed},
		{name: "SEQNUM overflows", in: uev("add", "/devices/x", "SUBSYSTEM=s", "SEQNUM=18446744073709551616"), err: ErrMalformed},
		{name: "udev monitor message", in: []byte("libudev\x00\xfe\xed\xca\xfe\x28\x00\x00\x00ACTION=add\x00SUBSYSTEM=cpu\x00"), err: ErrUdev},
		{name: "bare udev magic", in: []byte("libudev\x00"), err: ErrUdev},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Parse() error = %v, want errors.Is(err, %v)", err, tt.err)
				}
				if errors.Is(tt.err, ErrMalformed) {
					var pe *ParseError
					if !errors.As(err, &pe) {
						t.Fatalf("Parse() error %T is not a *ParseError", err)
					}
					if pe.Offset < 0 || pe.Offset > len(tt.in) {
						t.Errorf("ParseError.Offset = %d, outside the message of %d bytes", pe.Offset, len(tt.in))
					}
					if len(err.Error()) > 512 {
						t.Errorf("error message is %d bytes long", len(err.Error()))
					}
				}
				if got.Env != nil || got.DevPath != "" {
					t.Errorf("Parse() returned a partial event %+v with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse() error = %v", err)
			}
			env := got.Env
			got.Env = nil
			if got.Action != tt.want.Action || got.DevPath != tt.want.DevPath || got.Subsystem != tt.want.Subsystem ||
				got.Seqnum != tt.want.Seqnum || !got.Received.IsZero() {
				t.Errorf("Parse() = %+v, want %+v", got, tt.want)
			}
			if env["ACTION"] == "" || env["DEVPATH"] != tt.want.DevPath || env["SUBSYSTEM"] != tt.want.Subsystem {
				t.Errorf("Env lacks ACTION/DEVPATH/SUBSYSTEM: %q", env)
			}
			if tt.env > 0 && len(env) != tt.env {
				t.Errorf("len(Env) = %d, want %d; keys %q", len(env), tt.env, slices.Sorted(maps.Keys(env)))
			}
			if tt.kv != "" {
				k, v, _ := strings.Cut(tt.kv, "=")
				if got, ok := env[k]; !ok || got != v {
					t.Errorf("Env[%q] = %.80q (present %v), want %.80q", k, got, ok, v)
				}
			}
		})
	}
}

func TestParseDoesNotKeepInput(t *testing.T) {
	b := []byte(msgCPUOffline)
	ev, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'X'
	}
	if ev.DevPath != "/devices/system/cpu/cpu1" || ev.Env["SUBSYSTEM"] != "cpu" {
		t.Fatalf("event changed with its input buffer: %+v", ev)
	}
}

func TestAction(t *testing.T) {
	names := []string{"unknown", "add", "remove", "change", "move", "online", "offline", "bind", "unbind"}
	for i, name := range names {
		a := Action(i)
		if a.String() != name {
			t.Errorf("Action(%d).String() = %q, want %q", i, a.String(), name)
		}
		if got := ParseAction(name); got != a {
			t.Errorf("ParseAction(%q) = %v, want %v", name, got, a)
		}
	}
	if ActionUnbind != Action(len(names)-1) {
		t.Errorf("ActionUnbind = %d, want %d", ActionUnbind, len(names)-1)
	}
	for _, s := range []string{"", "ADD", "Add", "add ", "explode"} {
		if got := ParseAction(s); got != ActionUnknown {
			t.Errorf("ParseAction(%q) = %v, want ActionUnknown", s, got)
		}
	}
	if got := Action(200).String(); got != "unknown" {
		t.Errorf("Action(200).String() = %q, want unknown", got)
	}
}

func TestScanAgreesWithParse(t *testing.T) {
	for _, in := range [][]byte{
		[]byte(msgCPUOffline),
		[]byte(msgCPUIDRemove),
		[]byte(msgMemoryOnline),
		uev("add", "/devices/x", "SUBSYSTEM=a", "SUBSYSTEM=b", "SEQNUM=1", "SEQNUM=2"),
		uev("add", "/devices/x", "SUBSYSTEM=s"),
	} {
		ev, err := Parse(in)
		if err != nil {
			t.Fatalf("Parse(%q) error = %v", in, err)
		}
		sub, seq, hasSeq := scan(in)
		_, wantHasSeq := ev.Env["SEQNUM"]
		if string(sub) != ev.Subsystem || seq != ev.Seqnum || hasSeq != wantHasSeq {
			t.Errorf("scan(%q) = %q, %d, %v; Parse says %q, %d, %v", in, sub, seq, hasSeq, ev.Subsystem, ev.Seqnum, wantHasSeq)
		}
	}
	if sub, _, hasSeq := scan([]byte("add@/devices/x")); sub != nil || hasSeq {
		t.Errorf("scan of a bare header found %q, %v", sub, hasSeq)
	}
}

func TestScanDoesNotAllocate(t *testing.T) {
	in := []byte(msgCPUIDRemove)
	allocs := testing.AllocsPerRun(100, func() { scan(in) })
	if allocs != 0 {
		t.Errorf("scan allocates %v times per message, want 0", allocs)
	}
}
