package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// HotpluggableCPU is one entry of QMP query-hotpluggable-cpus.
type HotpluggableCPU struct {
	Type       string   `json:"type"` // device driver, e.g. "max-x86_64-cpu"
	VCPUsCount int      `json:"vcpus-count"`
	QOMPath    string   `json:"qom-path,omitempty"` // set when the slot is occupied
	Props      CPUProps `json:"props"`
}

// CPUProps locates a CPU slot; nil fields do not apply to the machine.
type CPUProps struct {
	NodeID    *int `json:"node-id,omitempty"`
	SocketID  *int `json:"socket-id,omitempty"`
	DieID     *int `json:"die-id,omitempty"`
	ClusterID *int `json:"cluster-id,omitempty"`
	CoreID    *int `json:"core-id,omitempty"`
	ThreadID  *int `json:"thread-id,omitempty"`
}

// QueryHotpluggableCPUs lists the machine's CPU slots, occupied or not.
func (v *VM) QueryHotpluggableCPUs(ctx context.Context) ([]HotpluggableCPU, error) {
	ctx, cancel := withDefaultTimeout(ctx, DefaultQMPTimeout)
	defer cancel()
	var cpus []HotpluggableCPU
	if err := v.qmp.Execute(ctx, "query-hotpluggable-cpus", nil, &cpus); err != nil {
		return nil, err
	}
	return cpus, nil
}

// ErrNoFreeSlot is returned by HotAddCPU when the node has no free CPU
// slot.
var ErrNoFreeSlot = errors.New("no free slot")

// cpuKind names HotAddCPU's devices: their ids start with cpuIDPrefix.
const (
	cpuKind     = "cpu"
	cpuIDPrefix = "nr-" + cpuKind
)

// singleThreaded says whether an -accel value is single-threaded TCG.
func singleThreaded(accel string) bool {
	name, opts, _ := strings.Cut(accel, ",")
	if name != "tcg" {
		return false
	}
	for _, o := range strings.Split(opts, ",") {
		if o == "thread=single" {
			return true
		}
	}
	return false
}

func (v *VM) newID(kind string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.nextDev++
	return fmt.Sprintf("nr-%s%d", kind, v.nextDev)
}

// HotAddCPU plugs a CPU into a free slot of NUMA node nodeID and returns
// its QEMU device id. The guest sees it in /sys/devices/system/cpu/present,
// offline until something onlines it.
func (v *VM) HotAddCPU(ctx context.Context, nodeID int) (string, error) {
	ctx, cancel := withDefaultTimeout(ctx, DefaultQMPTimeout)
	defer cancel()
	cpus, err := v.QueryHotpluggableCPUs(ctx)
	if err != nil {
		return "", fmt.Errorf("hot-add cpu on node %d: %w", nodeID, err)
	}
	slot := freeCPUSlot(cpus, nodeID)
	if slot == nil {
		return "", fmt.Errorf("hot-add cpu on node %d: %w", nodeID, ErrNoFreeSlot)
	}
	id := v.newID(cpuKind)
	args, err := cpuDeviceArgs(*slot, id)
	if err != nil {
		return "", fmt.Errorf("hot-add cpu on node %d: %w", nodeID, err)
	}
	if err := v.qmp.Execute(ctx, "device_add", args, nil); err != nil {
		return "", fmt.Errorf("hot-add cpu on node %d: %w", nodeID, err)
	}
	return id, nil
}

// freeCPUSlot picks the first unoccupied slot of a node.
func freeCPUSlot(cpus []HotpluggableCPU, nodeID int) *HotpluggableCPU {
	// QEMU lists slots highest first; take the lowest.
	for i := len(cpus) - 1; i >= 0; i-- {
		c := cpus[i]
		if c.QOMPath == "" && c.Props.NodeID != nil && *c.Props.NodeID == nodeID {
			return &cpus[i]
		}
	}
	return nil
}

// cpuDeviceArgs builds device_add's arguments for a CPU slot: the driver,
// the id and every property of the slot.
func cpuDeviceArgs(slot HotpluggableCPU, id string) (map[string]any, error) {
	b, err := json.Marshal(slot.Props)
	if err != nil {
		return nil, err
	}
	args := map[string]any{}
	if err := json.Unmarshal(b, &args); err != nil {
		return nil, err
	}
	args["driver"] = slot.Type
	args["id"] = id
	return args, nil
}

// HotAddDIMM adds a memory-backend-ram of sizeBytes and plugs a pc-dimm
// backed by it into NUMA node nodeID; it returns the DIMM's device id. The
// guest sees new memory blocks, offline until something onlines them
// (online_movable if they must be unpluggable later).
func (v *VM) HotAddDIMM(ctx context.Context, sizeBytes uint64, nodeID int) (string, error) {
	ctx, cancel := withDefaultTimeout(ctx, DefaultQMPTimeout)
	defer cancel()
	id := v.newID("dimm")
	mem := id + "-mem"
	err := v.qmp.Execute(ctx, "object-add", map[string]any{
		"qom-type": "memory-backend-ram", "id": mem, "size": sizeBytes,
	}, nil)
	if err != nil {
		return "", fmt.Errorf("hot-add %d-byte dimm on node %d: %w", sizeBytes, nodeID, err)
	}
	err = v.qmp.Execute(ctx, "device_add", map[string]any{
		"driver": "pc-dimm", "id": id, "memdev": mem, "node": nodeID,
	}, nil)
	if err != nil {
		v.qmp.Execute(ctx, "object-del", map[string]any{"id": mem}, nil)
		return "", fmt.Errorf("hot-add %d-byte dimm on node %d: %w", sizeBytes, nodeID, err)
	}
	v.mu.Lock()
	v.backends[id] = mem
	v.mu.Unlock()
	return id, nil
}

