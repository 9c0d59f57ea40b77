package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Where build writes, under options.out.
const layoutDir = "image/oci"

func archiveName(tag string) string { return "node-resized-image-" + tag + ".tar" }

// The annotations of index.json's one entry, which name the image for
// what reads the layout: containerd's (ctr images import, docker's
// containerd image store) and the OCI reference name (podman load,
// skopeo's oci: and oci-archive:), both the full reference.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// dockerArch is the platform that manifest.json names: docker's classic
// image store (not containerd's) reads only manifest.json, which holds
// one image per tag.
const dockerArch = "amd64"

type platformResult struct {
	arch      string
	digest    string // the platform's manifest
	layerSize int64  // its layer, compressed
}

type result struct {
	digest      string // the index's: the image's digest in a registry
	layout      string
	archive     string
	archiveSum  string
	archiveSize int64
	platforms   []platformResult
}

// build writes the image as an OCI layout and as an archive of it, each
// first under a temporary name and renamed when complete.
func build(o options) (result, error) {
	var res result
	idx, imgs, err := imageIndex(o)
	if err != nil {
		return res, err
	}
	d, err := idx.Digest()
	if err != nil {
		return res, err
	}
	res.digest = d.String()
	ref := o.name + ":" + o.tag

	if err := os.MkdirAll(filepath.Join(o.out, filepath.Dir(layoutDir)), 0o755); err != nil {
		return res, err
	}
	res.layout = filepath.Join(o.out, layoutDir)
	tmp, err := os.MkdirTemp(filepath.Dir(res.layout), ".oci-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return res, err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		annotationContainerdName: ref,
		annotationRefName:        ref,
	})); err != nil {
		return res, fmt.Errorf("write the OCI layout: %w", err)
	}

	// manifest.json: the one platform's image, in docker save's form.
	arch := dockerArch
	if imgs[arch] == nil {
		arch = sortedKeys(imgs)[0]
	}
	cfg, err := imgs[arch].ConfigName()
	if err != nil {
		return res, err
	}
	layers, err := imgs[arch].Layers()
	if err != nil {
		return res, err
	}
	desc := tarball.Descriptor{Config: blobPath(cfg.Hex), RepoTags: []string{ref}}
	for _, l := range layers {
		ld, err := l.Digest()
		if err != nil {
			return res, err
		}
		desc.Layers = append(desc.Layers, blobPath(ld.Hex))
	}
	manifestJSON, err := json.Marshal(tarball.Manifest{desc})
	if err != nil {
		return res, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "manifest.json"), manifestJSON, 0o644); err != nil {
		return res, err
	}

	res.archive = filepath.Join(o.out, archiveName(o.tag))
	if res.archiveSum, res.archiveSize, err = writeArchive(tmp, res.archive, o); err != nil {
		return res, err
	}
	// The layout directory is the archive's content, less manifest.json,
	// which only docker's classic store reads.
	if err := os.Remove(filepath.Join(tmp, "manifest.json")); err != nil {
		return res, err
	}
	if err := os.RemoveAll(res.layout); err != nil {
		return res, err
	}
	if err := os.Rename(tmp, res.layout); err != nil {
		return res, err
	}
	if err := os.Chmod(res.layout, 0o755); err != nil {
		return res, err
	}

	for _, a := range sortedKeys(imgs) {
		md, err := imgs[a].Digest()
		if err != nil {
			return res, err
		}
		ls, err := imgs[a].Layers()
		if err != nil {
			return res, err
		}
		var size int64
		for _, l := range ls {
			s, err := l.Size()
			if err != nil {
				return res, err
			}
			size += s
		}
		res.platforms = append(res.platforms, platformResult{arch: a, digest: md.String(), layerSize: size})
	}
	return res, nil
}

func blobPath(hex string) string { return "blobs/sha256/" + hex }

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// writeArchive writes the folder dir as the tar file out: every file and
// folder under it in the order of their names, every owner root, files
// 0644 and folders 0755, every time the image's. It returns the tar's
// sha256 and size.
func writeArchive(dir, out string, o options) (string, int64, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			rel += "/"
		} else if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		names = append(names, rel)
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	sort.Strings(names)

	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(tmp)
	defer f.Close()
	sum := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, sum)}
	tw := tar.NewWriter(cw)
	for _, n := range names {
		h := &tar.Header{Name: n, ModTime: o.created}
		if n[len(n)-1] == '/' {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
			if err := tw.WriteHeader(h); err != nil {
				return "", 0, err
			}
			continue
		}
		if err := copyInto(tw, h, filepath.Join(dir, filepath.FromSlash(n))); err != nil {
			return "", 0, fmt.Errorf("%s: %w", out, err)
		}
	}
	if err := tw.Close(); err != nil {
		return "", 0, err
	}
	if err := f.Close(); err != nil {
		return "", 0, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(sum.Sum(nil)), cw.n, nil
}

func copyInto(tw *tar.Writer, h *tar.Header, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, fi.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
