package uevent

import (
	"testing"
	"time"
)

// benchMsg is a real cpu offline uevent with its full MODALIAS, about 900
// bytes, as the kernel sends it.
const benchMsg = "offline@/devices/system/cpu/cpu1\x00ACTION=offline\x00DEVPATH=/devices/system/cpu/cpu1\x00SUBSYSTEM=cpu\x00" +
	"MODALIAS=cpu:type:x86,ven0002fam001Amod0002:feature:,0000,0001,0002,0003,0004,0005,0006,0007,0008,0009,000B,000D," +
	"000E,000F,0010,0011,0013,0017,0018,0019,001A,001C,0020,0021,0022,0023,0024,0025,0026,0027,0028,0029,002B,002C,002D," +
	"002E,002F,0030,0031,0034,0036,0037,0038,003D,0064,0065,0068,006E,0070,0074,0075,0076,0077,0078,0079,007A,007F,0080," +
	"0081,0089,008C,008D,0093,0094,0095,0096,0097,0098,0099,009A,009B,009C,009D,009E,009F,00C0,00C4,00C7,00C8,00D6,00EA," +
	"00EB,00ED,00F3,00FC,0105,0106,0107,0108,0109,010A,010B,010F,0110,0123,0125,0128,0129,0130,0131,0133,0135,0137,0138," +
	"013C,013D,013E,013F,0140,0141,0142,0165,016C,0184,0185,018B,01A0,01A2,01C2,0201,0206,0208,0209,020A,020B,020C,020E," +
	"021B,021C,0244,0248,0280,0281,0282,0286,0289,0294,029E,02AB,02AC\n\x00SEQNUM=823\x00"

// reportPerMsg adds ns/msg, the same figure as ns/op, under the name the
// detection-latency budget uses.
func reportPerMsg(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/msg")
}

func BenchmarkParse(b *testing.B) {
	for _, bm := range []struct {
		name string
		msg  []byte
	}{
		{"cpu_offline", []byte(benchMsg)},
		{"memory_online", []byte(msgMemoryOnline)},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.SetBytes(int64(len(bm.msg)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(bm.msg); err != nil {
					b.Fatal(err)
				}
			}
			reportPerMsg(b)
		})
	}
}

// BenchmarkListener measures what a Listener does with one datagram once it
// is read: the delivered path (scan, seqnum check, Parse) and the filtered
// path (scan and seqnum check only) of a subsystem nobody asked for.
func BenchmarkListener(b *testing.B) {
	for _, bm := range []struct {
		name    string
		msg     []byte
		deliver bool
	}{
		{"delivered_cpu", []byte(benchMsg), true},
		{"filtered_cpuid", []byte(msgCPUIDRemove), false},
	} {
		b.Run(bm.name, func(b *testing.B) {
			l := newListener(newFakeConn(), Options{})
			buf := make([]byte, receiveBufferSize)
			n := copy(buf, bm.msg)
			now := time.Now()
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				_, ok, err := l.handle(buf, n, 0, now)
				if err != nil || ok != bm.deliver {
					b.Fatalf("handle() = %v, %v; want delivered %v", ok, err, bm.deliver)
				}
			}
			reportPerMsg(b)
		})
	}
}

func TestFilteredPathDoesNotAllocate(t *testing.T) {
	l := newListener(newFakeConn(), Options{})
	buf := make([]byte, receiveBufferSize)
	n := copy(buf, msgCPUIDRemove)
	now := time.Now()
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok, err := l.handle(buf, n, 0, now); ok || err != nil {
			t.Fatalf("handle() = %v, %v; want filtered", ok, err)
		}
	})
	if allocs != 0 {
		t.Errorf("filtered path allocates %v times per message, want 0", allocs)
	}
}
