package kubelet

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/node-resized/node-resized/internal/capped"
	"github.com/node-resized/node-resized/kubelet/internal/cpulist"
	"github.com/node-resized/node-resized/resources"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/node-resized/node-resized/decide"
)

// DefaultPath is where kubeadm and most distributions put the kubelet's
// configuration file.
const DefaultPath = "/var/lib/kubelet/config.yaml"

const (
	apiVersion = "kubelet.config.k8s.io/v1beta1"
	kind       = "KubeletConfiguration"
	// dropInExt is the only extension the kubelet merges from --config-dir.
	dropInExt = ".conf"
	// maxFileSize caps a configuration file; real ones are a few KiB.
	maxFileSize = 4 << 20
)

// defaultEvictionHard is the kubelet's eviction.DefaultEvictionHard on Linux,
// applied when the configuration file sets no evictionHard at all.
var defaultEvictionHard = map[string]string{
	"memory.available":   "100Mi",
	"nodefs.available":   "10%",
	"nodefs.inodesFree":  "5%",
	"imagefs.available":  "15%",
	"imagefs.inodesFree": "5%",
}

// validSignals are the eviction signals the kubelet accepts in evictionHard.
var validSignals = map[string]bool{
	"memory.available":            true,
	"allocatableMemory.available": true,
	"nodefs.available":            true,
	"nodefs.inodesFree":           true,
	"imagefs.available":           true,
	"imagefs.inodesFree":          true,
	"containerfs.available":       true,
	"containerfs.inodesFree":      true,
	"pid.available":               true,
}

// Config is the part of the kubelet's configuration node-resized uses, after
// the drop-ins are merged and the kubelet's defaults applied. A Config is not
// modified after Load returns it: safe for concurrent reads.
type Config struct {
	// Path is the configuration file read ("" for Default), DropIns the
	// drop-in files merged over it, in the order merged.
	Path    string
	DropIns []string

	// As in the KubeletConfiguration, defaults applied.
	SystemReserved         map[string]string
	KubeReserved           map[string]string
	EvictionHard           map[string]string
	EnforceNodeAllocatable []string
	CgroupDriver           string // "cgroupfs" or "systemd"
	CgroupRoot             string // "/" when cgroupsPerQOS and unset
	CgroupsPerQOS          bool
	CPUManagerPolicy       string // "none" or "static"
	MemoryManagerPolicy    string
	TopologyManagerPolicy  string
	// ReservedSystemCPUs is the reservedSystemCPUs list as written, and
	// ReservedCPUs the CPU ids it names.
	ReservedSystemCPUs            string
	ReservedCPUs                  []int
	LocalStorageCapacityIsolation bool
	FailSwapOn                    bool

	// Reservations are SystemReserved, KubeReserved and EvictionHard parsed
	// the way the kubelet parses them, reservedSystemCPUs override applied.
	Reservations decide.Reservations

	// Warnings are things the kubelet tolerates but that look wrong (unknown
	// fields, skipped drop-in files).
	Warnings []string

	// Raw is the merged configuration with the defaults above applied.
	Raw *kubeletv1beta1.KubeletConfiguration
}

// Error is a problem with the kubelet's configuration. Path names the file
// (empty when the problem is not in one file), Field the offending field
// (empty when the file as a whole is at fault). It is not modified after Load
// returns it: safe for concurrent reads.
type Error struct {
	Path  string
	Field string
	Err   error
}

