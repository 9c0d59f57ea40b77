//go:build !faultinject

package fault

// Enabled reports whether this build injects faults.
const Enabled = false

// Point does nothing in a build without faultinject.
func Point(string) {}

// Active is false in a build without faultinject.
func Active(string) bool { return false }

// Armed is false in a build without faultinject.
func Armed(string) bool { return false }
