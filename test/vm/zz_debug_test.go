package vm

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestZZDebug(t *testing.T) {
	k := needKernel(t)
	dir := "/tmp/nrvm-debug"
	os.RemoveAll(dir)
	os.MkdirAll(dir, 0o755)
	initrd, err := BuildInitramfs(InitramfsConfig{Kernel: k, Output: filepath.Join(dir, "initramfs.cpio")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v, err := Boot(ctx, Config{Kernel: k.Image, Initramfs: initrd, Dir: dir, Accel: os.Getenv("DBG_ACCEL"), Append: os.Getenv("DBG_APPEND")})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	t.Log("boot", v.BootTime())
	start := time.Now()
	w := v.QMP().Expect(func(ev Event) bool { t.Logf("%v EVENT %s %s", time.Since(start), ev.Name, ev.Data); return false })
	defer w.Cancel()
	p := func(cmd string) {
		s := time.Now()
		cctx, cc := context.WithTimeout(ctx, 90*time.Second); defer cc(); out, code, err := v.Exec(cctx, cmd)
		t.Logf("%v $ %s [%v]\n%s(rc=%d err=%v)", time.Since(start), cmd, time.Since(s), out, code, err)
	}
	id, err := v.HotAddCPU(ctx, 1)
	t.Log(time.Since(start), id, err)
	time.Sleep(2 * time.Second)
	p("echo 1 > /sys/devices/system/cpu/cpu1/online")
	p("true")
	id, err = v.HotAddDIMM(ctx, 256<<20, 1)
	time.Sleep(2 * time.Second)
	p("ls -d /sys/devices/system/memory/memory3*")
	p("echo online_movable > /sys/devices/system/memory/memory32/state")
	p("echo online_movable > /sys/devices/system/memory/memory33/state")
	p("cat /proc/vmstat | grep -E 'pgmigrate|compact'")
	p("time echo offline > /sys/devices/system/memory/memory32/state; grep -E 'monitor|mwait' /proc/cpuinfo | head -1 | grep -o 'monitor'; cat /sys/devices/system/cpu/cpuidle/current_driver /sys/devices/system/cpu/cpuidle/current_governor")
	p("cat /proc/vmstat | grep -E 'pgmigrate|compact'")
	p("time echo offline > /sys/devices/system/memory/memory33/state")
	p("cat /proc/vmstat | grep -E 'pgmigrate|compact'; cat /proc/interrupts | grep -E 'CPU|LOC|CAL|TLB|RES'")
	t.Log(v.TailConsole(30))
}

func TestZZDebug2(t *testing.T) {
	k := needKernel(t)
	dir := "/tmp/nrvm-debug2"
	os.RemoveAll(dir)
	os.MkdirAll(dir, 0o755)
	initrd, err := BuildInitramfs(InitramfsConfig{Kernel: k, Output: filepath.Join(dir, "initramfs.cpio")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := Config{Kernel: k.Image, Initramfs: initrd, Dir: dir, CPUs: 3, Append: os.Getenv("DBG_APPEND")}
	if m := os.Getenv("DBG_CPU"); m != "" {
		cfg.ExtraArgs = []string{"-cpu", m}
	}
	v, err := Boot(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	t.Log("boot", v.BootTime())
	p := func(cmd string) {
		s := time.Now()
		cctx, cc := context.WithTimeout(ctx, 90*time.Second)
		defer cc()
		out, code, err := v.Exec(cctx, cmd)
		t.Logf("$ %s [%v]\n%s(rc=%d err=%v)", cmd, time.Since(s), out, code, err)
	}
	p("cat /sys/devices/system/cpu/online; grep -o -w -E 'x2apic|monitor' /proc/cpuinfo | sort | uniq -c; dmesg | grep -i -E 'apic|x2apic' | head")
	for i := 0; i < 5; i++ {
		p("true")
	}
	v.HotAddDIMM(ctx, 256<<20, 1)
	time.Sleep(3 * time.Second)
	p("echo online_movable > /sys/devices/system/memory/memory32/state")
	p("time echo offline > /sys/devices/system/memory/memory32/state")
	p("cat /proc/interrupts | grep -E 'CPU|LOC|CAL|TLB|RES'")
}
