package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What every platform's image is, beside its files. The Containerfile at
// the top of the repository says the same (containerfile_test.go holds
// the two together).
var (
	// entrypoint is the DaemonSet's command (packaging/kubernetes/daemonset.yaml);
	// its args are the flags.
	entrypoint = []string{"/usr/bin/node-resized"}
	// env: node-resizectl by its name in `kubectl exec`.
	env = []string{"PATH=/usr/bin"}
	// user is root, as the DaemonSet runs it (runAsUser: 0): the files
	// it writes on the host (kubepods' cgroup files, the kubelet's
	// checkpoints, its own state) are root's, and systemd lets only uid 0
	// restart the kubelet over D-Bus without polkit.
	user = "0:0"
)

const (
	// source is the repository, as the Helm chart's sources name it.
	source = "https://github.com/node-resized/node-resized"
	// licenses is LICENSE's SPDX identifier.
	licenses = "Apache-2.0"
	// compressionLevel: gzip's default. The best is 0.4 % smaller and
	// takes three times as long (9.7 s against 3.5 s for the 37 MiB of
	// linux/amd64's binaries on a busy 2-core machine); BestSpeed is 13 %
	// larger.
	compressionLevel = gzip.DefaultCompression
)

// A file is one regular file of the image, owned by root.
type file struct {
	path string      // in the image, without the leading slash
	src  string      // on this machine
	mode fs.FileMode // its permission bits
}

// files is what the image of one architecture holds: the two static
// binaries make build-cross wrote for it (the daemon, which the
// DaemonSet runs, and the CLI, for `kubectl exec ... node-resizectl
// status`), and the licence, which redistributing the binaries must
// carry. There is nothing else: no shell, no libc (the binaries are
// static), no /etc/passwd (the user is a number). The DaemonSet mounts
// what the daemon reads and writes.
func files(root, bin, arch string) []file {
	dir := filepath.Join(bin, "linux_"+arch)
	return []file{
		{path: "usr/bin/node-resized", src: filepath.Join(dir, "node-resized"), mode: 0o755},
		{path: "usr/bin/node-resizectl", src: filepath.Join(dir, "node-resizectl"), mode: 0o755},
		{path: "usr/share/licenses/node-resized/LICENSE", src: filepath.Join(root, "LICENSE"), mode: 0o644},
	}
}

// labels are the image's org.opencontainers.image labels: its config's
// labels, and the annotations of each manifest and of the index.
func labels(o options) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "node-resized",
		"org.opencontainers.image.description": "Follows CPU and memory hotplug on Kubernetes nodes: the node-resized DaemonSet's image",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.revision":    o.revision,
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.licenses":    licenses,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
	}
}

// layerTar is the image's one layer, uncompressed: content's files and their
// parent folders (mode 0755), sorted, every owner root (0:0, no names),
// every time mtime.
func layerTar(content []file, mtime time.Time) ([]byte, error) {
	dirs := map[string]bool{}
	for _, f := range content {
		for d := path.Dir(f.path); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	type entry struct {
		name string
		hdr  tar.Header
		src  string
	}
	var entries []entry
	for d := range dirs {
		entries = append(entries, entry{name: d + "/", hdr: tar.Header{Typeflag: tar.TypeDir, Mode: 0o755}})
	}
	for _, f := range content {
		if dirs[f.path] {
			return nil, fmt.Errorf("%s is both a folder and a file", f.path)
		}
		entries = append(entries, entry{name: f.path, hdr: tar.Header{Typeflag: tar.TypeReg, Mode: int64(f.mode)}, src: f.src})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		h.Name = e.name
		h.ModTime = mtime
		var data []byte
		if e.src != "" {
			fi, err := os.Stat(e.src)
			if err != nil {
				return nil, err
			}
			if !fi.Mode().IsRegular() {
				return nil, fmt.Errorf("%s: not a regular file", e.src)
			}
			if data, err = os.ReadFile(e.src); err != nil {
				return nil, err
			}
			h.Size = int64(len(data))
		}
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", e.name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// platformImage is the image of one architecture: an OCI manifest, its
// config and its one gzip layer.
func platformImage(o options, arch string) (v1.Image, error) {
	raw, err := layerTar(files(o.root, o.bin, arch), o.created)
	if err != nil {
		return nil, fmt.Errorf("linux/%s: %w", arch, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(compressionLevel), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("linux/%s: %w", arch, err)
	}
	created := v1.Time{Time: o.created}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      created,
		Config: v1.Config{
			Entrypoint: entrypoint,
			Env:        env,
			User:       user,
			Labels:     labels(o),
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   created,
		CreatedBy: "tools/cmd/image-pack: the Containerfile's COPY of node-resized, node-resizectl and LICENSE",
	}})
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels(o)).(v1.Image), nil
}

// noArtifactType is an image whose entry in the index has no artifactType.
// go-containerregistry gives an image's entry its config's media type as
// artifactType, which OCI 1.1 allows; but docker buildx and buildah write
// none, and skopeo 1.9 (Debian 12's) then rewrites the index (another
// digest), and refuses to copy it with --preserve-digests.
type noArtifactType struct{ v1.Image }

func (noArtifactType) ArtifactType() (string, error) { return "", nil }

// imageIndex is the multi-architecture image: an OCI index of one
// platform image per architecture, in the order of their names.
func imageIndex(o options) (v1.ImageIndex, map[string]v1.Image, error) {
	arches := append([]string(nil), o.arches...)
	sort.Strings(arches)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	imgs := map[string]v1.Image{}
	for _, arch := range arches {
		img, err := platformImage(o, arch)
		if err != nil {
			return nil, nil, err
		}
		imgs[arch] = img
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        noArtifactType{img},
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	return mutate.Annotations(idx, labels(o)).(v1.ImageIndex), imgs, nil
}
