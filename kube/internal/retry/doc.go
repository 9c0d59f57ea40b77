// Package retry paces the API calls of kube/ and its children: the
// jittered exponential backoff after a failed call, the jittered steady
// poll, the nil-safe timer helpers their worker loops select on, and the
// one way their workers' options are defaulted (Defaults).
package retry
