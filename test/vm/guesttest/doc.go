// Package guesttest runs the real node-resized daemon in a test/vm guest
// for a Go test, and reads back what the guest and the daemon say.
//
// It is what the guest suites, test/vmscenario (amd64, ACPI hotplug) and
// test/vmarch (ppc64le, pseries' DLPAR), have in common: the machine they
// boot ([Machine], [Boot], with the report when the test ends), the
// daemon's files and flags in it and the setup script that lays out
// kubepods as the kubelet would and starts the daemon ([Setup]), the
// binaries built for it ([GoBuild]), the steps walked one after the other
// on the one guest ([Steps]), and the guest's commands, the daemon's
// status, changes and log and kubepods' files ([Guest]), with the values
// the kubelet would write there ([KubeletWeight], [WantMemoryMax]). What a
// suite checks of a hotplug stays in the suite.
package guesttest
