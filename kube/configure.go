package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/node-resized/node-resized/types"
)

// ConfigFieldManager is the field manager of the configured-capacity
// writes of NodeConfig.
const ConfigFieldManager = "node-resizectl"

// NodeConfig sets one Node's configured capacity and follows the Node
// while node-resized answers, for node-resizectl's resize. It is safe for
// concurrent use.
type NodeConfig struct {
	nodes dynamic.ResourceInterface
	name  string
	log   *slog.Logger
}

// ConnectNodeConfig builds a NodeConfig for the Node name from a kubeconfig
// (RestConfig's rules: the in-cluster config when path is empty, or absent
// inside a pod). The logger receives the watch's retried failures as
// warnings (nil: none).
func ConnectNodeConfig(kubeconfig, name string, log *slog.Logger) (*NodeConfig, error) {
	cfg, err := restConfig(kubeconfig, "point --kubeconfig at a readable kubeconfig; the kubelet's own is readable by root only")
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = ConfigFieldManager
	nodes, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create the Node client: %w", err)
	}
	return NewNodeConfig(nodes, name, log), nil
}

// NewNodeConfig returns a NodeConfig for the Node name that reads and
// writes it through nodes, as JSON (spec.configuredCapacity is kept where
// the API server serves it).
func NewNodeConfig(nodes dynamic.Interface, name string, log *slog.Logger) *NodeConfig {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &NodeConfig{nodes: nodes.Resource(corev1.SchemeGroupVersion.WithResource("nodes")), name: name, log: log}
}

// SetConfiguredCapacity makes raw (resource names to quantities, as
// written) the Node's configured capacity where the daemon reads it: in
// spec.configuredCapacity, which the daemon prefers, when the API server
// keeps that field; otherwise (no released API serves it, and the server
// drops it) in the annotation types.AnnotationConfiguredCapacity. It
// returns the Node as the write left it; its Source says where the value
// went. release asks for a planned release with it (the annotation
// types.AnnotationRelease, written in the same patch; false removes it):
// each request says whether it wants one.
func (c *NodeConfig) SetConfiguredCapacity(ctx context.Context, raw map[string]string, release bool) (types.NodeView, error) {
	if len(raw) == 0 {
		return types.NodeView{}, errors.New("set the configured capacity: no resources given (clear it instead)")
	}
	want := types.Configured{Present: true, Raw: maps.Clone(raw), Release: release}
	var rel any
	if release {
		rel = "true"
	}
	v, err := c.patch(ctx, map[string]any{
		"spec":     map[string]any{"configuredCapacity": raw},
		"metadata": map[string]any{"annotations": map[string]any{types.AnnotationRelease: rel}},
	})
	if err != nil {
		return types.NodeView{}, fmt.Errorf("set spec.configuredCapacity: %w", err)
	}
	if v.Source == types.SourceSpec {
		if v.Configured.Key() != want.Key() {
			return v, fmt.Errorf("set spec.configuredCapacity: the Node has %s, not %s", v.Configured.Key(), want.Key())
		}
		return v, nil
	}
	// The API server dropped the field it does not serve: the daemon reads
	// the annotation.
	b, err := json.Marshal(raw)
	if err != nil {
		return types.NodeView{}, fmt.Errorf("encode the configured capacity: %w", err)
	}
	v, err = c.patch(ctx, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		types.AnnotationConfiguredCapacity: string(b), types.AnnotationRelease: rel}}})
	if err != nil {
		return types.NodeView{}, fmt.Errorf("set the annotation %s: %w", types.AnnotationConfiguredCapacity, err)
	}
	if v.Source != types.SourceAnnotation || v.Configured.Key() != want.Key() {
		return v, fmt.Errorf("set the annotation %s: the Node has %s from %q afterwards", types.AnnotationConfiguredCapacity, v.Configured.Key(), v.Source)
	}
	return v, nil
}

// ClearConfiguredCapacity removes the Node's configured capacity, both
// spec.configuredCapacity and the annotation (and the release's), so that the node follows its
// hardware again. It returns the Node as the write left it.
func (c *NodeConfig) ClearConfiguredCapacity(ctx context.Context) (types.NodeView, error) {
	v, err := c.patch(ctx, map[string]any{
		"spec":     map[string]any{"configuredCapacity": nil},
		"metadata": map[string]any{"annotations": map[string]any{types.AnnotationConfiguredCapacity: nil, types.AnnotationRelease: nil}},
	})
	if err != nil {
		return types.NodeView{}, fmt.Errorf("clear the configured capacity: %w", err)
	}
	if v.Configured.Present {
		return v, fmt.Errorf("clear the configured capacity: the Node still has %s from %s", v.Configured.Key(), v.Source)
	}
	return v, nil
}

// patch sends a JSON merge patch of the Node and reads the answer. Fields
// the server does not serve are dropped without a warning
// (fieldValidation=Ignore): the answer says what was kept.
func (c *NodeConfig) patch(ctx context.Context, patch map[string]any) (types.NodeView, error) {
	b, err := json.Marshal(patch)
	if err != nil {
		return types.NodeView{}, fmt.Errorf("encode the patch: %w", err)
	}
	u, err := c.nodes.Patch(ctx, c.name, k8stypes.MergePatchType, b, metav1.PatchOptions{
		FieldManager: ConfigFieldManager, FieldValidation: metav1.FieldValidationIgnore,
	})
	if err != nil {
		return types.NodeView{}, fmt.Errorf("patch Node %s: %w", c.name, err)
	}
	return parseUnstructured(u)
}

// WatchNode calls f with the Node as it stands and again each time it
// changes, until f returns true or an error, or ctx ends (then ctx's error
// is returned, wrapped). It watches: client-go lists the Node and watches
// it from there, restarting the watch after failures and relisting when
// the watch's resourceVersion is too old, so a change may be seen only as
// its latest state. A deleted Node ends it with an error.
func (c *NodeConfig) WatchNode(ctx context.Context, f func(types.NodeView) (bool, error)) error {
	ctx = logr.NewContext(ctx, logr.FromSlogHandler(retriedHandler{c.log.Handler()}))
	_, err := watchtools.UntilWithSync(ctx, nodeListWatch(c.nodes, c.name, 200*time.Millisecond, c.log), &unstructured.Unstructured{}, nil,
		func(ev watch.Event) (bool, error) {
			if ev.Type == watch.Deleted {
				return false, fmt.Errorf("the Node %s was deleted", c.name)
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || u.GetName() != c.name {
				return false, nil
			}
			v, err := parseUnstructured(u)
			if err != nil {
				return false, err
			}
			return f(v)
		})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("watch Node %s: %w", c.name, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("watch Node %s: %w", c.name, err)
	}
	return nil
}
