package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrUnknownLayout is wrapped by the errors returned for a checkpoint that
// holds a field no layout node-resized knows has: most likely one a newer
// kubelet writes. The kubelet that wrote it may well accept it, but a
// rewrite would drop what node-resized does not understand, so such a
// file is never rewritten and the kubelet is not restarted into a changed
// machine: it is left as it is.
var ErrUnknownLayout = errors.New("checkpoint in a layout node-resized does not know")

// The union of the fields of every known layout, nested structures
// included: a file that decodes into these with unknown fields disallowed
// holds nothing a rewrite would lose.
type (
	cpuKnownFile struct {
		PolicyName    string                       `json:"policyName"`
		DefaultCPUSet string                       `json:"defaultCpuSet"`
		Entries       map[string]map[string]string `json:"entries"`
		PodEntries    map[string]cpuPodEntry       `json:"podEntries"`
		Checksum      uint64                       `json:"checksum"`
		Data          string                       `json:"data"`
		DataChecksum  uint64                       `json:"dataChecksum"`
	}
	memoryKnownFile struct {
		memoryV3Data
		Checksum     uint64 `json:"checksum"`
		Data         string `json:"data"`
		DataChecksum uint64 `json:"dataChecksum"`
	}
)

// knownFields checks that b, a checkpoint that is valid JSON, holds only
// fields of known layouts, at the top and in its data payload (dataInto, a
// pointer to the union of the payload's fields). It returns nil, or an
// error wrapping ErrUnknownLayout that names the field; a file that is not
// JSON is not its concern (nil): the layouts refuse it.
func knownFields(b []byte, top interface{ data() string }, dataInto any) error {
	if err := strictUnmarshal(b, top); err != nil {
		return err
	}
	if d := top.data(); d != "" && dataInto != nil {
		if err := strictUnmarshal([]byte(d), dataInto); err != nil {
			return fmt.Errorf("data: %w", err)
		}
	}
	return nil
}

func (f *cpuKnownFile) data() string    { return f.Data }
func (f *memoryKnownFile) data() string { return f.Data }

// strictUnmarshal decodes b into v with unknown fields disallowed. Only
// an unknown field is an error: the layouts judge everything else as the
// kubelet does.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("%w: field %s", ErrUnknownLayout, field)
	}
	return nil
}
