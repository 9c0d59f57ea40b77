package kubelet

import (
	"bytes"
	"encoding/json"
)

// mergePatch applies an RFC 7386 JSON merge patch, as the kubelet does for
// each drop-in file (jsonpatch.MergePatch): objects merge key by key, null
// deletes a key, anything else (lists included) replaces.
func mergePatch(doc, patch []byte) ([]byte, error) {
	d, err := decodeJSON(doc)
	if err != nil {
		return nil, err
	}
	p, err := decodeJSON(patch)
	if err != nil {
		return nil, err
	}
	return json.Marshal(mergeValue(d, p))
}

// decodeJSON decodes keeping numbers exact.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

func mergeValue(doc, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	dm, ok := doc.(map[string]any)
	if !ok {
		dm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(dm, k)
			continue
		}
		dm[k] = mergeValue(dm[k], v)
	}
	return dm
}
