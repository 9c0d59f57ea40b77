//go:build linux

package kubeletparity

// The kubelet's configuration pipeline, run for real.
//
// cmd/kubelet/app's loadConfigFile and mergeKubeletConfigurations (the
// --config-dir drop-in merge) are unexported, but the exported
// app.NewKubeletCommand runs them: it parses the flags, loads the --config
// file, merges --config-dir over it, re-applies the command-line flags,
// applies its logging settings, logs the effective configuration (the
// "Effective KubeletConfiguration" record, v1beta1 YAML) and only then
// validates it. kubeletEffectiveConfig runs that command with two flags that
// validation always refuses, so the command returns right after logging the
// configuration, before it builds anything or touches the node (everything
// it did until then is parsing and process-local settings), and reads the
// configuration back from the log record.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	sigsyaml "sigs.k8s.io/yaml"

	"k8s.io/kubernetes/cmd/kubelet/app"
	kubeletconfiginternal "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
	kubeletconfigvalidation "k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	"k8s.io/kubernetes/pkg/kubelet/kubeletconfig/util/codec"
)

// stopFlags are two command-line settings that the kubelet's
// ValidateKubeletConfiguration refuses whatever the file says (flags take
// precedence over the file): the command cannot get past validation. Two,
// so that neither alone has to be relied on.
var stopFlags = []string{
	"--node-status-max-images=-7", // must be -1 or greater
	"--healthz-port=70000",        // must be between 1 and 65535 (or 0)
}

// stopMessages are what the validation errors for stopFlags contain.
var stopMessages = []string{"nodeStatusMaxImages", "healthzPort"}

// The kubelet command sets process-wide state (feature gates, logging):
// one run at a time.
var commandMu sync.Mutex

// effective is the outcome of one kubelet command run.
type effective struct {
	// Config is the configuration the kubelet would run with, in the
	// internal type; nil when LoadErr is set.
	Config *kubeletconfiginternal.KubeletConfiguration
	// Invalid is what the kubelet's validation finds wrong in Config, the
	// stop flags' own errors aside; the kubelet would refuse to start.
	Invalid error
	// LoadErr is set when the kubelet refuses the files themselves.
	LoadErr error
}

// kubeletEffectiveConfig runs `kubelet --config=configFile
// [--config-dir=dropInDir]` up to its validation. err reports a failure of
// the harness, not of the configuration.
func kubeletEffectiveConfig(configFile, dropInDir string) (eff effective, err error) {
	commandMu.Lock()
	defer commandMu.Unlock()

	// The command applies its logging configuration on every run; the
	// configuration is the same each time, so a second application is a
	// no-op instead of an error.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged

	// The command calls logs.InitLogs, which turns contextual logging off,
	// just before it fetches the logger it logs the configuration with:
	// that logger is klog's global one, captured at that moment. Make it
	// ours, marked contextual so that klog hands it out as is.
	sink := &captureSink{}
	klog.SetLoggerWithOptions(logr.New(sink), klog.ContextualLogger(true))
	defer klog.ClearLogger()
	cmd := app.NewKubeletCommand(klog.NewContext(context.Background(), logr.New(sink)))
	args := []string{"--config=" + configFile}
	if dropInDir != "" {
		args = append(args, "--config-dir="+dropInDir)
	}
	args = append(args, stopFlags...)
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SilenceErrors = true
	// The kubelet's flag set warns on stderr that the stop flags are
	// deprecated (they belong in the file); keep that out of the test log.
	runErr := withStderr(io.Discard, cmd.Execute)

	switch {
	case runErr == nil:
		// Cannot happen: validation refuses stopFlags. Had it passed, the
		// kubelet would have run and returned only when stopped.
		return eff, errors.New("the kubelet command returned no error: stop flags ineffective")
	case strings.HasPrefix(runErr.Error(), "failed to load kubelet config file"),
		strings.HasPrefix(runErr.Error(), "failed to merge kubelet configs"):
		eff.LoadErr = runErr
		return eff, nil
	}
	for _, m := range stopMessages {
		if !strings.Contains(runErr.Error(), m) {
			return eff, fmt.Errorf("the kubelet command stopped for another reason than the stop flags: %w", runErr)
		}
	}
	sink.mu.Lock()
	logged := sink.config
	sink.mu.Unlock()
	if logged == "" {
		return eff, fmt.Errorf("the kubelet command logged no effective configuration (%v)", runErr)
	}

	// The logged configuration is the v1beta1 YAML of the effective
	// configuration; decode it with the kubelet's own codecs.
	_, codecs, err := kubeletscheme.NewSchemeAndCodecs()
	if err != nil {
		return eff, err
	}
	kc, err := codec.DecodeKubeletConfiguration(context.Background(), codecs, []byte(logged))
	if err != nil {
		return eff, fmt.Errorf("decoding the logged effective configuration: %w", err)
	}
	// The round trip through v1beta1 loses one value that matters here:
	// enforceNodeAllocatable is omitempty, so an explicit empty list (no
	// enforcement) is not logged and decodes to the default ["pods"]. The
	// kubelet's defaulting never leaves the list empty otherwise, so a
	// missing key means it was empty.
	var keys map[string]any
	if err := sigsyaml.Unmarshal([]byte(logged), &keys); err != nil {
		return eff, fmt.Errorf("decoding the logged effective configuration: %w", err)
	}
	if _, ok := keys["enforceNodeAllocatable"]; !ok {
		kc.EnforceNodeAllocatable = []string{}
	}
	eff.Config = kc

	// Validate it as the kubelet does, minus the stop flags and the one
	// check that looks at this machine rather than the configuration
	// (failCgroupV1 refuses hosts on cgroup v1).
	valid := kc.DeepCopy()
	valid.NodeStatusMaxImages = -1
	valid.HealthzPort = 0
	valid.FailCgroupV1 = false
	eff.Invalid = kubeletconfigvalidation.ValidateKubeletConfiguration(valid, utilfeature.DefaultFeatureGate)
	return eff, nil
}

// withStderr runs f with os.Stderr sent to w.
func withStderr(w io.Writer, f func() error) error {
	r, pw, err := os.Pipe()
	if err != nil {
		return f()
	}
	saved := os.Stderr
	os.Stderr = pw
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(w, r)
		close(done)
	}()
	defer func() {
		os.Stderr = saved
		pw.Close()
		<-done
		r.Close()
	}()
	return f()
}

// captureSink is a logr.LogSink that keeps the kubelet's "Effective
// KubeletConfiguration" record and drops everything else.
type captureSink struct {
	mu     sync.Mutex
	config string
}

func (s *captureSink) Init(logr.RuntimeInfo) {}
func (s *captureSink) Enabled(int) bool      { return true }
func (s *captureSink) Error(error, string, ...any) {
}
func (s *captureSink) WithValues(...any) logr.LogSink { return s }
func (s *captureSink) WithName(string) logr.LogSink   { return s }

func (s *captureSink) Info(_ int, msg string, kv ...any) {
	if msg != "Effective KubeletConfiguration" {
		return
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if k, _ := kv[i].(string); k == "config" {
			if v, ok := kv[i+1].(string); ok {
				s.mu.Lock()
				s.config = v
				s.mu.Unlock()
			}
		}
	}
}
