// Command nfpm-pack builds the node-resized deb and rpm packages with nfpm's
// Go API from packaging/nfpm.yaml, so that packaging needs no downloaded
// binary: `make package` runs it after `make build`.
//
// Usage:
//
//	nfpm-pack -version VERSION [-root DIR] [-config FILE] [-changelog FILE] [-arch LIST] [-bin DIR] [-help-bin DIR] [-out DIR] [-formats deb,rpm]
//	nfpm-pack -version VERSION -man DIR [-bin DIR | -help-bin DIR]
//
// VERSION is the version stamped into the binaries (git describe); the
// packages get the form of it that dpkg and rpm accept (see packageVersion).
// It writes one package per format and architecture (-arch, Go's names;
// nfpm names each as deb and rpm do: ppc64le is ppc64el in a deb, arm64
// aarch64 in an rpm), each holding the binaries of -bin with {arch}
// replaced by its architecture (make build-cross writes bin/linux_{arch}),
// after checking that they are ELF files of that architecture (arch.go).
// It prints the path of each package written.
//
// Before packaging it makes, in a temporary directory that the
// configuration names ${GEN}, what is made from other files: the manual
// pages node-resized.8.gz and node-resizectl.1.gz from the --help of the
// binaries in -help-bin, which must run on this machine (manpage.go; the
// same pages go into every architecture's packages), and the deb's
// changelog.gz and the rpm's changelog from -changelog (changelog.go).
// With -man it only writes the two manual pages, uncompressed, into DIR.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

type options struct {
	root   string // the directory every other path is relative to
	config string // the nfpm configuration
	// bin holds the built binaries: ${BIN}, with {arch} in it replaced by
	// each of arches (Go's names, which are nfpm's: ${ARCH}).
	bin    string
	arches []string
	// helpBin holds binaries that run here, for the manual pages.
	helpBin string
	out     string   // where the packages go
	version string   // as stamped into the binaries, e.g. v1.2.3-4-gabc1234
	formats []string // nfpm packager names
	// changelog is packaging/changelog.yml; man, when set, is where -man
	// writes the manual pages (and nothing is packaged).
	changelog string
	man       string
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "nfpm-pack:", err)
		}
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	var o options
	var formats, arches string
	fs := flag.NewFlagSet("nfpm-pack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.root, "root", ".", "the repository root; the other paths and those in the configuration are relative to it")
	fs.StringVar(&o.config, "config", "packaging/nfpm.yaml", "the nfpm configuration")
	fs.StringVar(&o.bin, "bin", "bin", "the directory of the built binaries (${BIN} in the configuration); {arch} in it stands for each architecture, as in bin/linux_{arch}")
	fs.StringVar(&arches, "arch", runtime.GOARCH, "comma-separated architectures to package, in Go's names: "+strings.Join(supportedArches(), ", "))
	fs.StringVar(&o.helpBin, "help-bin", "", "the directory of binaries that run on this machine, whose --help makes the manual pages (default: -bin for "+runtime.GOARCH+")")
	fs.StringVar(&o.out, "out", "dist", "where to write the packages")
	fs.StringVar(&o.version, "version", "", "the version stamped into the binaries (git describe --tags --always --dirty, or dev)")
	fs.StringVar(&formats, "formats", "deb,rpm", "comma-separated packagers")
	fs.StringVar(&o.changelog, "changelog", "packaging/changelog.yml", "the changelog, in nfpm's format, newest first")
	fs.StringVar(&o.man, "man", "", "only write the manual pages into this directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.version == "" {
		return errors.New("-version is required")
	}
	o.formats = strings.Split(formats, ",")
	o.arches = strings.Split(arches, ",")
	if o.helpBin == "" {
		o.helpBin = archBin(o.bin, runtime.GOARCH)
	}
	// nfpm reads the sources named in the configuration relative to the
	// working directory.
	if err := os.Chdir(o.root); err != nil {
		return fmt.Errorf("change to the repository root: %w", err)
	}
	if o.man != "" {
		return writeManPages(o)
	}
	for _, a := range o.arches {
		if _, ok := elfArches[a]; !ok {
			return fmt.Errorf("-arch: unknown architecture %q (known: %s)", a, strings.Join(supportedArches(), ", "))
		}
	}
	if len(o.arches) > 1 && !strings.Contains(o.bin, "{arch}") {
		return fmt.Errorf("-bin %s: packaging %d architectures needs {arch} in it, as in bin/linux_{arch}", o.bin, len(o.arches))
	}
	paths, err := pack(o)
	for _, p := range paths {
		fmt.Fprintln(stdout, p)
	}
	return err
}

// archBin is the directory of arch's binaries.
func archBin(bin, arch string) string { return strings.ReplaceAll(bin, "{arch}", arch) }

