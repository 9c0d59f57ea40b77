package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// allArches are the platforms of the image make image builds.
var allArches = []string{"amd64", "arm64", "ppc64le", "s390x"}

// elfMachine is each architecture's ELF machine and byte order
// (debug/elf), as the kernel that runs the binary checks them.
var elfMachine = map[string]struct {
	machine elf.Machine
	order   string
}{
	"amd64":   {elf.EM_X86_64, "LittleEndian"},
	"arm64":   {elf.EM_AARCH64, "LittleEndian"},
	"ppc64le": {elf.EM_PPC64, "LittleEndian"},
	"s390x":   {elf.EM_S390, "BigEndian"},
}

// The test build's inputs: a version between releases, a commit and a
// commit time.
const (
	testVersion  = "v1.2.3-4-gabc1234"
	testRevision = "abc1234abc1234abc1234abc1234abc1234abc12"
	testEpoch    = 1767225600 // 2026-01-01T00:00:00Z
)

var (
	workDir string // removed after the tests

	binOnce sync.Once
	binPath string
	binErr  error

	fixtureOnce sync.Once
	fixtureRes  result
	fixtureErr  error
)

func TestMain(m *testing.M) {
	var err error
	if workDir, err = os.MkdirTemp("", "image-pack-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(workDir)
	os.Exit(code)
}

// repoRoot is the repository, two folders above tools/cmd/image-pack.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// bins is the folder of make build-cross's binaries for every one of
// allArches: NODE_RESIZED_BIN (make package-test passes its BIN), else
// built here by make build-cross.
func bins(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = os.Getenv("NODE_RESIZED_BIN")
		if binPath == "" {
			binPath = filepath.Join(workDir, "bin")
			cmd := exec.Command("make", "-C", repoRoot(t), "build-cross", "BIN="+binPath, "ARCHES="+strings.Join(allArches, " "))
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("make build-cross: %v\n%s", err, out)
				return
			}
		}
		for _, a := range allArches {
			for _, b := range []string{"node-resized", "node-resizectl"} {
				if _, err := os.Stat(filepath.Join(binPath, "linux_"+a, b)); err != nil {
					binErr = fmt.Errorf("%v (make build-cross writes it)", err)
					return
				}
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func testOptions(t *testing.T, out string) options {
	return options{
		root:     repoRoot(t),
		bin:      bins(t),
		arches:   allArches,
		name:     defaultName,
		tag:      imageTag(testVersion),
		version:  testVersion,
		revision: testRevision,
		out:      out,
		created:  time.Unix(testEpoch, 0).UTC(),
	}
}

// fixture is one build of the image with testOptions, shared by the
// tests that only read it.
func fixture(t *testing.T) (options, result) {
	t.Helper()
	o := testOptions(t, filepath.Join(workDir, "fixture"))
	fixtureOnce.Do(func() { fixtureRes, fixtureErr = build(o) })
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return o, fixtureRes
}

// TestReproducible: two builds of the same binaries, version, commit and
// SOURCE_DATE_EPOCH give the same image digest, the same layout and the
// same archive, byte for byte; another SOURCE_DATE_EPOCH gives another
// digest (linux/amd64's alone is enough to show it).
func TestReproducible(t *testing.T) {
	o, first := fixture(t)
	o.out = filepath.Join(workDir, "again")
	defer os.RemoveAll(o.out)
	second, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	if first.digest != second.digest {
		t.Errorf("image digest %s, then %s", first.digest, second.digest)
	}
	if first.archiveSum != second.archiveSum {
		t.Errorf("archive sha256 %s, then %s", first.archiveSum, second.archiveSum)
	}
	a, b := treeSums(t, first.layout), treeSums(t, second.layout)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("the layouts differ:\n%v\n%v", a, b)
	}
	t.Logf("twice %s, archive sha256:%s (%d bytes)", first.digest, first.archiveSum, first.archiveSize)
	for _, p := range first.platforms {
		t.Logf("linux/%s %s, layer %d bytes", p.arch, p.digest, p.layerSize)
	}

	later := o
	later.created = o.created.Add(time.Second)
	later.arches = []string{"amd64"}
	later.out = filepath.Join(workDir, "later")
	defer os.RemoveAll(later.out)
	third, err := build(later)
	if err != nil {
		t.Fatal(err)
	}
	if third.platforms[0].digest == first.platforms[0].digest {
		t.Errorf("SOURCE_DATE_EPOCH one second later gives the same linux/amd64 digest %s", third.platforms[0].digest)
	}
}

// treeSums maps every file under dir to its mode and sha256.
func treeSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		m[rel] = fmt.Sprintf("%x", sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestImage: what the test build wrote, as the checks below expect it.
func TestImage(t *testing.T) {
	o, res := fixture(t)
	checkImage(t, res.layout, o)
	checkArchive(t, res, o)
}

// TestMakeImage checks the image make image wrote (NODE_RESIZED_IMAGE, its
// layout folder; make package-test passes it) against this checkout:
// its labels name HEAD and the last commit's time, its binaries are make
// build-cross's (NODE_RESIZED_BIN).
func TestMakeImage(t *testing.T) {
	dir := os.Getenv("NODE_RESIZED_IMAGE")
	if dir == "" {
		t.Skip("NODE_RESIZED_IMAGE is not set: make package-test sets it to the layout make image wrote")
	}
	root := repoRoot(t)
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	epoch, err := strconv.ParseInt(git("log", "-1", "--format=%ct"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	version := git("describe", "--tags", "--always", "--dirty")
	o := options{
		root: root, bin: bins(t), arches: allArches, name: defaultName,
		tag: imageTag(version), version: version, revision: git("rev-parse", "HEAD"),
		created: time.Unix(epoch, 0).UTC(),
	}
	checkImage(t, dir, o)
}

// checkImage checks the OCI layout dir: index.json names o's image, an
// index of one platform image per architecture of o, each with o's
// labels, the Containerfile's config and exactly the files of files()
// with the right ELF machine.
func checkImage(t *testing.T, dir string, o options) {
	t.Helper()
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	topm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(topm.Manifests) != 1 {
		t.Fatalf("index.json has %d entries, want 1 (the image index)", len(topm.Manifests))
	}
	entry := topm.Manifests[0]
	ref := o.name + ":" + o.tag
	if entry.MediaType != types.OCIImageIndex {
		t.Errorf("index.json's entry is a %s, want an OCI image index", entry.MediaType)
	}
	for _, k := range []string{annotationContainerdName, annotationRefName} {
		if entry.Annotations[k] != ref {
			t.Errorf("index.json's entry: %s %q, want %q", k, entry.Annotations[k], ref)
		}
	}
	idx, err := top.ImageIndex(entry.Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := labels(o)
	if !reflect.DeepEqual(im.Annotations, wantLabels) {
		t.Errorf("the index's annotations:\n%v\nwant\n%v", im.Annotations, wantLabels)
	}
	var platforms []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Errorf("%s has no platform", d.Digest)
			continue
		}
		platforms = append(platforms, d.Platform.String())
		if d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("%s: a %s, want an OCI manifest", d.Platform, d.MediaType)
		}
		if d.ArtifactType != "" {
			t.Errorf("%s: artifactType %q in the index: skopeo 1.9 rewrites such an index", d.Platform, d.ArtifactType)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkPlatformImage(t, img, d.Platform.Architecture, o)
	}
	var want []string
	for _, a := range o.arches {
		want = append(want, "linux/"+a)
	}
	sort.Strings(want)
	if !reflect.DeepEqual(platforms, want) {
		t.Errorf("platforms %v, want %v", platforms, want)
	}
	t.Logf("%s: %s %s, platforms %v", dir, ref, entry.Digest, platforms)
}

func checkPlatformImage(t *testing.T, img v1.Image, arch string, o options) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Annotations, labels(o)) {
		t.Errorf("linux/%s: the manifest's annotations %v, want %v", arch, m.Annotations, labels(o))
	}
	if m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("linux/%s: config media type %s", arch, m.Config.MediaType)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != arch {
		t.Errorf("linux/%s: the config says %s/%s", arch, cf.OS, cf.Architecture)
	}
	if !cf.Created.Time.Equal(o.created) {
		t.Errorf("linux/%s: created %v, want %v", arch, cf.Created.Time, o.created)
	}
	for _, h := range cf.History {
		if !h.Created.Time.Equal(o.created) {
			t.Errorf("linux/%s: history created %v, want %v", arch, h.Created.Time, o.created)
		}
	}
	if !reflect.DeepEqual(cf.Config.Labels, labels(o)) {
		t.Errorf("linux/%s: labels %v, want %v", arch, cf.Config.Labels, labels(o))
	}
	if created := cf.Config.Labels["org.opencontainers.image.created"]; created != o.created.Format(time.RFC3339) {
		t.Errorf("linux/%s: created label %q", arch, created)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("linux/%s: %d layers, want 1", arch, len(layers))
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("linux/%s: layer media type %s, want %s", arch, mt, types.OCILayer)
	}
	entries := readLayer(t, layers[0])

	// Exactly files() and their folders, root's, dated o.created.
	want := map[string]layerEntry{}
	for _, f := range files(o.root, o.bin, arch) {
		data, err := os.ReadFile(f.src)
		if err != nil {
			t.Fatal(err)
		}
		want[f.path] = layerEntry{typ: tar.TypeReg, mode: int64(f.mode), sum: sum(data)}
		for d := path.Dir(f.path); d != "."; d = path.Dir(d) {
			want[d] = layerEntry{typ: tar.TypeDir, mode: 0o755}
		}
	}
	got := map[string]layerEntry{}
	for _, e := range entries {
		if e.uid != 0 || e.gid != 0 || e.uname != "" || e.gname != "" {
			t.Errorf("linux/%s: %s owned by %d:%d (%q:%q), want 0:0", arch, e.name, e.uid, e.gid, e.uname, e.gname)
		}
		if !e.mtime.Equal(o.created) {
			t.Errorf("linux/%s: %s dated %v, want %v", arch, e.name, e.mtime, o.created)
		}
		got[e.name] = layerEntry{typ: e.typ, mode: e.mode, sum: e.sum}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("linux/%s: the layer holds\n%v\nwant\n%v", arch, got, want)
	}
	for i := 1; i < len(entries); i++ {
		if entries[i-1].name >= entries[i].name {
			t.Errorf("linux/%s: the layer's entries are not sorted: %s before %s", arch, entries[i-1].name, entries[i].name)
		}
	}

	// Each binary is a static executable for arch.
	wantELF := elfMachine[arch]
	for _, e := range entries {
		if !strings.HasPrefix(e.name, "usr/bin/") {
			continue
		}
		f, err := elf.NewFile(bytes.NewReader(e.data))
		if err != nil {
			t.Errorf("linux/%s: %s: %v", arch, e.name, err)
			continue
		}
		if f.Machine != wantELF.machine || f.ByteOrder.String() != wantELF.order || f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
			t.Errorf("linux/%s: %s is %v %v %v %v, want %v %s ELFCLASS64 ET_EXEC", arch, e.name, f.Machine, f.ByteOrder, f.Class, f.Type, wantELF.machine, wantELF.order)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("linux/%s: %s has an interpreter: not static", arch, e.name)
			}
		}
	}
}

