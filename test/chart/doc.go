// Package chart tests the Helm chart in packaging/helm/node-resized with
// Helm's own Go SDK: it lints, it renders with its defaults the objects of
// the kustomize base in packaging/kubernetes, its values change what they
// say, kube-score finds nothing critical in what either renders, and it
// installs, upgrades and uninstalls against the test control plane
// (server-side apply with strict field validation, as helm install does).
//
// The package is a module of its own so that Helm's dependencies do not
// move the versions the test module's control plane is built from. The
// install test needs the control plane's binaries (test/cluster/up
// -build-only, which make chart-test runs first).
package chart