// pack writes one package per format and architecture into o.out and
// returns their paths, each architecture's deb and rpm in turn. Paths are
// relative to the working directory.
func pack(o options) ([]string, error) {
	version, err := packageVersion(o.version)
	if err != nil {
		return nil, err
	}
	for _, arch := range o.arches {
		if err := checkBinaries(archBin(o.bin, arch), arch); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, fmt.Errorf("create the output directory: %w", err)
	}
	gen, err := os.MkdirTemp(o.out, ".nfpm-pack-gen-")
	if err != nil {
		return nil, fmt.Errorf("create a directory for the generated files: %w", err)
	}
	defer os.RemoveAll(gen)
	envFor := func(arch string) func(string) string {
		return func(name string) string {
			switch name {
			case "VERSION":
				return version
			case "ARCH":
				return arch
			case "BIN":
				return archBin(o.bin, arch)
			case "GEN":
				return gen
			}
			return os.Getenv(name)
		}
	}
	if err := generate(o, version, gen, envFor(o.arches[0])); err != nil {
		return nil, err
	}
	// One goroutine per package: compression takes most of the time.
	n := len(o.arches) * len(o.formats)
	paths := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for a, arch := range o.arches {
		for f, format := range o.formats {
			i := a*len(o.formats) + f
			wg.Add(1)
			go func() {
				defer wg.Done()
				paths[i], errs[i] = packOne(o.config, format, o.out, gen, envFor(arch))
				if errs[i] != nil {
					errs[i] = fmt.Errorf("%s %s package: %w", arch, format, errs[i])
				}
			}()
		}
	}
	wg.Wait()
	var written []string
	for _, p := range paths {
		if p != "" {
			written = append(written, p)
		}
	}
	return written, errors.Join(errs...)
}

// generate writes into gen what the configuration takes from ${GEN}.
func generate(o options, version, gen string, env func(string) string) error {
	date, err := buildDate()
	if err != nil {
		return err
	}
	for _, p := range manPages(o.helpBin) {
		page, err := p.render(version, date)
		if err != nil {
			return fmt.Errorf("manual page %s(%s): %w", p.name, p.section, err)
		}
		z, err := gzipBest([]byte(page))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(gen, p.name+"."+p.section+".gz"), z, 0o644); err != nil {
			return fmt.Errorf("write the manual page %s: %w", p.name, err)
		}
	}
	cfg, err := nfpm.ParseFileWithEnvMapping(o.config, env)
	if err != nil {
		return fmt.Errorf("read %s: %w", o.config, err)
	}
	entries, err := changelog(o.changelog, version, cfg.Maintainer, date)
	if err != nil {
		return err
	}
	deb, err := debChangelog(cfg.Name, entries)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(gen, "changelog.gz"), deb, 0o644); err != nil {
		return fmt.Errorf("write the deb's changelog: %w", err)
	}
	release := cfg.Release
	if release == "" {
		release = "1" // nfpm's rpm default
	}
	return rpmChangelog(filepath.Join(gen, "changelog.rpm.yml"), entries, release)
}

// writeManPages is -man: the pages, uncompressed, for reading with man -l.
func writeManPages(o options) error {
	version, err := packageVersion(o.version)
	if err != nil {
		return err
	}
	date, err := buildDate()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.man, 0o755); err != nil {
		return err
	}
	for _, p := range manPages(o.helpBin) {
		page, err := p.render(version, date)
		if err != nil {
			return fmt.Errorf("manual page %s(%s): %w", p.name, p.section, err)
		}
		path := filepath.Join(o.man, p.name+"."+p.section)
		if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

func packOne(config, format, out, gen string, env func(string) string) (string, error) {
	// Parsed again for each format: the packagers change the contents they
	// are given.
	cfg, err := nfpm.ParseFileWithEnvMapping(config, env)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", config, err)
	}
	if err := cfg.Validate(); err != nil {
		return "", fmt.Errorf("check %s: %w", config, err)
	}
	info, err := cfg.Get(format)
	if err != nil {
		return "", fmt.Errorf("%s settings of %s: %w", format, config, err)
	}
	info = nfpm.WithDefaults(info)
	if format == "rpm" {
		// The rpm's %changelog; the deb's changelog.gz is a file of the
		// configuration (nfpm would name it changelog.Debian.gz, which is
		// a non-native package's name).
		info.Changelog = filepath.Join(gen, "changelog.rpm.yml")
	}
	packager, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	path := filepath.Join(out, packager.ConventionalFileName(info))
	info.Target = path

	// Written aside and renamed, so that a failure leaves no partial package.
	f, err := os.CreateTemp(out, ".nfpm-pack-*")
	if err != nil {
		return "", fmt.Errorf("create %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if err := packager.Package(info, f); err != nil {
		f.Close()
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}
