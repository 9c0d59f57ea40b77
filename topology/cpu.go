package topology

import (
	"fmt"
)

// CPUs are the machine's logical CPUs as the kernel lists them in
// /sys/devices/system/cpu.
type CPUs struct {
	// Online is cpu/online: the CPUs that run tasks.
	Online CPUSet `json:"online"`
	// Offline is cpu/offline: possible CPUs that are not online (hot-
	// unplugged, offlined by hand, or not yet hot-added).
	Offline CPUSet `json:"offline"`
	// Present is cpu/present: the CPUs the platform has plugged in.
	Present CPUSet `json:"present"`
	// Possible is cpu/possible: every CPU id this boot can ever have.
	Possible CPUSet `json:"possible"`
	// Devices are the ids that have a cpuN directory: the CPU devices the
	// kernel registered (present CPUs on x86, possible ones on arm64 and
	// powerpc). cAdvisor counts these when there are no NUMA node
	// directories, so Capacity needs them.
	Devices CPUSet `json:"devices"`
}

// CPU is one online logical CPU of a NUMA node, with the ids the kernel
// gives in cpuN/topology. A core is the CPUs that share all of its ids
// but ID, as cAdvisor groups them for the kubelet: on POWER eight of them
// (SMT8), whose core_id is the hardware id of the core's first thread.
type CPU struct {
	ID       int `json:"id"`
	CoreID   int `json:"coreId"`   // topology/core_id
	SocketID int `json:"socketId"` // topology/physical_package_id; -1 where the platform names no package (a POWER LPAR without ibm,chip-id)
	// BookID and DrawerID are topology/book_id and drawer_id, the two
	// levels above the socket that only s390 has. They are read only on
	// s390x, as cAdvisor reads them only there (0 elsewhere).
	BookID   int `json:"bookId,omitempty"`
	DrawerID int `json:"drawerId,omitempty"`
}

// cpuIDs lists the topology ids of c that readCPU and readNodeCPU read,
// each with its attribute: core_id and physical_package_id, and with
// books (the FS's on s390x) book_id and drawer_id.
func cpuIDs(c *CPU, books bool) []cpuID {
	ids := []cpuID{{attrCore, &c.CoreID}, {attrPackage, &c.SocketID}, {attrBook, &c.BookID}, {attrDrawer, &c.DrawerID}}
	if !books {
		return ids[:2]
	}
	return ids
}

type cpuID struct {
	attr uint8
	dst  *int
}

// readCPULists reads cpu/online, offline, present and possible; Devices
// is left nil.
func (fs FS) readCPULists(r *reader) (CPUs, error) {
	var c CPUs
	lists := [...]struct {
		name     string
		set      *CPUSet
		required bool
	}{
		{"/online", &c.Online, true},
		{"/offline", &c.Offline, false},
		{"/present", &c.Present, false},
		{"/possible", &c.Possible, false},
	}
	for _, l := range lists {
		p := r.at(fs.cpuDir, -1, l.name)
		b, ok, err := r.readFile(cwd, p)
		if err != nil {
			return CPUs{}, err
		}
		if !ok {
			if l.required {
				return CPUs{}, fmt.Errorf("read %s: required file missing", p)
			}
			continue
		}
		set, err := parseCPUList(b)
		if err != nil {
			return CPUs{}, fmt.Errorf("parse %s: %w", p, err)
		}
		*l.set = set
	}
	return c, nil
}

// readNodeCPU reads the topology ids of CPU cpu through the node
// directory (nodes is devices/system/node), the path cAdvisor reads. ok is
// false when one of the files is missing: an offline CPU has no topology
// directory, and cAdvisor skips such a CPU (and, built for s390x, one
// without book_id or drawer_id); and when the node does not link the CPU.
func readNodeCPU(r *reader, nodes dir, node, cpu int, books bool) (c CPU, ok bool, err error) {
	c.ID = cpu
	var ids [4]cpuID
	for _, f := range append(ids[:0], cpuIDs(&c, books)...) {
		p := r.at2("node", node, "/cpu", cpu, attrPaths[f.attr][1])
		b, found, err := r.readOptional(nodes, p)
		if err != nil || !found {
			return CPU{}, false, err
		}
		v, valid := parseInt(b)
		if !valid {
			return CPU{}, false, fmt.Errorf("parse %s: bad id %q", nodes.join(p), trimSpace(b))
		}
		*f.dst = v
	}
	return c, true, nil
}

// readCPU reads the topology ids of CPU cpu from its own directory (cpus
// is devices/system/cpu), where a node's cpuN link points: the same files
// as readNodeCPU's, a shorter walk for the kernel, and open between
// rebuilds. The caller knows that a node links the CPU.
func readCPU(r *reader, cpus dir, cpu int, books bool) (c CPU, ok bool, err error) {
	c.ID = cpu
	var ids [4]cpuID
	for _, f := range append(ids[:0], cpuIDs(&c, books)...) {
		b, found, err := r.readAttr(cpus, cpu, f.attr)
		if err != nil || !found {
			return CPU{}, false, err
		}
		v, valid := parseInt(b)
		if !valid {
			p := r.at(attrPaths[f.attr][0], cpu, attrPaths[f.attr][1])
			return CPU{}, false, fmt.Errorf("parse %s: bad id %q", cpus.join(p), trimSpace(b))
		}
		*f.dst = v
	}
	return c, true, nil
}
