package topology

import (
	"fmt"
)

// NotRemovable reads memoryN/removable of every memory block and returns
// the blocks where it is 0, ascending. The file is optional: a kernel
// without memory hot-remove has none, and since Linux 5.8 it reads 1 for
// every block wherever the kernel can offline memory at all; a block
// without it is not listed. Whether one block will really go offline is
// only known by trying.
func (fs FS) NotRemovable() ([]int, error) {
	ids, err := fs.blockIDs()
	if err != nil {
		return nil, err
	}
	r := getReader()
	defer putReader(r)
	var not []int
	for _, id := range ids {
		p := r.at2(fs.memDir, -1, "/memory", id, "/removable")
		b, ok, err := r.readOptional(cwd, p)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		v, valid := parseUint(b, 10)
		if !valid || v > 1 {
			return nil, fmt.Errorf("parse %s: %q is not 0 or 1", p, trimSpace(b))
		}
		if v == 0 {
			not = append(not, id)
		}
	}
	return not, nil
}
