package nrt

import (
	"encoding/binary"
	"encoding/hex"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// The pod fingerprint, as the podfingerprint library
// (github.com/k8stopologyawareschedwg/podfingerprint) defines it and the
// scheduler's NodeResourceTopologyMatch plugin checks it: the plugin
// resyncs its view of a node when the fingerprint of the pods it believes
// there equals the object's.
const (
	// FingerprintAttribute is the attribute that holds the fingerprint.
	FingerprintAttribute = "nodeTopologyPodsFingerprint"
	// FingerprintMethodAttribute says which pods the fingerprint covers.
	FingerprintMethodAttribute = "nodeTopologyPodsFingerprintMethod"
	// FingerprintAnnotation is the legacy place of the fingerprint, for
	// schedulers that read no attribute.
	FingerprintAnnotation = "topology.node.k8s.io/fingerprint"
	// FingerprintMethodAll is the method of a fingerprint over every pod
	// the kubelet's pod-resources List names, as node-feature-discovery's
	// topology-updater computes it by default.
	FingerprintMethodAll = "all"

	fingerprintPrefix  = "pfp0" // every fingerprint's
	fingerprintVersion = "v001" // the format of this one
)

// Pod names a pod as the pod-resources API does.
type Pod struct {
	Namespace, Name string
}

// PodFingerprint returns the fingerprint of a set of pods, in the
// podfingerprint library's version v001: "pfp0" "v001" and the hex of an
// xxhash64 (seed 0) over the pods' hashes sorted, each 8 bytes little
// endian, where a pod's hash is the xxhash64 of its name seeded with the
// xxhash64 of its namespace. The order of pods does not matter; a pod
// listed twice counts twice, as in the library.
func PodFingerprint(pods []Pod) string {
	hashes := make([]uint64, len(pods))
	for i, p := range pods {
		d := xxhash.NewWithSeed(xxhash.Sum64String(p.Namespace))
		d.WriteString(p.Name)
		hashes[i] = d.Sum64()
	}
	slices.Sort(hashes)
	d := xxhash.New()
	var b [8]byte
	for _, h := range hashes {
		binary.LittleEndian.PutUint64(b[:], h)
		d.Write(b[:])
	}
	return fingerprintPrefix + fingerprintVersion + hex.EncodeToString(d.Sum(nil))
}