func (e *Error) Error() string {
	switch {
	case e.Path != "" && e.Field != "":
		return fmt.Sprintf("kubelet configuration %s: %s: %v", e.Path, e.Field, e.Err)
	case e.Path != "":
		return fmt.Sprintf("kubelet configuration %s: %v", e.Path, e.Err)
	case e.Field != "":
		return fmt.Sprintf("kubelet configuration: %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("kubelet configuration: %v", e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Option adjusts Load.
type Option func(*options)

type options struct {
	dropInDir string
}

// WithDropInDir merges the drop-in directory the kubelet was given with
// --config-dir: every *.conf file under it, in lexical order of path, each a
// JSON merge patch over what came before.
func WithDropInDir(dir string) Option {
	return func(o *options) { o.dropInDir = dir }
}

// Default returns the configuration of a kubelet whose configuration file
// sets nothing: no reservations, the default hard eviction thresholds
// (memory.available 100Mi, nodefs.available 10%), cgroupfs driver, cgroup
// root "/", node allocatable enforced on pods.
func Default() *Config {
	kc := &kubeletv1beta1.KubeletConfiguration{}
	setDefaults(kc)
	applyEvictionDefaults(kc)
	c, err := fromKubelet(kc, "")
	if err != nil {
		// The defaults always parse.
		panic(err)
	}
	return c
}

// Load reads the KubeletConfiguration at path and, with WithDropInDir, merges
// the drop-in directory over it, exactly as the kubelet does: the file is
// decoded (apiVersion kubelet.config.k8s.io/v1beta1, kind
// KubeletConfiguration; field names matched case-sensitively; unknown fields
// are tolerated with a warning, as the kubelet's lenient fallback does; a
// value of the wrong JSON type, such as an unquoted number in systemReserved,
// is refused, as the kubelet refuses it), defaulted, given the default
// evictionHard when it sets none, then each drop-in is merged and the result
// defaulted again. A missing file is an error that wraps fs.ErrNotExist, so a
// caller may fall back to Default.
func Load(path string, opts ...Option) (*Config, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if path == "" {
		return nil, &Error{Err: errors.New("no configuration file given (the kubelet's default is " + DefaultPath + ")")}
	}
	data, err := readFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &Error{Path: path, Err: fmt.Errorf("%w; pass --kubelet-config with the path the kubelet is started with (its --config flag)", err)}
		}
		return nil, &Error{Path: path, Err: err}
	}
	kc := &kubeletv1beta1.KubeletConfiguration{}
	warnings, err := decode(data, kc)
	if err != nil {
		var fe *Error
		if errors.As(err, &fe) {
			fe.Path = path
			return nil, fe
		}
		return nil, &Error{Path: path, Err: err}
	}
	for i, w := range warnings {
		warnings[i] = path + ": " + w
	}
	setDefaults(kc)
	applyEvictionDefaults(kc)

	var dropIns []string
	if o.dropInDir != "" {
		var skipped []string
		dropIns, skipped, err = mergeDropIns(kc, o.dropInDir)
		if err != nil {
			return nil, err
		}
		for _, s := range skipped {
			warnings = append(warnings, "skipped drop-in "+s+" (only *"+dropInExt+" files are merged)")
		}
	}
	c, err := fromKubelet(kc, path)
	if err != nil {
		return nil, err
	}
	c.DropIns = dropIns
	c.Warnings = warnings
	return c, nil
}

// readFile reads one configuration file, at most maxFileSize bytes; an
// empty file is an error.
func readFile(path string) ([]byte, error) {
	data, err := capped.ReadFile(path, maxFileSize)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, errors.New("the file is empty")
	}
	return data, nil
}

// checkKind insists on the one apiVersion and kind the kubelet reads.
func checkKind(data []byte) error {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return fmt.Errorf("not a YAML or JSON object: %w", err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return fmt.Errorf("missing apiVersion/kind: want apiVersion %s, kind %s", apiVersion, kind)
	}
	if tm.APIVersion != apiVersion || tm.Kind != kind {
		return fmt.Errorf("unsupported apiVersion/kind %s, %s: want apiVersion %s, kind %s", tm.APIVersion, tm.Kind, apiVersion, kind)
	}
	return nil
}

