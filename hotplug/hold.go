package hotplug

import (
	"maps"
	"slices"
	"sync"
)

// Holds are the CPUs and memory blocks held offline: the release holds
// what it takes offline, so that no online through this package brings it
// back before the hypervisor unplugs it. The auto-onliner onlines only
// what was hot-added, but virtio-mem removes and re-adds blocks, and a
// block re-added under a held id must stay offline: the hold is kept by
// id, not by device.
//
// A Writer refuses to online what its Holds hold (ErrHeld); offlining is
// never refused. The check is made just before each write: a hold that
// lands while an online is being written does not undo it, so the release
// holds before it offlines and reads the state back after.
//
// Holds is safe for concurrent use; the zero value holds nothing.
type Holds struct {
	mu     sync.Mutex // guards cpus and blocks
	cpus   map[int]struct{}
	blocks map[int]struct{}
}

// Hold holds the CPUs and memory blocks offline. Holding twice is
// holding once.
func (h *Holds) Hold(cpus, blocks []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cpus == nil {
		h.cpus, h.blocks = map[int]struct{}{}, map[int]struct{}{}
	}
	for _, id := range cpus {
		h.cpus[id] = struct{}{}
	}
	for _, id := range blocks {
		h.blocks[id] = struct{}{}
	}
}

// Release lets the CPUs and memory blocks be onlined again. Releasing
// what is not held does nothing.
func (h *Holds) Release(cpus, blocks []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range cpus {
		delete(h.cpus, id)
	}
	for _, id := range blocks {
		delete(h.blocks, id)
	}
}

// CPUHeld reports whether CPU id is held offline.
func (h *Holds) CPUHeld(id int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.cpus[id]
	return ok
}

// BlockHeld reports whether memory block id is held offline.
func (h *Holds) BlockHeld(id int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.blocks[id]
	return ok
}

// Held returns the held CPUs and memory blocks, sorted.
func (h *Holds) Held() (cpus, blocks []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.cpus)), slices.Sorted(maps.Keys(h.blocks))
}
