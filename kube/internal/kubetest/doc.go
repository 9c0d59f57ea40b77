// Package kubetest is the test harness that kube/ and its children share:
// a fake API server of Nodes, Pods and Events for the dynamic client, a
// worker run for the length of a test, a wait for another goroutine, and
// a log buffer that one goroutine writes while another reads it. Only
// tests import it.
package kubetest