// decode decodes one configuration file into kc as the kubelet's codec
// does (DecodeKubeletConfiguration): YAML to JSON, then the JSON decoded
// case-sensitively into the v1beta1 type, strictly first and leniently when
// only the strict checks fail. What the strict checks refuse (unknown or
// duplicate fields) comes back as warnings. A value of the wrong JSON type,
// such as an unquoted number where the kubelet wants a string, is an error,
// as it is for the kubelet: sigs.k8s.io/yaml.Unmarshal would quietly turn
// the number into a string.
func decode(data []byte, kc *kubeletv1beta1.KubeletConfiguration) ([]string, error) {
	if err := checkKind(data); err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("failed to decode: %w", err)
	}
	var strictErrs []error
	if _, err := yaml.YAMLToJSONStrict(data); err != nil {
		strictErrs = append(strictErrs, err)
	}
	var strict kubeletv1beta1.KubeletConfiguration
	errs, err := kjson.UnmarshalStrict(js, &strict)
	if err != nil {
		// A fatal decoding error, not one of strictness: the kubelet
		// refuses the file.
		return nil, typeError(js, err)
	}
	strictErrs = append(strictErrs, errs...)
	if len(strictErrs) == 0 {
		*kc = strict
		return nil, nil
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, kc); err != nil {
		return nil, typeError(js, err)
	}
	msgs := make([]string, len(strictErrs))
	for i, e := range strictErrs {
		msgs[i] = e.Error()
	}
	return []string{"decoded leniently: " + strings.Join(msgs, "; ")}, nil
}

// typeError explains a fatal JSON decoding error of the document js. When a
// field whose values must be strings (systemReserved, kubeReserved,
// evictionHard…) holds something else, such as a number written unquoted in
// YAML, the error is an *Error naming the field and the key; otherwise err
// is returned as "failed to decode".
func typeError(js []byte, err error) error {
	doc, derr := decodeJSON(js)
	if m, ok := doc.(map[string]any); ok && derr == nil {
		for _, field := range stringMapFields() {
			values, ok := m[field].(map[string]any)
			if !ok {
				continue
			}
			keys := make([]string, 0, len(values))
			for k := range values {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				var what string
				switch v := values[k].(type) {
				case string, nil:
					continue
				case json.Number:
					what = fmt.Sprintf("the number %s must be a string (write it quoted: %q)", v, v.String())
				case bool:
					what = fmt.Sprintf("the boolean %t must be a string (write it quoted: \"%t\")", v, v)
				case []any:
					what = "a list must be a string"
				default:
					what = "an object must be a string"
				}
				return &Error{Field: fmt.Sprintf("%s[%q]", field, k), Err: fmt.Errorf("%s; the kubelet refuses the file: %w", what, err)}
			}
		}
	}
	return fmt.Errorf("failed to decode: %w", err)
}

// stringMapFields lists the JSON names of the KubeletConfiguration fields
// that are maps of strings, sorted.
func stringMapFields() []string {
	var fields []string
	t := reflect.TypeFor[kubeletv1beta1.KubeletConfiguration]()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Type.Kind() != reflect.Map || f.Type.Key().Kind() != reflect.String || f.Type.Elem().Kind() != reflect.String {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields = append(fields, name)
		}
	}
	sort.Strings(fields)
	return fields
}

// mergeDropIns merges the drop-in directory over kc, as the kubelet's
// mergeKubeletConfigurations does.
func mergeDropIns(kc *kubeletv1beta1.KubeletConfiguration, dir string) (merged, skipped []string, err error) {
	base, err := json.Marshal(kc)
	if err != nil {
		return nil, nil, &Error{Path: dir, Err: fmt.Errorf("failed to marshal base config: %w", err)}
	}
	var files []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if filepath.Ext(d.Name()) != dropInExt {
			skipped = append(skipped, path)
			return nil
		}
		files = append(files, path)
		return nil
	})
	if err != nil {
		return nil, nil, &Error{Path: dir, Err: fmt.Errorf("failed to walk the drop-in directory: %w", err)}
	}
	// WalkDir visits each directory in lexical order, depth first, as the
	// kubelet's walk does.
	for _, path := range files {
		data, err := readFile(path)
		if err != nil {
			return nil, nil, &Error{Path: path, Err: err}
		}
		if err := checkKind(data); err != nil {
			return nil, nil, &Error{Path: path, Err: err}
		}
		patch, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, nil, &Error{Path: path, Err: fmt.Errorf("failed to decode: %w", err)}
		}
		if base, err = mergePatch(base, patch); err != nil {
			return nil, nil, &Error{Path: path, Err: fmt.Errorf("failed to merge: %w", err)}
		}
	}
	out := kubeletv1beta1.KubeletConfiguration{}
	if err := json.Unmarshal(base, &out); err != nil {
		var fe *Error
		if errors.As(typeError(base, err), &fe) {
			fe.Path = dir
			return nil, nil, fe
		}
		return nil, nil, &Error{Path: dir, Err: fmt.Errorf("failed to decode the merged configuration: %w", err)}
	}
	setDefaults(&out)
	*kc = out
	return files, skipped, nil
}

