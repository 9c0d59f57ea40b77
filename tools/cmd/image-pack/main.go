// Command image-pack builds the DaemonSet's container image from the static
// binaries that make build-cross wrote, with go-containerregistry and no
// container engine: `make image` runs it. That is its one job.
//
// Usage:
//
//	SOURCE_DATE_EPOCH=SECONDS image-pack -version VERSION -revision COMMIT [-root DIR] [-bin DIR] [-arches LIST] [-name NAME] [-tag TAG] [-out DIR]
//
// The image is a multi-architecture OCI image index, one linux platform
// for each of -arches, each a single layer (image.go says what it holds)
// with the Containerfile's entrypoint, user and labels. It writes
//
//	OUT/image/oci                     the OCI image layout (skopeo oci:, crane push)
//	OUT/node-resized-image-TAG.tar    the same layout as one tar, with a
//	                                  docker-style manifest.json beside
//	                                  index.json (docker and podman load,
//	                                  ctr images import, skopeo oci-archive:)
//
// and prints the image's name and digest, the archive and each platform's
// manifest digest and compressed size.
//
// The same binaries, VERSION, COMMIT and SOURCE_DATE_EPOCH give the same
// digest and the same archive, byte for byte: every time in the image is
// SOURCE_DATE_EPOCH (make sets it to the last commit's time), every
// owner is root, every mode is fixed, and every list is sorted.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// defaultName is the image's name, the one the DaemonSet's manifests name
// (packaging/kubernetes, the Helm chart's image.repository).
const defaultName = "ghcr.io/node-resized/node-resized"

type options struct {
	root     string    // the repository: LICENSE is read from it
	bin      string    // holds linux_<arch>/node-resized and linux_<arch>/node-resizectl
	arches   []string  // GOARCH names
	name     string    // the image's name, without a tag
	tag      string    // the image's tag
	version  string    // as stamped into the binaries (git describe)
	revision string    // the commit
	out      string    // where the layout and the archive go
	created  time.Time // SOURCE_DATE_EPOCH
}

func main() {
	if err := run(os.Args[1:], os.Getenv("SOURCE_DATE_EPOCH"), os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "image-pack:", err)
		}
		os.Exit(2)
	}
}

func run(args []string, epoch string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, epoch, stderr)
	if err != nil {
		return err
	}
	res, err := build(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s:%s %s\n", o.name, o.tag, res.digest)
	fmt.Fprintf(stdout, "%s\n", res.layout)
	fmt.Fprintf(stdout, "%s sha256:%s %d bytes\n", res.archive, res.archiveSum, res.archiveSize)
	for _, p := range res.platforms {
		fmt.Fprintf(stdout, "  linux/%s %s layer %d bytes (gzip)\n", p.arch, p.digest, p.layerSize)
	}
	return nil
}

func parseFlags(args []string, epoch string, stderr io.Writer) (options, error) {
	var o options
	var arches string
	fs := flag.NewFlagSet("image-pack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.root, "root", ".", "the repository root (LICENSE is read from it)")
	fs.StringVar(&o.bin, "bin", "bin", "the directory holding linux_<arch>/node-resized and linux_<arch>/node-resizectl (make build-cross)")
	fs.StringVar(&arches, "arches", "amd64 arm64 ppc64le s390x", "the platforms' GOARCH names, separated by spaces or commas")
	fs.StringVar(&o.name, "name", defaultName, "the image's name, without a tag")
	fs.StringVar(&o.tag, "tag", "", "the image's tag (default: -version without its leading v)")
	fs.StringVar(&o.version, "version", "", "the version stamped into the binaries (git describe --tags --always --dirty)")
	fs.StringVar(&o.revision, "revision", "", "the commit the binaries are built from (git rev-parse HEAD)")
	fs.StringVar(&o.out, "out", "dist", "where to write image/oci and node-resized-image-TAG.tar")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.version == "" || o.revision == "" {
		return o, errors.New("-version and -revision are required")
	}
	if epoch == "" {
		return o, errors.New("SOURCE_DATE_EPOCH is not set (make image sets it to the last commit's time)")
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || secs < 0 {
		return o, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", epoch)
	}
	o.created = time.Unix(secs, 0).UTC()
	seen := map[string]bool{}
	for _, a := range strings.FieldsFunc(arches, func(r rune) bool { return r == ' ' || r == ',' }) {
		if !seen[a] {
			seen[a] = true
			o.arches = append(o.arches, a)
		}
	}
	if len(o.arches) == 0 {
		return o, errors.New("-arches names no architecture")
	}
	if o.tag == "" {
		o.tag = imageTag(o.version)
	}
	if !validTag(o.tag) {
		return o, fmt.Errorf("tag %q: a tag is 1 to 128 of [A-Za-z0-9_.-], not starting with . or -", o.tag)
	}
	return o, nil
}

// imageTag is the image's tag for a version as git describe gives it: the
// version without its leading v, as the Helm chart's appVersion and the
// packages write it (v1.2.3 -> 1.2.3, v1.2.3-4-gabc1234-dirty ->
// 1.2.3-4-gabc1234-dirty); a version without a tag (abc1234) stays as it is.
func imageTag(version string) string {
	if len(version) > 1 && version[0] == 'v' && version[1] >= '0' && version[1] <= '9' {
		return version[1:]
	}
	return version
}

// validTag is the distribution spec's tag grammar:
// [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}.
func validTag(tag string) bool {
	if len(tag) == 0 || len(tag) > 128 {
		return false
	}
	for i, r := range tag {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
		case (r == '.' || r == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}
