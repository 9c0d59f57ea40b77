// Package kubelet is node-resized's room for everything about the local
// kubelet: its configuration read the way the kubelet reads it (the
// KubeletConfiguration file, its drop-in directory, the defaults that
// matter) turned into the reservations the decision core computes with,
// and its CPU manager checkpoint read and verified the way the kubelet
// verifies it. CPU lists in the kubelet's own formats are parsed with
// k8s.io/utils/cpuset, the package the kubelet itself uses.
//
// Its only side effect is reading files.
package kubelet