// setDefaults applies the kubelet's v1beta1 defaults for the fields read here
// (SetDefaults_KubeletConfiguration). evictionHard has none at this level.
func setDefaults(kc *kubeletv1beta1.KubeletConfiguration) {
	t, f := true, false
	if kc.CgroupsPerQOS == nil {
		kc.CgroupsPerQOS = &t
	}
	if kc.CgroupDriver == "" {
		kc.CgroupDriver = "cgroupfs"
	}
	if kc.CPUManagerPolicy == "" {
		kc.CPUManagerPolicy = "none"
	}
	if kc.MemoryManagerPolicy == "" {
		kc.MemoryManagerPolicy = kubeletv1beta1.NoneMemoryManagerPolicy
	}
	if kc.TopologyManagerPolicy == "" {
		kc.TopologyManagerPolicy = kubeletv1beta1.NoneTopologyManagerPolicy
	}
	if kc.MergeDefaultEvictionSettings == nil {
		kc.MergeDefaultEvictionSettings = &f
	}
	if kc.EnforceNodeAllocatable == nil {
		kc.EnforceNodeAllocatable = []string{"pods"}
	}
	if kc.LocalStorageCapacityIsolation == nil {
		kc.LocalStorageCapacityIsolation = &t
	}
	if kc.FailSwapOn == nil {
		kc.FailSwapOn = &t
	}
}

// applyEvictionDefaults is what the kubelet's loadConfigFile does after
// decoding the main file (not the drop-ins): no evictionHard at all means the
// defaults; mergeDefaultEvictionSettings fills in the missing signals.
func applyEvictionDefaults(kc *kubeletv1beta1.KubeletConfiguration) {
	if kc.EvictionHard == nil {
		kc.EvictionHard = make(map[string]string, len(defaultEvictionHard))
		for k, v := range defaultEvictionHard {
			kc.EvictionHard[k] = v
		}
		return
	}
	if kc.MergeDefaultEvictionSettings != nil && *kc.MergeDefaultEvictionSettings {
		for k, v := range defaultEvictionHard {
			if _, ok := kc.EvictionHard[k]; !ok {
				kc.EvictionHard[k] = v
			}
		}
	}
}

