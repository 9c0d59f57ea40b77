package vm

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestDiskArgs(t *testing.T) {
	c := Config{Kernel: "k", Initramfs: "i", Disks: []Disk{{ID: "kubelet", File: "/var/tmp/k.img"}, {ID: "d2", File: "/x/d2.img"}}}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	args := strings.Join(qemuArgs(c, "c", "q", "a"), " ")
	for _, want := range []string{
		"-blockdev driver=file,filename=/var/tmp/k.img,node-name=kubelet-file -blockdev driver=raw,file=kubelet-file,node-name=kubelet -device virtio-blk-pci,drive=kubelet,id=kubelet ",
		"-device virtio-blk-pci,drive=d2,id=d2 ",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args lack %q:\n%s", want, args)
		}
	}
	for _, bad := range [][]Disk{
		{{ID: "", File: "/f"}},
		{{ID: "a,b", File: "/f"}},
		{{ID: "a", File: ""}},
		{{ID: "a", File: "/f,g"}},
		{{ID: "a", File: "/f"}, {ID: "a", File: "/g"}},
	} {
		c := Config{Kernel: "k", Initramfs: "i", Disks: bad}
		if err := c.setDefaults(); err == nil {
			t.Errorf("disks %+v accepted", bad)
		}
	}
}

func TestBlockResize(t *testing.T) {
	var got []string
	q, _ := startFakeQMP(t, func(cmd string, id, raw json.RawMessage) []string {
		got = append(got, cmd+" "+string(raw))
		var a struct {
			Node string `json:"node-name"`
		}
		json.Unmarshal(raw, &a)
		if a.Node != "kubelet" {
			return []string{fmt.Sprintf(`{"error": {"class": "GenericError", "desc": "Cannot find device='' nor node-name='%s'"}, "id": %s}`, a.Node, id)}
		}
		return []string{fmt.Sprintf(`{"return": {}, "id": %s}`, id)}
	})
	v := &VM{qmp: q}
	ctx := testCtx(t)
	if err := v.BlockResize(ctx, "kubelet", 768<<20); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != `block_resize {"node-name":"kubelet","size":805306368}` {
		t.Errorf("sent %q", got)
	}
	if err := v.BlockResize(ctx, "nope", 1<<30); err == nil || !strings.Contains(err.Error(), "resize disk nope") {
		t.Errorf("an unknown disk: %v", err)
	}
}