type layerEntry struct {
	typ  byte
	mode int64
	sum  string
}

type tarEntry struct {
	name         string
	typ          byte
	mode         int64
	uid, gid     int
	uname, gname string
	mtime        time.Time
	data         []byte
	sum          string
}

// readLayer lists the layer's entries in their order, names without a
// trailing slash.
func readLayer(t *testing.T, l v1.Layer) []tarEntry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return readTar(t, rc)
}

func readTar(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		e := tarEntry{name: strings.TrimSuffix(h.Name, "/"), typ: h.Typeflag, mode: h.Mode, uid: h.Uid, gid: h.Gid,
			uname: h.Uname, gname: h.Gname, mtime: h.ModTime.UTC(), data: data}
		if h.Typeflag == tar.TypeReg {
			e.sum = sum(data)
		}
		out = append(out, e)
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// checkArchive checks the archive: the layout's files and manifest.json,
// sorted, root's, dated o.created; the layout read back from it is the
// image; manifest.json is docker save's, which go-containerregistry's
// tarball reader (crane push FILE.tar) loads as linux/amd64's image.
func checkArchive(t *testing.T, res result, o options) {
	t.Helper()
	if filepath.Base(res.archive) != "node-resized-image-"+o.tag+".tar" {
		t.Errorf("archive %s", res.archive)
	}
	f, err := os.Open(res.archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries := readTar(t, f)
	unpacked := filepath.Join(workDir, "unpacked")
	os.RemoveAll(unpacked)
	defer os.RemoveAll(unpacked)
	var names []string
	for _, e := range entries {
		names = append(names, e.name)
		if e.uid != 0 || e.gid != 0 || !e.mtime.Equal(o.created) {
			t.Errorf("archive: %s owned by %d:%d, dated %v", e.name, e.uid, e.gid, e.mtime)
		}
		p := filepath.Join(unpacked, filepath.FromSlash(e.name))
		switch e.typ {
		case tar.TypeDir:
			if e.mode != 0o755 {
				t.Errorf("archive: %s mode %o", e.name, e.mode)
			}
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if e.mode != 0o644 {
				t.Errorf("archive: %s mode %o", e.name, e.mode)
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, e.data, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("archive: %s is of type %c", e.name, e.typ)
		}
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("archive entries not sorted: %v", names)
	}
	for _, n := range []string{"oci-layout", "index.json", "manifest.json", "blobs", "blobs/sha256"} {
		if !containsString(names, n) {
			t.Errorf("the archive has no %s", n)
		}
	}

	// The archive is the layout, plus manifest.json.
	inArchive := treeSums(t, unpacked)
	delete(inArchive, "manifest.json")
	if !reflect.DeepEqual(inArchive, treeSums(t, res.layout)) {
		t.Errorf("the archive's files are not the layout's")
	}
	ii, err := layout.ImageIndexFromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := ii.Digest(); d.String() == "" {
		t.Error("no index")
	}

	// manifest.json, as docker's classic store reads it.
	var mf tarball.Manifest
	if err := json.Unmarshal(readFile(t, filepath.Join(unpacked, "manifest.json")), &mf); err != nil {
		t.Fatal(err)
	}
	ref := o.name + ":" + o.tag
	if len(mf) != 1 || !reflect.DeepEqual(mf[0].RepoTags, []string{ref}) {
		t.Fatalf("manifest.json %+v: want one image tagged %s", mf, ref)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	timg, err := tarball.ImageFromPath(res.archive, &tag)
	if err != nil {
		t.Fatalf("the archive as a docker tarball: %v", err)
	}
	cf, err := timg.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != dockerArch {
		t.Errorf("manifest.json names the %s image, want %s", cf.Architecture, dockerArch)
	}
	amd64 := platformImageOf(t, res.layout, dockerArch)
	if a, b := configName(t, timg), configName(t, amd64); a != b {
		t.Errorf("manifest.json's config %s, the layout's linux/%s %s", a, dockerArch, b)
	}
	if a, b := diffIDs(t, timg), diffIDs(t, amd64); !reflect.DeepEqual(a, b) {
		t.Errorf("manifest.json's layers %v, the layout's linux/%s %v", a, dockerArch, b)
	}
}

func configName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func diffIDs(t *testing.T, img v1.Image) []v1.Hash {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var out []v1.Hash
	for _, l := range ls {
		d, err := l.DiffID()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// platformImageOf is arch's image in the layout dir.
func platformImageOf(t *testing.T, dir, arch string) v1.Image {
	t.Helper()
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.Architecture == arch {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("no linux/%s image in %s", arch, dir)
	return nil
}

// TestPush pushes the layout as crane push DIR REF does (the layout's one
// entry, the index) to a registry in this process, then pulls it back:
// the registry has the same digest, and each platform resolves to its
// image.
func TestPush(t *testing.T) {
	_, res := fixture(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref, err := name.ParseReference(strings.TrimPrefix(srv.URL, "http://") + "/node-resized/node-resized:" + imageTag(testVersion))
	if err != nil {
		t.Fatal(err)
	}
	top, err := layout.ImageIndexFromPath(res.layout)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || !tm.Manifests[0].MediaType.IsIndex() {
		t.Fatalf("index.json: %d entries, the first a %s; crane push wants one index", len(tm.Manifests), tm.Manifests[0].MediaType)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	pulled, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := pulled.Digest(); d.String() != res.digest {
		t.Errorf("the registry's digest %s, built %s", d, res.digest)
	}
	for _, a := range allArches {
		img, err := remote.Image(ref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: a}))
		if err != nil {
			t.Fatalf("pull linux/%s: %v", a, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != a {
			t.Errorf("pulled linux/%s: its config says %s", a, cf.Architecture)
		}
	}
	t.Logf("pushed to and pulled from %s: %s", ref, res.digest)
}

func TestImageTag(t *testing.T) {
	for version, want := range map[string]string{
		"v1.2.3":                  "1.2.3",
		"v1.2.3-rc.1":             "1.2.3-rc.1",
		"v1.2.3-4-gabc1234":       "1.2.3-4-gabc1234",
		"v1.2.3-4-gabc1234-dirty": "1.2.3-4-gabc1234-dirty",
		"abc1234":                 "abc1234",
		"abc1234-dirty":           "abc1234-dirty",
		"dev":                     "dev",
		"vx":                      "vx",
	} {
		if got := imageTag(version); got != want || !validTag(got) {
			t.Errorf("imageTag(%q) = %q (valid %v), want %q", version, got, validTag(got), want)
		}
	}
	for _, bad := range []string{"", ".x", "-x", "a+b", "a~b", "a/b", strings.Repeat("a", 129)} {
		if validTag(bad) {
			t.Errorf("validTag(%q) = true", bad)
		}
	}
	var stderr bytes.Buffer
	for _, c := range []struct {
		args  []string
		epoch string
		want  string
	}{
		{[]string{"-revision", "x"}, "0", "-version and -revision are required"},
		{[]string{"-version", "v1", "-revision", "x"}, "", "SOURCE_DATE_EPOCH is not set"},
		{[]string{"-version", "v1", "-revision", "x"}, "yesterday", "want seconds since 1970"},
		{[]string{"-version", "v1", "-revision", "x", "-tag", "a+b"}, "0", `tag "a+b"`},
		{[]string{"-version", "v1", "-revision", "x", "-arches", ","}, "0", "names no architecture"},
	} {
		if _, err := parseFlags(c.args, c.epoch, &stderr); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v with SOURCE_DATE_EPOCH=%q: %v, want %q", c.args, c.epoch, err, c.want)
		}
	}
	o, err := parseFlags([]string{"-version", "v1.2.3", "-revision", "x", "-arches", "s390x,amd64 amd64"}, "1767225600", &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.tag != "1.2.3" || !reflect.DeepEqual(o.arches, []string{"s390x", "amd64"}) || o.created.Format(time.RFC3339) != "2026-01-01T00:00:00Z" {
		t.Errorf("parsed %+v", o)
	}
}
