package uevent

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

// encode writes ev back in the kernel's wire format: the header from
// Env["ACTION"] and Env["DEVPATH"], then every entry of Env, in key order.
func encode(ev Event) []byte {
	var b bytes.Buffer
	b.WriteString(ev.Env["ACTION"] + "@" + ev.Env["DEVPATH"] + "\x00")
	for _, k := range slices.Sorted(maps.Keys(ev.Env)) {
		b.WriteString(k + "=" + ev.Env[k] + "\x00")
	}
	return b.Bytes()
}

func FuzzParse(f *testing.F) {
	for _, seed := range [][]byte{
		[]byte(msgCPUOffline),
		[]byte(msgCPUIDRemove),
		[]byte(msgMemoryOnline),
		uev("add", "/devices/system/node/node1", "SUBSYSTEM=node", "SEQNUM=7"),
		uev("change", "/devices/x", "SUBSYSTEM=s", "ARGS=a=b==c=", "SEQNUM=1"),
		uev("bind", "/devices/platform/soc@0/usb", "SUBSYSTEM=platform"),
		uev("add", "/devices/x", "SUBSYSTEM=a", "SUBSYSTEM=b", "SEQNUM=1", "SEQNUM=2"),
		uev("add", "/devices/\xff", "SUBSYSTEM=\x80"),
		[]byte("add@/devices/x\x00\x00ACTION=add\x00DEVPATH=/devices/x\x00SUBSYSTEM=s\x00\x00"),
		[]byte("add@/devices/x\x00ACTION=remove\x00DEVPATH=/devices/x\x00SUBSYSTEM=s\x00"),
		[]byte("libudev\x00\xfe\xed\xca\xfe"),
		[]byte("@"),
		{},
	} {
		f.Add(seed)
	}

	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		ev, err := Parse(in)
		if !bytes.Equal(in, orig) {
			t.Fatal("Parse changed its input")
		}

		// scan, the Listener's shortcut, must agree with Parse whenever
		// Parse succeeds.
		sub, seq, hasSeq := scan(in)

		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUdev) {
				t.Fatalf("Parse error %v is neither ErrMalformed nor ErrUdev", err)
			}
			var pe *ParseError
			if errors.As(err, &pe) && (pe.Offset < 0 || pe.Offset > len(in)) {
				t.Fatalf("ParseError.Offset %d outside a %d-byte message", pe.Offset, len(in))
			}
			return
		}

		if ev.Env["DEVPATH"] != ev.DevPath || ev.Env["SUBSYSTEM"] != ev.Subsystem {
			t.Fatalf("DevPath %q / Subsystem %q differ from Env %q", ev.DevPath, ev.Subsystem, ev.Env)
		}
		if ev.Action != ParseAction(ev.Env["ACTION"]) {
			t.Fatalf("Action %v differs from Env ACTION %q", ev.Action, ev.Env["ACTION"])
		}
		if ev.Action != ActionUnknown && ev.Action.String() != ev.Env["ACTION"] {
			t.Fatalf("Action %v does not print as Env ACTION %q", ev.Action, ev.Env["ACTION"])
		}
		if ev.Subsystem == "" || !strings.HasPrefix(ev.DevPath, "/") || ev.Env["ACTION"] == "" {
			t.Fatalf("accepted an event without subsystem, absolute devpath or action: %+v", ev)
		}
		if s, ok := ev.Env["SEQNUM"]; ok != hasSeq || (ok && seq != ev.Seqnum) || (!ok && ev.Seqnum != 0) {
			t.Fatalf("Seqnum %d (Env %q present %v) but scan found %d, %v", ev.Seqnum, s, ok, seq, hasSeq)
		}
		if string(sub) != ev.Subsystem {
			t.Fatalf("scan found subsystem %q, Parse %q", sub, ev.Subsystem)
		}
		if !ev.Received.IsZero() {
			t.Fatal("Parse set Received")
		}

		// Round trip: what Parse read, written back, parses to the same
		// event.
		again, err := Parse(encode(ev))
		if err != nil {
			t.Fatalf("Parse(encode(ev)) error = %v\nencoded %q", err, encode(ev))
		}
		if again.Action != ev.Action || again.DevPath != ev.DevPath || again.Subsystem != ev.Subsystem ||
			again.Seqnum != ev.Seqnum || !maps.Equal(again.Env, ev.Env) {
			t.Fatalf("round trip changed the event:\n got %+v\nwant %+v", again, ev)
		}
	})
}
