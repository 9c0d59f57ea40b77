package main

import (
	"errors"
	"strings"
)

// Where the node name came from (the slog field nodeNameSource, and
// /v1/status kubernetes.nodeNameSource).
const (
	nodeNameFlag        = "flag"
	nodeNameEnv         = "env"
	nodeNameKubeconfig  = "kubeconfig" // + the kind of identity, e.g. "kubeconfig client certificate"
	nodeNameHostname    = "hostname"
	nodeNameEnvVariable = "NODE_NAME"
)

// nodeNameLookup is where resolveNodeName looks; main passes the process's
// environment, the kernel's hostname and kube.NodeIdentity.
type nodeNameLookup struct {
	getenv   func(string) string
	hostname func() (string, error)
	// identity returns the node name a kubeconfig speaks as and where it
	// found it (kube.NodeIdentity).
	identity func(path string) (name, how string, err error)
}

// resolveNodeName fills o.nodeName and o.nodeNameSource: --node-name, else
// $NODE_NAME (a DaemonSet's downward API), else the node identity of
// --kubeconfig (the kubelet's, whose Node it is), else the hostname
// lower-cased as the kubelet does. Standalone there is no cluster, so the
// kubeconfig is not read, and no name is needed. o.nodeNameSkipped says
// why the kubeconfig gave no name, for the log.
func (o *options) resolveNodeName(l nodeNameLookup) error {
	switch {
	case o.nodeName != "":
		o.nodeNameSource = nodeNameFlag
		return nil
	case l.getenv(nodeNameEnvVariable) != "":
		o.nodeName, o.nodeNameSource = l.getenv(nodeNameEnvVariable), nodeNameEnv
		return nil
	}
	if !o.standalone && o.kubeconfig != "" {
		name, how, err := l.identity(o.kubeconfig)
		if err == nil {
			o.nodeName, o.nodeNameSource = name, nodeNameKubeconfig+" "+how
			return nil
		}
		o.nodeNameSkipped = err
	}
	host, herr := l.hostname()
	if host = strings.ToLower(host); host != "" && herr == nil {
		o.nodeName, o.nodeNameSource = host, nodeNameHostname
		return nil
	}
	if o.standalone {
		return nil
	}
	return errors.New("no node name: --node-name and $NODE_NAME are empty, the kubeconfig names no node identity and the hostname is unknown: set --node-name")
}
