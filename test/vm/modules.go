package vm

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultModules are the modules the guest loads when InitramfsConfig.Modules
// is nil: virtio_pci and virtio_console carry the command agent,
// virtio_balloon and virtio_mem let tests add those devices too. Modules the
// kernel has built in are skipped; dependencies are added.
var DefaultModules = []string{"virtio_pci", "virtio_console", "virtio_balloon", "virtio_mem"}

// kmod is one loadable module file.
type kmod struct {
	Name string // normalised: '-' replaced by '_'
	Path string // absolute path on the host
}

// moduleIndex knows the modules of one kernel tree.
type moduleIndex struct {
	dir     string
	builtin map[string]bool
	files   map[string]string   // name -> path relative to dir
	deps    map[string][]string // name -> dependency names, from modules.dep if present
}

func modName(s string) string {
	s = filepath.Base(s)
	for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		if strings.HasSuffix(s, ext) {
			s = strings.TrimSuffix(s, ext)
			break
		}
	}
	return strings.ReplaceAll(s, "-", "_")
}

func loadModuleIndex(dir string) (*moduleIndex, error) {
	ix := &moduleIndex{dir: dir, builtin: map[string]bool{}, files: map[string]string{}}
	if b, err := os.ReadFile(filepath.Join(dir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			ix.builtin[modName(l)] = true
		}
	}
	err := filepath.WalkDir(filepath.Join(dir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.Contains(d.Name(), ".ko") {
			rel, _ := filepath.Rel(dir, p)
			ix.files[modName(d.Name())] = rel
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index modules in %s: %w", dir, err)
	}
	// Debian ships no modules.dep in the package (depmod runs at install);
	// use it when present, else read each module's .modinfo.
	if f, err := os.Open(filepath.Join(dir, "modules.dep")); err == nil {
		defer f.Close()
		ix.deps = map[string][]string{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			mod, deps, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			var names []string
			for _, d := range strings.Fields(deps) {
				names = append(names, modName(d))
			}
			ix.deps[modName(mod)] = names
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", f.Name(), err)
		}
	}
	return ix, nil
}

// dependsOf returns the direct dependencies of a module.
func (ix *moduleIndex) dependsOf(name string) ([]string, error) {
	if ix.deps != nil {
		return ix.deps[name], nil
	}
	info, err := readModinfo(filepath.Join(ix.dir, ix.files[name]))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range strings.Split(info["depends"], ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, modName(d))
		}
	}
	return out, nil
}

// resolve returns the module files to load, dependencies first, and the
// requested names that the kernel has built in.
func (ix *moduleIndex) resolve(names []string) (load []kmod, builtin []string, err error) {
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle: %s", strings.Join(append(chain, name), " -> "))
		case 2:
			return nil
		}
		if ix.builtin[name] {
			state[name] = 2
			if len(chain) == 0 {
				builtin = append(builtin, name)
			}
			return nil
		}
		rel, ok := ix.files[name]
		if !ok {
			return fmt.Errorf("module %s: not built in and not found under %s", name, ix.dir)
		}
		if !strings.HasSuffix(rel, ".ko") {
			return fmt.Errorf("module %s: %s is compressed; only plain .ko files are supported", name, rel)
		}
		state[name] = 1
		deps, err := ix.dependsOf(name)
		if err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
		for _, d := range deps {
			if err := visit(d, append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		load = append(load, kmod{Name: name, Path: filepath.Join(ix.dir, rel)})
		return nil
	}
	for _, n := range names {
		if err := visit(modName(n), nil); err != nil {
			return nil, nil, err
		}
	}
	return load, builtin, nil
}

// readModinfo returns the key=value pairs of a module's .modinfo section.
// Keys that repeat (alias, parm) keep their last value.
func readModinfo(path string) (map[string]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read modinfo of %s: %w", path, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("read modinfo of %s: no .modinfo section", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read modinfo of %s: %w", path, err)
	}
	return parseModinfo(data), nil
}

func parseModinfo(data []byte) map[string]string {
	out := map[string]string{}
	for _, kv := range bytes.Split(data, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if ok && k != "" {
			out[k] = v
		}
	}
	return out
}
