// Command ociimage writes a one-layer container image as an OCI image
// layout in a tar file, the format `ctr images import` reads, for the node
// test bed's real container runtime: no registry is reachable, so the
// images its pods run (a static busybox, the pause program) are made here
// from files of this machine and imported into the guest's containerd.
// The layer is an uncompressed tar with every time set to 0, so the same
// inputs give the same image digest. It is a test tool, not part of the
// product: the DaemonSet's own image is make image's (tools/cmd/image-pack),
// which TestDaemonSetOnRealNode builds and imports as a release would.
//
//	ociimage -name localhost/node-resized/busybox:1.35 -out busybox.tar \
//	    -add /bin/busybox=/bin/busybox -link /bin/sh=busybox -cmd sh
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var adds, links, env multi
	name := flag.String("name", "", "the image reference, e.g. localhost/node-resized/pause:test (required)")
	out := flag.String("out", "", "the tar file to write (required)")
	cmd := flag.String("cmd", "", "the image's default command, words split on spaces")
	flag.Var(&adds, "add", "SRC=DEST: the file SRC of this machine at DEST in the image, with SRC's permissions (repeatable)")
	flag.Var(&links, "link", "DEST=TARGET: a symbolic link at DEST in the image (repeatable)")
	flag.Var(&env, "env", "NAME=VALUE in the image's environment (repeatable; PATH defaults to /bin)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: ociimage -name REF -out FILE.tar [-add SRC=DEST]... [-link DEST=TARGET]... [-cmd CMD]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *name == "" || *out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*name, *out, *cmd, adds, links, env); err != nil {
		fmt.Fprintf(os.Stderr, "ociimage: %v\n", err)
		os.Exit(1)
	}
}

type entry struct {
	dest   string
	src    string // a file of this machine, or "" for a link
	target string
}

func run(name, out, cmd string, adds, links, env []string) error {
	var entries []entry
	for _, a := range adds {
		src, dest, ok := strings.Cut(a, "=")
		if !ok || src == "" || !path.IsAbs(dest) {
			return fmt.Errorf("-add %q: want SRC=/DEST", a)
		}
		entries = append(entries, entry{dest: path.Clean(dest), src: src})
	}
	for _, l := range links {
		dest, target, ok := strings.Cut(l, "=")
		if !ok || target == "" || !path.IsAbs(dest) {
			return fmt.Errorf("-link %q: want /DEST=TARGET", l)
		}
		entries = append(entries, entry{dest: path.Clean(dest), target: target})
	}
	if len(entries) == 0 {
		return errors.New("nothing to put in the image: give -add or -link")
	}
	layer, err := layerTar(entries)
	if err != nil {
		return err
	}
	if !hasEnv(env, "PATH") {
		env = append([]string{"PATH=/bin:/usr/bin:/sbin:/usr/sbin"}, env...)
	}
	config := map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Env": env, "Cmd": strings.Fields(cmd), "WorkingDir": "/"},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{digest(layer)}},
		"history":      []map[string]any{{"created_by": "ociimage", "created": "1970-01-01T00:00:00Z"}},
		"created":      "1970-01-01T00:00:00Z",
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return err
	}
	manifest := map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", configJSON, nil),
		"layers":        []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer, nil)},
	}
	manifestJSON, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	index := map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []any{descriptor("application/vnd.oci.image.manifest.v1+json", manifestJSON, map[string]any{
			"platform": map[string]string{"architecture": "amd64", "os": "linux"},
			"annotations": map[string]string{
				"io.containerd.image.name":          name,
				"org.opencontainers.image.ref.name": name,
			},
		})},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(p string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		p    string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", indexJSON},
		{blob(layer), layer},
		{blob(configJSON), configJSON},
		{blob(manifestJSON), manifestJSON},
	} {
		if err := add(f.p, f.data); err != nil {
			return fmt.Errorf("write %s: %w", f.p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Printf("%s %s\n", name, digest(manifestJSON))
	return nil
}

// layerTar is the image's one layer: the entries, with their parent
// folders, sorted, every time 0 and every owner root.
func layerTar(entries []entry) ([]byte, error) {
	dirs := map[string]bool{}
	for _, e := range entries {
		for d := path.Dir(e.dest); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	type item struct {
		name string
		hdr  *tar.Header
		data []byte
	}
	var items []item
	for d := range dirs {
		items = append(items, item{name: d, hdr: &tar.Header{Typeflag: tar.TypeDir, Mode: 0o755}})
	}
	for _, e := range entries {
		if dirs[e.dest] {
			return nil, fmt.Errorf("%s is both a folder and a file", e.dest)
		}
		if e.src == "" {
			items = append(items, item{name: e.dest, hdr: &tar.Header{Typeflag: tar.TypeSymlink, Linkname: e.target, Mode: 0o777}})
			continue
		}
		fi, err := os.Stat(e.src)
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file", e.src)
		}
		data, err := os.ReadFile(e.src)
		if err != nil {
			return nil, err
		}
		items = append(items, item{name: e.dest, hdr: &tar.Header{Typeflag: tar.TypeReg, Mode: int64(fi.Mode() & fs.ModePerm), Size: int64(len(data))}, data: data})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].name < items[j].name })
	for i := 1; i < len(items); i++ {
		if items[i].name == items[i-1].name {
			return nil, fmt.Errorf("%s given twice", items[i].name)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, it := range items {
		it.hdr.Name = strings.TrimPrefix(it.name, "/")
		if it.hdr.Typeflag == tar.TypeDir {
			it.hdr.Name += "/"
		}
		it.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(it.hdr); err != nil {
			return nil, err
		}
		if it.data != nil {
			if _, err := tw.Write(it.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func hasEnv(env []string, name string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, name+"=") {
			return true
		}
	}
	return false
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blob(b []byte) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest(b), "sha256:")
}

func descriptor(mediaType string, b []byte, extra map[string]any) map[string]any {
	d := map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
	for k, v := range extra {
		d[k] = v
	}
	return d
}