// EjectError says the guest refused to eject a device, e.g. because memory
// of a DIMM could not be offlined: on amd64 an ACPI _OST status other than
// success or in-progress, on ppc64le (no ACPI) QEMU's
// DEVICE_UNPLUG_GUEST_ERROR, sent when the guest's DLPAR code gives up and
// takes the device back.
type EjectError struct {
	ID     string
	Status int // ACPI _OST status code, e.g. 0x82 device busy; 0 without ACPI
}

func (e *EjectError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("guest refused to eject %s: DEVICE_UNPLUG_GUEST_ERROR", e.ID)
	}
	return fmt.Sprintf("guest refused to eject %s: ACPI _OST status %#x", e.ID, e.Status)
}

// ACPI _OST codes for an ejection request (ACPI 6, table 6.xx).
const (
	ostEjectRequest    = 3
	ostSuccess         = 0
	ostEjectInProgress = 0x84
)

// DeviceDel asks QEMU to unplug a device added by HotAddCPU or HotAddDIMM
// and waits for DEVICE_DELETED, which comes once the guest has let go of
// it: a CPU must be offline or offlinable, a DIMM's memory blocks offline or
// movable. A refusal by the guest is an *EjectError. Without a deadline in
// ctx, DefaultDelTimeout applies. The memory backend of a DIMM is removed
// too.
func (v *VM) DeviceDel(ctx context.Context, id string) error {
	if strings.HasPrefix(id, cpuIDPrefix) && singleThreaded(v.cfg.Accel) {
		return fmt.Errorf("unplug %s: a CPU's unplug aborts QEMU under single-threaded TCG (-accel %s); boot the guest with Config.UnplugCPUs", id, v.cfg.Accel)
	}
	ctx, cancel := withDefaultTimeout(ctx, DefaultDelTimeout)
	defer cancel()
	w := v.qmp.Expect(func(ev Event) bool { return deviceGone(ev, id) || ejectRefused(ev, id) != nil })
	defer w.Cancel()
	if err := v.qmp.Execute(ctx, "device_del", map[string]any{"id": id}, nil); err != nil {
		return fmt.Errorf("unplug %s: %w", id, err)
	}
	if err := v.waitGone(ctx, w, id); err != nil {
		return fmt.Errorf("unplug %s: %w", id, err)
	}
	v.mu.Lock()
	mem := v.backends[id]
	delete(v.backends, id)
	v.mu.Unlock()
	if mem != "" {
		if err := v.qmp.Execute(ctx, "object-del", map[string]any{"id": mem}, nil); err != nil {
			return fmt.Errorf("unplug %s: remove its memory backend: %w", id, err)
		}
	}
	return nil
}

// waitGone waits for DEVICE_DELETED or a refusal from the guest. QEMU 7.2
// under TCG sends DEVICE_DELETED for a CPU's lapic child but not for the
// CPU itself (its object is never finalized), so the device leaving
// /machine/peripheral counts as gone too; that is checked every 250 ms.
func (v *VM) waitGone(ctx context.Context, w *EventWaiter, id string) error {
	evc := make(chan error, 1)
	go func() {
		ev, err := w.Wait(ctx)
		if err == nil {
			if e := ejectRefused(ev, id); e != nil {
				err = e
			}
		}
		evc <- err
	}()
	defer w.Cancel() // ends the goroutine when the poll wins
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-evc:
			if err != nil && ctx.Err() != nil {
				return fmt.Errorf("wait for DEVICE_DELETED: %w", ctx.Err())
			}
			return err
		case <-tick.C:
			present, err := v.peripheralExists(ctx, id)
			if err != nil && ctx.Err() == nil {
				return err
			}
			if err == nil && !present {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("wait for DEVICE_DELETED: %w", ctx.Err())
		}
	}
}

// peripheralExists reports whether a device with that id is still in
// QEMU's composition tree.
func (v *VM) peripheralExists(ctx context.Context, id string) (bool, error) {
	var props []struct {
		Name string `json:"name"`
	}
	if err := v.qmp.Execute(ctx, "qom-list", map[string]any{"path": "/machine/peripheral"}, &props); err != nil {
		return false, err
	}
	for _, p := range props {
		if p.Name == id {
			return true, nil
		}
	}
	return false, nil
}

func deviceGone(ev Event, id string) bool {
	if ev.Name != "DEVICE_DELETED" {
		return false
	}
	var d struct {
		Device string `json:"device"`
	}
	return json.Unmarshal(ev.Data, &d) == nil && d.Device == id
}

func ejectRefused(ev Event, id string) *EjectError {
	if ev.Name == "DEVICE_UNPLUG_GUEST_ERROR" {
		var d struct {
			Device string `json:"device"`
		}
		if json.Unmarshal(ev.Data, &d) != nil || d.Device != id {
			return nil
		}
		return &EjectError{ID: id}
	}
	if ev.Name != "ACPI_DEVICE_OST" {
		return nil
	}
	var d struct {
		Info struct {
			Device string `json:"device"`
			Source int    `json:"source"`
			Status int    `json:"status"`
		} `json:"info"`
	}
	if json.Unmarshal(ev.Data, &d) != nil || d.Info.Device != id || d.Info.Source != ostEjectRequest {
		return nil
	}
	if d.Info.Status == ostSuccess || d.Info.Status == ostEjectInProgress {
		return nil
	}
	return &EjectError{ID: id, Status: d.Info.Status}
}
