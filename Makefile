# node-resized — build, run and test.
#
#   make run        build, then run the daemon standalone against this machine
#   make test       unit and integration tests (real CPU hotplug of cpu1 when root)
#   make bench      parser and topology benchmarks (compare runs with benchstat)
#   make e2e        end-to-end tests against a real control plane (first build of
#                   etcd, kube-apiserver and kube-scheduler: about 8 minutes)
#   make cluster-up start that control plane in the foreground (cluster-down stops it)
#   make e2e-vm     end-to-end tests in a QEMU guest with hot-plugged CPUs and DIMMs
#                   (installs qemu-system-x86, busybox-static, cpio; unpacks a Debian kernel into a cache)

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
BIN      ?= bin
PREFIX   ?= /usr/local
# Root may use the system socket; anyone else gets one in /tmp.
SOCKET   ?= $(if $(filter 0,$(shell id -u)),/run/node-resized/node-resized.sock,/tmp/node-resized-$(shell id -u)/node-resized.sock)
RUNFLAGS ?=
BENCHCOUNT ?= 6
FUZZTIME ?= 60s

.PHONY: all build run test test-unit test-integration bench fuzz e2e e2e-vm e2e-node cluster-up cluster-down vet fmt install clean

all: build

# Static binaries. Everything else keeps the default cgo setting, so that
# the tests (the race detector needs cgo) and the test module's large
# Kubernetes builds share one build cache.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/node-resized ./cmd/node-resized
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/node-resizectl ./cmd/node-resizectl

run: build
	@echo "node-resized: socket $(SOCKET); ask it with: $(BIN)/node-resizectl --socket $(SOCKET) status"
	$(BIN)/node-resized --standalone --socket $(SOCKET) $(RUNFLAGS)

# The race detector needs cgo (on by default).
test: test-unit test-integration

test-unit:
	$(GO) test -race -count=1 ./...

test-integration:
	cd test && $(GO) test -race -count=1 -v ./daemon/

vet:
	$(GO) vet ./...
	cd test && $(GO) vet ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go')

bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=$(BENCHCOUNT) ./uevent/ ./topology/

fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./uevent/

# The control plane's first build is not counted by -timeout.
e2e:
	test/cluster/up -build-only
	cd test && $(GO) test -count=1 -v -timeout 20m ./cluster/ ./e2e/ ./kubeletparity/

cluster-up:
	test/cluster/up

cluster-down:
	test/cluster/down

e2e-vm:
	test/vm/fetch
	cd test && $(GO) test -count=1 -v -timeout 30m ./vm/ ./vmscenario/

# A QEMU guest that is a real node: systemd as PID 1, the real kubelet
# (built from k8s.io/kubernetes, about 5 more minutes the first time) on a
# fake CRI runtime, registered with the test control plane.
e2e-node:
	test/cluster/up -build-only
	test/vm/fetch
	test/node/build
	cd test && $(GO) test -count=1 -v -timeout 40m ./node/

install: build
	install -D -m 0755 $(BIN)/node-resized $(DESTDIR)$(PREFIX)/bin/node-resized
	install -D -m 0755 $(BIN)/node-resizectl $(DESTDIR)$(PREFIX)/bin/node-resizectl
	install -D -m 0644 systemd/node-resized.service $(DESTDIR)/etc/systemd/system/node-resized.service

clean:
	rm -rf $(BIN)
