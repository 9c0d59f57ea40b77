// Command etcd is the upstream etcd server (go.etcd.io/etcd/server/v3,
// package etcdmain) built from the Go module proxy, so that the cluster test
// harness needs no prebuilt binaries. It is a test tool, not part of the
// product.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
