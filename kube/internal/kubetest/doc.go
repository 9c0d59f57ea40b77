// Package kubetest is the test harness that kube/ and its children share:
// a fake API server of Nodes, Pods and Events for the dynamic client, a
// worker run for the length of a test, and a wait for another goroutine.
// Only tests import it.
package kubetest