// fromKubelet extracts and parses what node-resized needs.
func fromKubelet(kc *kubeletv1beta1.KubeletConfiguration, path string) (*Config, error) {
	c := &Config{
		Path:                          path,
		SystemReserved:                copyMap(kc.SystemReserved),
		KubeReserved:                  copyMap(kc.KubeReserved),
		EvictionHard:                  copyMap(kc.EvictionHard),
		EnforceNodeAllocatable:        append([]string(nil), kc.EnforceNodeAllocatable...),
		CgroupDriver:                  kc.CgroupDriver,
		CgroupRoot:                    kc.CgroupRoot,
		CgroupsPerQOS:                 *kc.CgroupsPerQOS,
		CPUManagerPolicy:              kc.CPUManagerPolicy,
		MemoryManagerPolicy:           kc.MemoryManagerPolicy,
		TopologyManagerPolicy:         kc.TopologyManagerPolicy,
		ReservedSystemCPUs:            kc.ReservedSystemCPUs,
		LocalStorageCapacityIsolation: *kc.LocalStorageCapacityIsolation,
		FailSwapOn:                    *kc.FailSwapOn,
		Raw:                           kc,
	}
	if c.CgroupsPerQOS && c.CgroupRoot == "" {
		c.CgroupRoot = "/" // as the kubelet's run() does
	}
	fieldErr := func(field string, err error) error { return &Error{Path: path, Field: field, Err: err} }

	ids, err := cpulist.Parse(kc.ReservedSystemCPUs)
	if err != nil {
		return nil, fieldErr("reservedSystemCPUs", fmt.Errorf("unable to parse %q: %w", kc.ReservedSystemCPUs, err))
	}
	c.ReservedCPUs = ids

	sys, kube := copyMap(kc.SystemReserved), copyMap(kc.KubeReserved)
	if len(ids) > 0 {
		// The kubelet's reserved-cpus override: the reserved CPUs become
		// the whole cpu reservation.
		delete(kube, resources.CPU)
		if sys == nil {
			sys = map[string]string{}
		}
		sys[resources.CPU] = strconv.Itoa(len(ids))
	}
	if c.Reservations.SystemReserved, c.Reservations.SystemReservedNanos, err = parseReserved(sys); err != nil {
		return nil, fieldErr("systemReserved", err)
	}
	if c.Reservations.KubeReserved, c.Reservations.KubeReservedNanos, err = parseReserved(kube); err != nil {
		return nil, fieldErr("kubeReserved", err)
	}
	for _, signal := range sortedKeys(kc.EvictionHard) {
		val := kc.EvictionHard[signal]
		field := fmt.Sprintf("evictionHard[%q]", signal)
		if !validSignals[signal] {
			return nil, fieldErr(field, fmt.Errorf("unsupported eviction signal %s", signal))
		}
		th, ok, err := decide.ParseThreshold(val)
		if err != nil {
			return nil, fieldErr(field, err)
		}
		if !ok {
			continue
		}
		switch signal {
		case "memory.available":
			c.Reservations.MemoryAvailable = th
		case "nodefs.available":
			c.Reservations.NodeFsAvailable = th
		}
	}
	pods := false
	for _, k := range kc.EnforceNodeAllocatable {
		if k == "pods" {
			pods = true
		}
	}
	c.Reservations.PodsNotEnforced = !(c.CgroupsPerQOS && pods)
	return c, nil
}

// parseReserved parses a systemReserved or kubeReserved map exactly: whole
// units, and the fractions of a unit in nanos (nil when every amount is
// whole).
func parseReserved(m map[string]string) (whole resources.List, nanos map[string]int64, err error) {
	if len(m) == 0 {
		return nil, nil, nil
	}
	whole = resources.List{}
	for _, k := range sortedKeys(m) {
		w, n, err := decide.ParseReservationExact(k, m[k])
		if err != nil {
			return nil, nil, err
		}
		whole[k] = w
		if n != 0 {
			if nanos == nil {
				nanos = map[string]int64{}
			}
			nanos[k] = n
		}
	}
	return whole, nanos, nil
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ReservedMemory returns the configuration's reservedMemory as
// checkpoint.PlanMemoryManager takes it.
func (c *Config) ReservedMemory() (map[int]map[string]uint64, error) {
	out := map[int]map[string]uint64{}
	if c.Raw == nil {
		return out, nil
	}
	for _, r := range c.Raw.ReservedMemory {
		for name, q := range r.Limits {
			v, ok := q.AsInt64()
			if !ok || v < 0 {
				return nil, fmt.Errorf("reservedMemory of NUMA node %d: %s %s is not a byte count", r.NumaNode, name, q.String())
			}
			if out[int(r.NumaNode)] == nil {
				out[int(r.NumaNode)] = map[string]uint64{}
			}
			out[int(r.NumaNode)][string(name)] += uint64(v)
		}
	}
	return out, nil
}
