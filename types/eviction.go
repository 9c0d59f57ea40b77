package types

// EvictionReport is the evictor's progress on the Evict of one generation.
// It is a plain value, safe for concurrent reads.
type EvictionReport struct {
	// Generation is the Evict.Generation the report is about; a report for
	// another generation is ignored.
	Generation int64 `json:"generation"`
	// Done is true once every pod that no longer fits is gone (or none had
	// to go).
	Done bool `json:"done,omitempty"`
	// Blocked says why eviction cannot proceed (a PodDisruptionBudget, …);
	// empty when it is proceeding.
	Blocked string `json:"blocked,omitempty"`
}
