package main

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
)

// elfArch is what the ELF header of a Go linux/<arch> binary says.
type elfArch struct {
	machine elf.Machine
	order   binary.ByteOrder
}

// elfArches are the architectures the packages are built for, in Go's
// names (nfpm's too: it names them for each package format).
var elfArches = map[string]elfArch{
	"amd64":   {elf.EM_X86_64, binary.LittleEndian},
	"arm64":   {elf.EM_AARCH64, binary.LittleEndian},
	"ppc64le": {elf.EM_PPC64, binary.LittleEndian},
	"s390x":   {elf.EM_S390, binary.BigEndian},
}

func supportedArches() []string {
	var a []string
	for k := range elfArches {
		a = append(a, k)
	}
	slices.Sort(a)
	return a
}

// packagedBinaries are the files of ${BIN} the configuration ships.
var packagedBinaries = []string{"node-resized", "node-resizectl"}

// checkBinaries fails unless each binary in dir is a 64-bit ELF executable
// of arch, so that no package holds another architecture's binaries.
func checkBinaries(dir, arch string) error {
	want := elfArches[arch]
	for _, name := range packagedBinaries {
		path := filepath.Join(dir, name)
		f, err := elf.Open(path)
		if err != nil {
			return fmt.Errorf("the %s binaries: %w", arch, err)
		}
		h := f.FileHeader
		f.Close()
		if h.Class != elf.ELFCLASS64 || h.Machine != want.machine || h.ByteOrder != want.order || h.Type != elf.ET_EXEC {
			return fmt.Errorf("%s: %v %v %v %v, want an %v %v %v executable for %s: build it with GOARCH=%s",
				path, h.Class, h.Machine, h.ByteOrder, h.Type, elf.ELFCLASS64, want.machine, want.order, arch, arch)
		}
	}
	return nil
}
