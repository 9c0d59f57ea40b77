package lifecycle

import (
	"slices"
	"strings"

	"github.com/node-resized/node-resized/systemd"
)

// manager names one of the kubelet's checkpointed resource managers.
type manager string

const (
	cpuManager    manager = "CPU manager"
	memoryManager manager = "memory manager"
)

// startVerdict is what a kubelet start after a checkpoint rewrite came to,
// as far as its unit and its journal tell.
type startVerdict struct {
	// up: the running kubelet started its container manager (the CPU and
	// memory managers, which load their checkpoints first), so it
	// accepted both checkpoints.
	up bool
	// blamed are the managers whose checkpoint a kubelet refused (in the
	// order first blamed), by a process that no longer runs; line is the
	// journal message that blamed the first of them.
	blamed []manager
	line   string
}

// startedMarker is the first line a kubelet v1.37 logs at its default
// verbosity once its container manager started (kubelet.go's
// initializeRuntimeDependentModules, then the eviction manager's Start).
const startedMarker = "Eviction manager: starting control loop"

// judgeStart decides, from the kubelet unit's state now and its journal
// since before the start (oldest first), whether the kubelet came up with
// its checkpoints, or refused one of them. It matches kubelet v1.37's own
// messages (pkg/kubelet/cm and its cpumanager and memorymanager): a
// refusal is the container manager's "start cpu manager error: …" or
// "start memory manager error: …" (the managers' Start, which restores
// the checkpoint and validates it against the machine), or the managers'
// own lines before it ("could not restore state from checkpoint" naming
// the checkpoint file, the static policies' validateState errors). A
// failure to create the checkpoint directory ("failed to initialize
// checkpoint manager") is not the file's fault. A refusal blames only
// once the process that logged it no longer runs (the kubelet exits right
// after it); a kubelet that runs and got past its container manager
// clears any earlier refusal (it accepted the same files).
func judgeStart(u systemd.UnitState, entries []systemd.JournalEntry) startVerdict {
	running := u.Active() && u.SubState == "running" && u.MainPID != 0
	var v startVerdict
	for _, e := range entries {
		if running && e.PID == u.MainPID && strings.Contains(e.Message, startedMarker) {
			return startVerdict{up: true}
		}
		m := refusedBy(e.Message)
		if m == "" || (running && (e.PID == u.MainPID || e.PID == 0)) {
			continue
		}
		if !slices.Contains(v.blamed, m) {
			if len(v.blamed) == 0 {
				v.line = e.Message
			}
			v.blamed = append(v.blamed, m)
		}
	}
	return v
}

// refusedBy returns the manager whose checkpoint the kubelet's message
// says it refused, "" when it says no such thing.
func refusedBy(msg string) manager {
	if strings.Contains(msg, "failed to initialize checkpoint manager") {
		return ""
	}
	switch {
	case strings.Contains(msg, "start cpu manager error:"):
		return cpuManager
	case strings.Contains(msg, "start memory manager error:"):
		return memoryManager
	case strings.Contains(msg, "could not restore state from checkpoint"):
		switch {
		case strings.Contains(msg, "CPU manager checkpoint file"):
			return cpuManager
		case strings.Contains(msg, "memory manager checkpoint file"):
			return memoryManager
		}
	}
	for _, s := range cpuValidation {
		if strings.Contains(msg, s) {
			return cpuManager
		}
	}
	if strings.Contains(msg, "[memorymanager]") {
		for _, s := range memoryValidation {
			if strings.Contains(msg, s) {
				return memoryManager
			}
		}
	}
	return ""
}

// cpuValidation and memoryValidation are the static policies'
// validateState errors (cpumanager/policy_static.go,
// memorymanager/policy_static.go).
var (
	cpuValidation = []string{
		"doesn't match with CPUs in state",
		"default cpuset cannot be empty",
		"are present in defaultCpuSet",
		"overlaps with default cpuset",
	}
	memoryValidation = []string{
		"machine state can not be empty when it has memory assignments",
		"the expected machine state is different from the real one",
		"the memory assignment uses the NUMA that does not exist",
		"the memory assignment uses memory resource that does not exist",
	}
)
