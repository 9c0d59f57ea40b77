//go:build !linux

package topology

// attrCache keeps no files open off Linux.
type attrCache struct{}

type attrFiles struct{}

func newAttrCache(string, string) *attrCache { return nil }
func (c *attrCache) acquire() *attrFiles     { return nil }
func (c *attrCache) release(*attrFiles)      {}
func (t *attrFiles) newScan()                {}
func (t *attrFiles) endScan()                {}

func (r *reader) readAttr(d dir, id int, attr uint8) ([]byte, bool, error) {
	return r.readOptional(d, r.at(attrPaths[attr][0], id, attrPaths[attr][1]))
}

func (r *reader) readFile(d dir, path []byte) ([]byte, bool, error) {
	return r.readOptional(d, path)
}
