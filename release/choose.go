package release

// Choose returns what to take offline to bring the machine down to the
// targets: CPUs and memory blocks in the order to offline them one at a
// time, the pods to evict first, the machine expected afterwards and what
// cannot be reached. A target at or above what is online takes nothing.
// After each step the executor may re-read the machine and call Choose
// again (with a step that failed in in.Skip): the plan for what is left
// is the rest of this one, or a better one.
func Choose(in Input) Plan {
	var p Plan
	if in.Machine == nil {
		return p
	}
	chooseCPUs(in, &p)
	chooseMemory(in, &p)
	return p
}
