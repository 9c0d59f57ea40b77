//go:build race

package topology

// raceEnabled: the race detector's instrumentation allocates.
const raceEnabled = true
