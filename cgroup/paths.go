package cgroup

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// Cgroup drivers, spelled as the KubeletConfiguration's cgroupDriver.
const (
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
)

// QoS classes, spelled as the kubelet names their cgroups (the lower-cased
// v1.PodQOSClass).
const (
	QOSGuaranteed = "guaranteed"
	QOSBurstable  = "burstable"
	QOSBestEffort = "besteffort"
)

const (
	kubepodsName   = "kubepods" // the kubelet's defaultNodeAllocatableCgroupName
	podPrefix      = "pod"      // the kubelet's podCgroupNamePrefix
	systemdSuffix  = ".slice"
	rootSystemdDir = "-.slice"
)

// Group is one of the kubelet's cgroups. It is a plain value.
type Group struct {
	// Path is the cgroup's path inside the hierarchy, as the kubelet's
	// cgroup manager names it ("/kubepods/burstable",
	// "/kubepods.slice/kubepods-burstable.slice").
	Path string `json:"path"`
	// Dir is the cgroup's directory: the root joined with Path.
	Dir string `json:"dir"`
	// Unit and Parent are, with the systemd driver, the slice unit and its
	// parent slice exactly as the kubelet hands them to libcontainer
	// ("kubepods-burstable.slice" in "kubepods.slice"; "kubepods.slice" in
	// "-.slice").
	Unit   string `json:"unit,omitempty"`
	Parent string `json:"parent,omitempty"`
}

// Paths are the kubelet's pod-level cgroups for one cgroup root, driver and
// kubelet cgroupRoot. It is a plain value.
type Paths struct {
	Root       string `json:"root"`
	Driver     string `json:"driver"`
	CgroupRoot string `json:"cgroupRoot"`
	Kubepods   Group  `json:"kubepods"`
	Burstable  Group  `json:"burstable"`
	BestEffort Group  `json:"besteffort"`
}

// ResolvePaths names the kubepods cgroups as the kubelet does
// (NodeAllocatableRoot, the QoS container manager): the kubelet's
// cgroupRoot (KubeletConfiguration cgroupRoot, "/" when empty) is split into
// components, "kubepods" is appended, and the result is spelled for the
// driver. With cgroupfs that is "<cgroupRoot>/kubepods/burstable"; with
// systemd every component becomes part of a slice name, "-" escaped to "_"
// ("/kubepods.slice/kubepods-burstable.slice", and for a cgroupRoot of
// "/node" "/node.slice/node-kubepods.slice/node-kubepods-burstable.slice").
// root is the cgroup mount point ("" means DefaultRoot); driver "" means
// cgroupfs, the kubelet's default.
func ResolvePaths(root, driver, cgroupRoot string) (Paths, error) {
	if root == "" {
		root = DefaultRoot
	}
	switch driver {
	case "":
		driver = DriverCgroupfs
	case DriverCgroupfs, DriverSystemd:
	default:
		return Paths{}, fmt.Errorf("unknown cgroup driver %q (want %q or %q)", driver, DriverCgroupfs, DriverSystemd)
	}
	if cgroupRoot == "" {
		cgroupRoot = "/"
	}
	base := parseCgroupfsName(cgroupRoot)
	kube := append(base, kubepodsName)
	p := Paths{Root: root, Driver: driver, CgroupRoot: cgroupRoot}
	var err error
	if p.Kubepods, err = p.group(kube); err != nil {
		return Paths{}, err
	}
	if p.Burstable, err = p.group(appendName(kube, QOSBurstable)); err != nil {
		return Paths{}, err
	}
	if p.BestEffort, err = p.group(appendName(kube, QOSBestEffort)); err != nil {
		return Paths{}, err
	}
	return p, nil
}

// Pod names the cgroup of one pod, as the kubelet's pod container manager
// does: "pod<uid>" under the QoS cgroup, and directly under kubepods for a
// Guaranteed pod. qos is a QoS class name in any case ("Burstable",
// "besteffort").
func (p Paths) Pod(podUID, qos string) (Group, error) {
	if podUID == "" || strings.ContainsAny(podUID, "/_") || podUID == "." || podUID == ".." {
		return Group{}, fmt.Errorf("invalid pod UID %q", podUID)
	}
	name := parseCgroupfsName(p.CgroupRoot)
	name = append(name, kubepodsName)
	switch q := strings.ToLower(qos); q {
	case QOSGuaranteed:
	case QOSBurstable, QOSBestEffort:
		name = append(name, q)
	default:
		return Group{}, fmt.Errorf("unknown QoS class %q (want %s, %s or %s)", qos, QOSGuaranteed, QOSBurstable, QOSBestEffort)
	}
	return p.group(append(name, podPrefix+podUID))
}

func appendName(name []string, c string) []string {
	return append(append([]string(nil), name...), c)
}

func (p Paths) group(name []string) (Group, error) {
	if p.Driver != DriverSystemd {
		cp := toCgroupfs(name)
		return Group{Path: cp, Dir: filepath.Join(p.Root, cp)}, nil
	}
	sp, err := toSystemd(name)
	if err != nil {
		return Group{}, err
	}
	dir, unit := path.Split(sp)
	parent := rootSystemdDir
	if dir != "/" {
		parent = path.Base(dir)
	}
	return Group{Path: sp, Dir: filepath.Join(p.Root, sp), Unit: unit, Parent: parent}, nil
}

// parseCgroupfsName splits a cgroupfs path into the kubelet's CgroupName
// components (ParseCgroupfsToCgroupName); "/" is the empty name. Empty
// components (a doubled or trailing slash) are dropped.
func parseCgroupfsName(p string) []string {
	var name []string
	for c := range strings.SplitSeq(p, "/") {
		if c != "" {
			name = append(name, c)
		}
	}
	return name
}

// toCgroupfs is the kubelet's CgroupName.ToCgroupfs.
func toCgroupfs(name []string) string {
	return "/" + path.Join(name...)
}

// toSystemd is the kubelet's CgroupName.ToSystemd: every component with
// "-" escaped to "_", joined by "-", as a slice expanded into its path.
func toSystemd(name []string) (string, error) {
	if len(name) == 0 {
		return "/", nil
	}
	parts := make([]string, len(name))
	for i, c := range name {
		parts[i] = strings.ReplaceAll(c, "-", "_")
	}
	return expandSlice(strings.Join(parts, "-") + systemdSuffix)
}

// expandSlice turns a slice unit name into its cgroup path as systemd does
// ("a-b-c.slice" lives at /a.slice/a-b.slice/a-b-c.slice).
func expandSlice(slice string) (string, error) {
	stem, ok := strings.CutSuffix(slice, systemdSuffix)
	if !ok || stem == "" || strings.Contains(slice, "/") {
		return "", fmt.Errorf("invalid slice name %q", slice)
	}
	if stem == "-" {
		return "/", nil
	}
	var b strings.Builder
	prefix := ""
	for c := range strings.SplitSeq(stem, "-") {
		if c == "" {
			return "", fmt.Errorf("invalid slice name %q", slice)
		}
		b.WriteString("/" + prefix + c + systemdSuffix)
		prefix += c + "-"
	}
	return b.String(), nil
}
