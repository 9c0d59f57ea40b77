// Package objects holds what kube/ and its children share about the
// objects they send and receive: the resources they name, the field
// manager of their writes, and the conversion between the dynamic
// client's unstructured objects and the typed k8s.io/api structs.
package objects
