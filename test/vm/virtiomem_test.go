package vm

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeVirtioMem answers qom-set, qom-get and query-memory-devices for one
// device "vm0" whose size walks through steps, one per qom-get.
type fakeVirtioMem struct {
	mu        sync.Mutex
	requested uint64
	steps     []uint64
	gets      int
}

func (f *fakeVirtioMem) handle(t *testing.T) func(string, json.RawMessage, json.RawMessage) []string {
	return func(cmd string, id, raw json.RawMessage) []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		var args struct {
			Path     string `json:"path"`
			Property string `json:"property"`
			Value    uint64 `json:"value"`
		}
		json.Unmarshal(raw, &args)
		if strings.HasPrefix(cmd, "qom-") && args.Path != "/machine/peripheral/vm0" {
			return []string{fmt.Sprintf(`{"error": {"class": "DeviceNotFound", "desc": "Device '%s' not found"}, "id": %s}`, args.Path, id)}
		}
		switch {
		case cmd == "qom-set" && args.Property == "requested-size":
			f.requested = args.Value
			return []string{fmt.Sprintf(`{"return": {}, "id": %s}`, id)}
		case cmd == "qom-get" && args.Property == "size":
			i := min(f.gets, len(f.steps)-1)
			f.gets++
			return []string{fmt.Sprintf(`{"return": %d, "id": %s}`, f.steps[i], id)}
		case cmd == "query-memory-devices":
			return []string{fmt.Sprintf(`{"return": [
				{"type": "dimm", "data": {"slot": 0, "node": 1, "addr": 4294967296, "memdev": "/objects/d-mem", "id": "d", "hotpluggable": true, "hotplugged": true, "size": 268435456}},
				{"type": "virtio-mem", "data": {"memdev": "/objects/vm0-mem", "memaddr": 5368709120, "block-size": 2097152, "size": %d, "node": 0, "max-size": 1073741824, "requested-size": %d, "id": "vm0"}}
			], "id": %s}`, f.steps[min(f.gets, len(f.steps)-1)], f.requested, id)}
		}
		t.Errorf("unexpected %s %s", cmd, raw)
		return []string{fmt.Sprintf(`{"error": {"class": "GenericError", "desc": "unexpected"}, "id": %s}`, id)}
	}
}

func TestVirtioMemQMP(t *testing.T) {
	f := &fakeVirtioMem{steps: []uint64{0, 0, 128 << 20, 128 << 20, 384 << 20, 512 << 20}}
	q, _ := startFakeQMP(t, f.handle(t))
	v := &VM{qmp: q}
	ctx := testCtx(t)

	if err := v.SetVirtioMemRequested(ctx, "vm0", 512<<20); err != nil {
		t.Fatal(err)
	}
	if f.requested != 512<<20 {
		t.Errorf("requested-size %d, want 512 MiB", f.requested)
	}
	took, seen, err := v.WaitVirtioMemSize(ctx, "vm0", 512<<20, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatSizes(seen); got != "[0 128Mi 384Mi 512Mi]" {
		t.Errorf("sizes seen %s", got)
	}
	if took < 5*VirtioMemPollInterval || took > 3*time.Second {
		t.Errorf("took %v for six polls", took)
	}
	size, err := v.VirtioMemSize(ctx, "vm0")
	if err != nil || size != 512<<20 {
		t.Errorf("VirtioMemSize = %d, %v", size, err)
	}

	info, err := v.VirtioMemInfo(ctx, "vm0")
	if err != nil {
		t.Fatal(err)
	}
	if info.MemAddr != 5<<30 || info.BlockSize != 2<<20 || info.MaxSize != 1<<30 || info.RequestedSize != 512<<20 ||
		info.Size != 512<<20 || info.Memdev != "/objects/vm0-mem" || info.FirstBlock(MemoryBlockSize) != 40 {
		t.Errorf("info %+v", info)
	}
	if _, err := v.VirtioMemInfo(ctx, "d"); err == nil {
		t.Error("a DIMM passed for a virtio-mem device")
	}

	// A size never reached: the error says what was seen.
	_, seen, err = v.WaitVirtioMemSize(ctx, "vm0", 1<<30, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "sizes seen [512Mi]") || len(seen) != 1 {
		t.Errorf("wait for a size never reached: %v (seen %v)", err, seen)
	}
	if err := v.SetVirtioMemRequested(ctx, "nope", 0); err == nil {
		t.Error("qom-set of an unknown device succeeded")
	}
}
