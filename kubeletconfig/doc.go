// Package kubeletconfig reads the kubelet's configuration the way the kubelet
// does (the KubeletConfiguration file, its drop-in directory, the defaults
// that matter) and turns the parts node-resized needs into the reservations
// the decision core computes with.
//
// Its only side effect is reading files.
package kubeletconfig
