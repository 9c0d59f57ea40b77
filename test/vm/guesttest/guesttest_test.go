package guesttest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/node-resized/node-resized/monitor"
)

func TestSetupScript(t *testing.T) {
	plain := Setup{Name: "suite"}.Script()
	full := Setup{Name: "suite", Prepare: "mount -t 9p x /x || fail \"mount\"\n", QoS: true}.Script()
	for _, s := range []string{plain, full} {
		for _, want := range []string{
			`fail() { echo "suite setup: $*" >&2; exit 1; }`,
			"setsid " + DaemonBin + " --standalone --socket " + Socket + " ",
			" --auto-online --cgroup-root " + CgroupRoot + " >" + LogFile + " 2>&1 </dev/null &",
			"echo $! >" + PIDFile,
			"$((memkb * 1024 - 100663296))",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("the script lacks %q:\n%s", want, s)
			}
		}
		if sh, err := exec.LookPath("sh"); err == nil {
			if out, err := exec.Command(sh, "-n", "-c", s).CombinedOutput(); err != nil {
				t.Errorf("sh -n: %v\n%s\n%s", err, out, s)
			}
		}
	}
	for _, qos := range []string{"$kp/$q/cgroup.subtree_control", "echo 1 >$kp/besteffort/cpu.weight", "echo 1 >$kp/burstable/cpu.weight"} {
		if strings.Contains(plain, qos) || !strings.Contains(full, qos) {
			t.Errorf("%q: want it with QoS only", qos)
		}
	}
	if strings.Contains(plain, "9p") || !strings.Contains(full, "#!/bin/sh\n") ||
		strings.Index(full, "mount -t 9p") > strings.Index(full, "cgroup.subtree_control") {
		t.Errorf("Prepare: want it first, and only when given:\n%s", full)
	}
}

func TestKubeletWeight(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{{0, 1}, {1, 39}, {2, 79}, {4, 157}, {256, 10000}, {1000, 10000}} {
		if got := KubeletWeight(c.n); got != c.want {
			t.Errorf("KubeletWeight(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

func TestWantMemoryMax(t *testing.T) {
	if got, want := WantMemoryMax(512<<20), "436207616"; got != want {
		t.Errorf("WantMemoryMax(512 MiB) = %s, want %s", got, want)
	}
}

func TestParseMemTotal(t *testing.T) {
	if got := ParseMemTotal(t, "MemTotal:         483412 kB"); got != 483412<<10 {
		t.Errorf("ParseMemTotal = %d", got)
	}
}

func TestParseKubepods(t *testing.T) {
	k := parseKubepods(t, "memory.max=436207616\ncpu.weight=39\ncpuset.cpus=0", false)
	if got, want := k.String(), `memory.max=436207616 cpu.weight=39 cpuset.cpus="0"`; got != want {
		t.Errorf("kubepods %s, want %s", got, want)
	}
	out := "memory.max=max\ncpu.weight=79\ncpuset.cpus=0-1\ncpuset.cpus.effective=0-1\npids.max=4194304\n" +
		"low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\noom_group_kill 0"
	k = parseKubepods(t, out, true)
	want := `memory.max=max cpu.weight=79 cpuset.cpus="0-1" cpuset.cpus.effective="0-1" pids.max=4194304 ` +
		`memory.events{low 0, high 0, max 0, oom 1, oom_kill 1, oom_group_kill 0}`
	if got := k.String(); got != want {
		t.Errorf("kubepods %s\n want %s", got, want)
	}
	if k.OOMKills != 1 || k.CPUWeight != 79 || !k.CPUsEff.Contains(1) {
		t.Errorf("kubepods %+v", k)
	}
	for _, detail := range []bool{false, true} {
		cmd := kubepodsCommand(detail)
		if !strings.HasPrefix(cmd, "cd "+KubepodsDir+" && ") || strings.Contains(cmd, "memory.events") != detail {
			t.Errorf("kubepodsCommand(%v) = %q", detail, cmd)
		}
	}
}

func TestChangesSince(t *testing.T) {
	all := []monitor.Change{{ID: 3}, {ID: 4}, {ID: 5}}
	var ids []uint64
	for _, c := range ChangesSince(all, 3) {
		ids = append(ids, c.ID)
	}
	if !slices.Equal(ids, []uint64{4, 5}) {
		t.Errorf("ChangesSince(3) = %v, want [4 5]", ids)
	}
}

func TestSteps(t *testing.T) {
	steps := NewSteps(t, time.Now(), 8)
	var ran []string
	for _, name := range []string{"one", "two"} {
		steps.Run(name, func(t *testing.T) { ran = append(ran, t.Name()) })
	}
	if !slices.Equal(ran, []string{"TestSteps/one", "TestSteps/two"}) || steps.Unselected() != "" || len(steps.timings) != 2 {
		t.Errorf("ran %v, unselected %q, timings %q", ran, steps.Unselected(), steps.timings)
	}
	if !strings.HasPrefix(steps.timings[0], "  one      ") {
		t.Errorf("timing %q: want the name in a column of 8", steps.timings[0])
	}
}

func TestMiB(t *testing.T) {
	if got := MiB(384 << 20); got != "384.0MiB" {
		t.Errorf("MiB = %s", got)
	}
}
