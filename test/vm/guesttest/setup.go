package guesttest

import (
	"fmt"
	"strconv"
	"strings"
)

// The daemon's files in the guest.
const (
	Socket            = "/run/nr.sock"
	LogFile           = "/run/nr.log"
	PIDFile           = "/run/nr.pid"
	KubeletConfigFile = "/etc/kubelet/config.yaml"
	StateFile         = "/var/lib/node-resized/state.json"
	CgroupRoot        = "/sys/fs/cgroup"
	KubepodsDir       = CgroupRoot + "/kubepods"
	DaemonBin         = "/bin/node-resized"
)

// The kubelet's reservations in the guest's KubeletConfiguration.
const (
	SystemReserved = 64 << 20
	KubeReserved   = 32 << 20
	Reserved       = SystemReserved + KubeReserved
)

// KubeletConfig is the guest's KubeletConfiguration, at KubeletConfigFile.
const KubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
systemReserved:
  memory: 64Mi
kubeReserved:
  memory: 32Mi
`

// DaemonArgs is the daemon's command line in the guest. --auto-online is
// on: the daemon onlines what is hot-added, or, where the guest's kernel
// onlines it itself (pseries), races the kernel to it.
var DaemonArgs = []string{
	"--standalone",
	"--socket", Socket,
	"--log-format", "json",
	"--state-file", StateFile,
	"--kubelet-config", KubeletConfigFile,
	"--kubelet-root-dir", `""`,
	"--auto-online",
	"--cgroup-root", CgroupRoot,
}

// Setup is the guest's setup script (vm.InitramfsConfig.Setup). It lays
// out the kubepods hierarchy as the kubelet does with the cgroupfs driver
// when it starts on this machine (memory.max = MemTotal - SystemReserved -
// KubeReserved, cpu.weight from the CPU count, the QoS cgroups below it),
// pins kubepods' cpuset.cpus to the online CPUs (as a node whose kubepods
// carries its own CPU list), and starts the daemon with DaemonArgs, its
// output in LogFile and its pid in PIDFile.
type Setup struct {
	// Name begins the script's messages: "Name setup: ...".
	Name string
	// Prepare is shell run first (mounting the guest's shares, say); it
	// may call fail with a message, which ends the script.
	Prepare string
	// QoS enables the controllers in the QoS cgroups and starts their
	// cpu.weight at the minimum, as the kubelet's are before any pod.
	QoS bool
}

// Script is the setup script.
func (s Setup) Script() string {
	var b strings.Builder
	b.WriteString(`#!/bin/sh
cg=` + CgroupRoot + `
kp=` + KubepodsDir + `
ctrls="+cpu +cpuset +memory +pids"
fail() { echo "` + s.Name + ` setup: $*" >&2; exit 1; }

`)
	if s.Prepare != "" {
		b.WriteString(strings.TrimRight(s.Prepare, "\n") + "\n\n")
	}
	b.WriteString(`echo "$ctrls" >$cg/cgroup.subtree_control || fail "root subtree_control"
mkdir -p $kp || fail "mkdir kubepods"
echo "$ctrls" >$kp/cgroup.subtree_control || fail "kubepods subtree_control"
for q in burstable besteffort; do
	mkdir -p $kp/$q || fail "mkdir $q"
`)
	if s.QoS {
		b.WriteString(`	echo "$ctrls" >$kp/$q/cgroup.subtree_control || fail "$q subtree_control"
`)
	}
	b.WriteString(`done

# memory.max = MemTotal - systemReserved - kubeReserved
memkb=$(sed -n 's/^MemTotal: *\([0-9]*\) kB$/\1/p' /proc/meminfo)
[ -n "$memkb" ] || fail "no MemTotal"
echo $((memkb * 1024 - ` + fmt.Sprint(Reserved) + `)) >$kp/memory.max || fail "memory.max"

# cpu.weight from the online CPU count, as the kubelet converts shares
online=$(cat /sys/devices/system/cpu/online)
ncpu=0
for part in $(echo "$online" | tr , ' '); do
	lo=${part%-*}; hi=${part#*-}
	ncpu=$((ncpu + hi - lo + 1))
done
shares=$((ncpu * 1000 * 1024 / 1000))
[ $shares -lt 2 ] && shares=2
[ $shares -gt 262144 ] && shares=262144
echo $((1 + ((shares - 2) * 9999) / 262142)) >$kp/cpu.weight || fail "cpu.weight"
`)
	if s.QoS {
		b.WriteString(`# the QoS cgroups start at the minimum: no pods yet
echo 1 >$kp/besteffort/cpu.weight || fail "besteffort cpu.weight"
echo 1 >$kp/burstable/cpu.weight || fail "burstable cpu.weight"
`)
	}
	b.WriteString(`
echo "$online" >$kp/cpuset.cpus || fail "cpuset.cpus"

mkdir -p /var/lib/node-resized
setsid ` + DaemonBin + " " + strings.Join(DaemonArgs, " ") + ` >` + LogFile + ` 2>&1 </dev/null &
echo $! >` + PIDFile + `
echo "` + s.Name + ` setup: kubepods memory.max=$(cat $kp/memory.max) cpu.weight=$(cat $kp/cpu.weight) cpuset.cpus=$(cat $kp/cpuset.cpus); daemon pid $(cat ` + PIDFile + `)"
`)
	return b.String()
}

// KubeletWeight is the cpu.weight the kubelet writes for kubepods on a
// node with n CPUs (cgroup v1 shares converted to v2 weight).
func KubeletWeight(n int64) int64 {
	shares := n * 1000 * 1024 / 1000
	shares = min(max(shares, 2), 262144)
	return 1 + ((shares-2)*9999)/262142
}

// WantMemoryMax is kubepods' memory.max for a MemTotal.
func WantMemoryMax(memTotal int64) string {
	return strconv.FormatInt(memTotal-Reserved, 10)
}
