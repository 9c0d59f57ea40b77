package systemd

import (
	"testing"
	"time"
)

func TestParseJournal(t *testing.T) {
	in := `{"__REALTIME_TIMESTAMP":"1764615487631536","_PID":"385","MESSAGE":"E1201 18:59:07.631536     385 manager.go:550] \"Failed to read data from checkpoint\""}
{"__REALTIME_TIMESTAMP":"1764615487700000","MESSAGE":[104,105,255]}

{"__REALTIME_TIMESTAMP":"17646154877`
	got, err := parseJournal([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d entries, want 2 (the cut line skipped): %+v", len(got), got)
	}
	if got[0].PID != 385 || !got[0].Time.Equal(time.UnixMicro(1764615487631536)) ||
		got[0].Message != `E1201 18:59:07.631536     385 manager.go:550] "Failed to read data from checkpoint"` {
		t.Errorf("entry 0: %+v", got[0])
	}
	if got[1].PID != 0 || got[1].Message != "hi\xff" {
		t.Errorf("entry 1 (bytes message, no _PID): %+v", got[1])
	}
}

func TestCapBuffer(t *testing.T) {
	b := capBuffer{max: 4}
	for _, s := range []string{"ab", "cde", "f"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if b.String() != "abcd" {
		t.Errorf("kept %q, want abcd", b.String())
	}
}
