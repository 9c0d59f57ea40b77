# node-resized — build, run and test.
#
#   make run        build, then run the daemon standalone against this machine
#   make test       unit and integration tests (real CPU hotplug of cpu1 when root)
#   make vet        go vet (root, test and chart modules, the kubelet parity
#                   modules), staticcheck (root, test, tools, parity cases), shellcheck
#                   (every shell script: lint-sh), promtool on the alerting
#                   rules and their unit tests (rules-test); in two halves,
#                   vet-go (all but the next) and vet-staticcheck-tests
#                   (staticcheck over the test modules)
#   make bench      parser and topology benchmarks (compare runs with benchstat)
#   make e2e        end-to-end tests against a real control plane (first build of
#                   etcd, kube-apiserver and kube-scheduler: about 8 minutes),
#                   the kubelet parity modules of v1.34 to v1.36, the Helm
#                   chart's tests (chart-test) and a fleet of 10 agents (test/fleet)
#   make fleet-bench the fleet benchmark: 100, 250 and 500 agents on one control
#                   plane (FLEET_SIZES=...); the table goes to dist/fleet-bench.md
#   make parity     checkpoint and allocatable parity with every supported
#                   kubelet: v1.37 in the test module, then one module per older
#                   version (a first build of each: 3 to 5 minutes)
#   make chart-test the Helm chart: helm lint, the kustomize base's objects,
#                   kube-score, install/upgrade/uninstall on the control plane
#   make cluster-up start that control plane in the foreground (cluster-down stops it)
#   make e2e-vm     end-to-end tests in a QEMU guest with hot-plugged CPUs and DIMMs
#                   (installs qemu-system-x86, busybox-static, cpio; unpacks a Debian kernel into a cache)
#   make e2e-vm-ppc64le  the daemon, cross-built, in a ppc64le (POWER pseries) guest whose
#                   core and DIMM are hot-added and unplugged (installs qemu-system-ppc;
#                   takes a ppc64el kernel and busybox from Debian's archive into the same cache)
#   make e2e-node   a QEMU guest that is a real node: systemd as PID 1, the real kubelet
#   make e2e-node-matrix  the same node booted with each older kubelet (v1.34 to
#                   v1.36, built by test/node/build-matrix: a first build of each
#                   takes minutes) and with v1.37, the Static memory manager on,
#                   and the restart scenarios run on it
#   make build-cross static binaries for each of ARCHES (amd64 arm64 ppc64le
#                   s390x) in bin/linux_<arch>/
#   make image      the DaemonSet's multi-architecture container image: dist/image/oci
#                   (an OCI layout) and dist/node-resized-image-<tag>.tar (docker,
#                   podman load, ctr images import)
#   make package    the deb and rpm packages in dist/ for each of ARCHES (package-test
#                   checks them, with lintian, rpmlint and systemd-analyze, and the
#                   image; make man: the manual pages)
#   make test-cross the byte-parsing packages' unit tests built for arm64, ppc64le
#                   and s390x, run under qemu-user (Debian's qemu-user-static)
#   make cross-compile  what build-cross and test-cross compile, into the build
#                   cache only (.ci/run starts it in the background)
#   make install    a plain install under PREFIX (default /usr/local)

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
# grpcnotrace keeps gRPC's golang.org/x/net/trace, and with it html/template,
# out of the binaries: template's reflection stops the linker from dropping
# unused methods, which made the daemon 20 MB larger.
TAGS     ?= grpcnotrace
BIN      ?= bin
PREFIX   ?= /usr/local
# Root may use the system socket; anyone else gets one in /tmp.
SOCKET   ?= $(if $(filter 0,$(shell id -u)),/run/node-resized/node-resized.sock,/tmp/node-resized-$(shell id -u)/node-resized.sock)
RUNFLAGS ?=
BENCHCOUNT ?= 6
FUZZTIME ?= 60s
# How many real-node guests run at once, each with its own control plane (a
# TCG guest of 2 to 4 CPUs and up to 4 GiB each), the longest test first
# (test/node/slots_test.go). Two on a 2-CPU machine, whose guests keep it
# 90 % busy: with three, a kubelet took 80 s to start and an evicted pod
# over 2 min to stop (docs/measurements.md, CI time). NODE_PARALLEL=1 runs
# them one at a time.
NODE_PARALLEL ?= 2
# go test's own -parallel: above the number of guest tests, so that all of
# them reach the slot queue together and it picks the order.
NODE_GO_PARALLEL = -parallel 64

.PHONY: all build build-cross cross-compile run test test-cross test-unit test-integration bench fuzz e2e fleet-bench parity chart-test e2e-vm e2e-vm-ppc64le e2e-node e2e-node-matrix e2e-node-all cluster-up cluster-down vet vet-go vet-staticcheck-tests lint-sh rules-test fmt install package package-test image man clean

all: build

# Static binaries. Everything else keeps the default cgo setting, so that
# the tests (the race detector needs cgo) and the test module's large
# Kubernetes builds share one build cache.
build:
	CGO_ENABLED=0 $(GO) build -tags '$(TAGS)' -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/node-resized ./cmd/node-resized
	CGO_ENABLED=0 $(GO) build -tags '$(TAGS)' -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/node-resizectl ./cmd/node-resizectl

# The architectures the packages are built for (Go's names), each one's
# static binaries in $(BIN)/linux_<arch>/ (the container image's build
# reads the same layout). Cross builds need no C toolchain: CGO_ENABLED=0,
# as make build.
ARCHES ?= amd64 arm64 ppc64le s390x

build-cross: $(addprefix build-cross-,$(ARCHES))

build-cross-%:
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -tags '$(TAGS)' -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux_$*/node-resized ./cmd/node-resized
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -tags '$(TAGS)' -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux_$*/node-resizectl ./cmd/node-resizectl

run: build
	@echo "node-resized: socket $(SOCKET); ask it with: $(BIN)/node-resizectl --socket $(SOCKET) status"
	$(BIN)/node-resized --standalone --socket $(SOCKET) $(RUNFLAGS)

# go test's own vet, off: make vet runs go vet's whole suite over every
# package these targets test (CI runs it first). go test's vet is a subset
# of it with a cache key of its own, so it would analyse every dependency
# again for its facts (thousands of packages in the test module and in each
# kubelet parity module). make TEST_VET= gives go test's default back.
TEST_VET ?= -vet=off

# The race detector needs cgo (on by default).
test: test-unit test-integration

test-unit:
	$(GO) test $(TEST_VET) -race -count=1 ./...

test-integration:
	cd test && $(GO) test $(TEST_VET) -race -count=1 -v ./daemon/

# The unit tests of the packages that parse the kernel's and the kubelet's
# bytes (uevents, sysfs, checkpoints, cgroup files, the API's JSON) or do
# the kubelet's arithmetic, built for each of CROSS_ARCHES (cgo off, so no
# race detector) and run under qemu-user: go test -exec
# qemu-<arch>-static, Debian's qemu-user-static, so that no binfmt_misc
# registration is needed. s390x is big-endian: a byte-order bug shows
# there. With make build's tags and -trimpath, so that the dependencies
# compiled for build-cross serve here too. -short: the property tests run
# a tenth of their cases, the 1024-CPU tree is left out. A real sysfs
# write runs at most once under emulation: uevent's real cpu1 hotplug
# (the kernel's uevents through qemu's netlink, whose addresses qemu
# byte-swaps for a big-endian guest) on s390x only, and topology's cpu1
# hotplug against cAdvisor not at all (it reads this machine's sysfs,
# which no kubelet of the emulated architecture reads; make test runs it).
CROSS_ARCHES ?= arm64 ppc64le s390x
CROSS_PKGS   = ./uevent/ ./topology/ ./kubelet/checkpoint/ ./kubelet/internal/cpulist/ ./cgroup/ ./decide/ ./resources/ ./api/
CROSS_SKIP   = TestCAdvisorReferenceCPUHotplug
test-cross:
	@for a in $(CROSS_ARCHES); do \
		case $$a in arm64) q=aarch64;; *) q=$$a;; esac; \
		skip='$(CROSS_SKIP)'; [ $$a = s390x ] || skip="$$skip|TestRealCPUHotplug"; \
		command -v qemu-$$q-static >/dev/null || { echo "make test-cross: qemu-$$q-static is not installed (Debian: apt-get install qemu-user-static)" >&2; exit 1; }; \
		echo "--- $$a (qemu-$$q-static)"; start=$$(date +%s); \
		CGO_ENABLED=0 GOARCH=$$a $(GO) test $(TEST_VET) -tags '$(TAGS)' -trimpath -count=1 -short -exec qemu-$$q-static -skip "^($$skip)\$$" $(CROSS_PKGS) || exit 1; \
		echo "--- $$a: $$(( $$(date +%s) - start )) s"; \
	done

# staticcheck at the version tools/go.mod pins (its tool directive), run
# in each of the three modules: go tool -modfile builds it from the tools
# module's requirements and caches the binary; staticcheck checks the
# packages of the module it runs in, and caches its results in
# ~/.cache/staticcheck.
STATICCHECK = $(GO) tool -modfile=$(CURDIR)/tools/go.mod staticcheck

# The kubelet parity modules of v1.34 to v1.36, each pinning its own
# k8s.io/kubernetes (v1.37's is test/kubeletparity, in the test module),
# and the module of the cases they all run. Each builds with the versions
# of its kubelet's build module in test/node/kubelets (make vet checks it:
# test/kubeletparity/sync-pins --check), so that test/node/build-matrix
# links the kubelet packages their tests compiled.
PARITY_MODULES = test/kubeletparity/v1_34 test/kubeletparity/v1_35 test/kubeletparity/v1_36
PARITY_CASES   = test/kubeletparity/cases
PARITY_TEST    = for m in $(PARITY_MODULES); do (cd $$m && $(GO) test $(TEST_VET) -count=1 -v -timeout 10m ./...) || exit 1; done

# staticcheck checks what ships (the root module), the test module
# (test/, with the version matrix's tag), the tools and the shared parity
# cases: about 5 minutes for test/ on a cold staticcheck cache. The
# chart's module and the older kubelets' parity modules (Helm's SDK, three
# more versions of k8s.io/kubernetes, which staticcheck analyses whole:
# with them a cold make vet took 55 minutes) get go vet only.
#
# vet-go runs go vet over every module, shellcheck, the rule tests and
# staticcheck over what ships and the tools; vet-staticcheck-tests runs
# staticcheck over the test modules (about 400 CPU-seconds on a cold
# cache, in its own analysis cache). CI runs make vet first: its compiles
# of every module then come before the background builds of the same
# packages (moved later, they ran beside those builds and were done
# twice), and a vet run beside the real-node tests, even at the lowest
# CPU priority, made their guests slower (docs/measurements.md, CI time).
vet: vet-go vet-staticcheck-tests

vet-go: lint-sh rules-test
	$(GO) vet ./...
	cd test && $(GO) vet ./...
	cd test && $(GO) vet -tags matrix ./node/
	cd test/chart && $(GO) vet ./...
	test/kubeletparity/sync-pins --check
	for m in $(PARITY_CASES) $(PARITY_MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	cd tools && $(GO) vet ./...
	$(STATICCHECK) ./...
	cd tools && $(STATICCHECK) ./...

vet-staticcheck-tests:
	cd test && $(STATICCHECK) ./...
	cd test && $(STATICCHECK) -tags matrix ./node/
	cd $(PARITY_CASES) && $(STATICCHECK) ./...

# promtool at the version tools/go.mod pins (built from the Prometheus
# module like staticcheck; the first build takes minutes): it checks the
# alerting rules and runs their unit tests, which say when each alert fires
# and when it must not. PROMTOOL=/usr/bin/promtool uses another one: the
# tests hold under Prometheus 2's ranges (closed) and 3's (left-open), and
# CI uses Debian's promtool (2.42) to skip the cold build.
PROMTOOL ?= $(GO) tool -modfile=$(CURDIR)/tools/go.mod promtool

rules-test:
	$(PROMTOOL) check rules packaging/prometheus/node-resized-alerts.yaml
	$(PROMTOOL) test rules packaging/prometheus/node-resized-alerts_test.yaml

# shellcheck over every shell script in the tree: the files whose #! line
# names sh, bash or dash, and the *.sh and *.bash files (the completion has
# no #! line). .shellcheckrc lets it follow the files a script sources.
lint-sh:
	@command -v shellcheck >/dev/null || { echo "make lint-sh: shellcheck is not installed (Debian: apt-get install shellcheck)" >&2; exit 1; }
	{ git ls-files '*.sh' '*.bash'; \
	  git ls-files -z | xargs -0 awk 'FNR == 1 { if ($$0 ~ /^#!(.*[\/ ])?(ba|da)?sh( |$$)/) print FILENAME; nextfile }'; } | \
	  xargs -d '\n' shellcheck

# What build-cross and test-cross compile for each of CROSS_ARCHES, into
# the build cache only: no binary is written and no test runs (go test
# -exec /bin/true). .ci/run runs it in the background from its start, at
# the lowest CPU priority, so that both later find their packages compiled.
cross-compile:
	@for a in $(CROSS_ARCHES); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -tags '$(TAGS)' -trimpath ./cmd/node-resized ./cmd/node-resizectl || exit 1; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) test $(TEST_VET) -tags '$(TAGS)' -trimpath -count=1 -short -run '^$$' -exec /bin/true $(CROSS_PKGS) >/dev/null || exit 1; \
	done

fmt:
	gofmt -l -w $$(git ls-files '*.go')

bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=$(BENCHCOUNT) ./uevent/ ./topology/

fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./uevent/

# The control plane's first build is not counted by -timeout. The fleet's
# ten agents (test/fleet, its own control plane) run beside test/e2e: most
# of its minute and a half is waiting (an idle window, an outage).
e2e:
	test/cluster/up -build-only
	cd test && $(GO) test $(TEST_VET) -count=1 -v -timeout 20m ./cluster/ ./e2e/ ./kubeletparity/ ./fleet/
	$(PARITY_TEST)
	cd test/chart && $(GO) test $(TEST_VET) -count=1 -v -timeout 15m ./...

# The fleet benchmark (test/fleet): 100, 250 and 500 real node-resized
# processes against one control plane, a 60 s outage, a 2 minute idle
# window; the results table goes to dist/fleet-bench.md. Not in CI (make
# e2e runs 10 agents). FLEET_SIZES=100 runs one size.
FLEET_SIZES ?= 100,250,500
fleet-bench:
	test/cluster/up -build-only
	mkdir -p dist
	cd test && NODE_RESIZED_FLEET_SIZES='$(FLEET_SIZES)' NODE_RESIZED_FLEET_OUTAGE=60s NODE_RESIZED_FLEET_IDLE=2m \
		NODE_RESIZED_FLEET_OUT=$(CURDIR)/dist/fleet-bench.md $(GO) test -count=1 -v -timeout 120m -run '^TestFleet$$' ./fleet/

# Every supported kubelet against node-resized's checkpoint rewrites (and,
# for v1.37, its allocatable arithmetic), each with its own code.
parity:
	cd test && $(GO) test $(TEST_VET) -count=1 -v -timeout 20m ./kubeletparity/
	$(PARITY_TEST)

# The Helm chart, with Helm's Go SDK, in a module of its own (test/chart)
# so that Helm's dependencies leave the control plane's build alone.
chart-test:
	test/cluster/up -build-only
	cd test/chart && $(GO) test $(TEST_VET) -count=1 -v -timeout 15m ./...

cluster-up:
	test/cluster/up

cluster-down:
	test/cluster/down

# The QEMU suites print as go test -v does, then what each failed test said
# last (test/cmd/testsummary): their logs are long, and a kept tail of one
# must still show why it failed.
TESTSUMMARY = $(abspath $(BIN))/testsummary
$(TESTSUMMARY): test/cmd/testsummary/main.go
	$(GO) -C test build -o $@ ./cmd/testsummary

e2e-vm: $(TESTSUMMARY)
	test/vm/fetch
	cd test && $(GO) test $(TEST_VET) -json -count=1 -timeout 30m ./vm/... ./vmscenario/ 2>&1 | $(TESTSUMMARY)

# The same daemon built for ppc64le (CGO_ENABLED=0 GOARCH=ppc64le) in a
# pseries guest under TCG, whose hotplug is PAPR's DLPAR, not ACPI's
# (test/vmarch).
e2e-vm-ppc64le: $(TESTSUMMARY)
	test/vm/fetch ppc64le
	cd test && NODE_RESIZED_VM_ARCH=ppc64le $(GO) test $(TEST_VET) -json -count=1 -timeout 20m ./vmarch/ 2>&1 | $(TESTSUMMARY)

# A QEMU guest that is a real node: systemd as PID 1, the real kubelet
# (built from k8s.io/kubernetes, about 5 more minutes the first time) on a
# fake CRI runtime, or on containerd, runc and the CNI bridge (built from
# their modules by test/node/build-runtime, with images made here),
# registered with the test control plane.
e2e-node: $(TESTSUMMARY)
	test/cluster/up -build-only
	test/vm/fetch
	test/node/build
	test/node/build-runtime
	cd test && NODE_RESIZED_NODE_PARALLEL=$(NODE_PARALLEL) $(GO) test $(TEST_VET) -json -count=1 -timeout 50m $(NODE_GO_PARALLEL) ./node/ 2>&1 | $(TESTSUMMARY)

# The kubelet version matrix (test/node/matrix_test.go, build tag matrix):
# one boot per older kubelet, NODE_PARALLEL at a time; NODE_KUBELETS picks a
# subset (e.g. NODE_KUBELETS=v1.35.4). Not part of e2e-node.
NODE_KUBELETS ?=
e2e-node-matrix: $(TESTSUMMARY)
	test/cluster/up -build-only
	test/vm/fetch
	test/node/build
	test/node/build-matrix
	cd test && NODE_RESIZED_NODE_PARALLEL=$(NODE_PARALLEL) NODE_RESIZED_NODE_KUBELETS='$(NODE_KUBELETS)' $(GO) test $(TEST_VET) -json -tags matrix -count=1 -timeout 60m $(NODE_GO_PARALLEL) -run '^TestKubeletVersions$$' ./node/ 2>&1 | $(TESTSUMMARY)

# e2e-node and e2e-node-matrix in one run (what CI runs): their guests
# share the NODE_PARALLEL slots, the longest first, so that the matrix's
# runs fill the time the others leave.
e2e-node-all: $(TESTSUMMARY)
	test/cluster/up -build-only
	test/vm/fetch
	test/node/build
	test/node/build-runtime
	test/node/build-matrix
	cd test && NODE_RESIZED_NODE_PARALLEL=$(NODE_PARALLEL) NODE_RESIZED_NODE_KUBELETS='$(NODE_KUBELETS)' $(GO) test $(TEST_VET) -json -tags matrix -count=1 -timeout 80m $(NODE_GO_PARALLEL) ./node/ 2>&1 | $(TESTSUMMARY)

# A plain install without a package: the binaries and the bash completion
# under $(PREFIX), the unit in /etc/systemd/system and the kubelet's drop-in
# in /etc/systemd/system/kubelet.service.d with their ExecStart and
# ExecStartPre pointed at $(PREFIX)/bin (the files in the tree, which the
# packages ship, say /usr/bin), and /etc/default/node-resized only if there
# is none yet, so that an edited one is kept. Then: systemctl daemon-reload.
install: build
	install -D -m 0755 $(BIN)/node-resized $(DESTDIR)$(PREFIX)/bin/node-resized
	install -D -m 0755 $(BIN)/node-resizectl $(DESTDIR)$(PREFIX)/bin/node-resizectl
	install -D -m 0644 packaging/completion/node-resizectl.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/node-resizectl
	install -d $(DESTDIR)/etc/systemd/system
	sed -e 's|^ExecStart=/usr/bin/node-resized|ExecStart=$(PREFIX)/bin/node-resized|' -e 's|^ExecStopPost=-/usr/bin/node-resized|ExecStopPost=-$(PREFIX)/bin/node-resized|' systemd/node-resized.service >$(DESTDIR)/etc/systemd/system/node-resized.service
	chmod 0644 $(DESTDIR)/etc/systemd/system/node-resized.service
	grep -q '^ExecStart=$(PREFIX)/bin/node-resized ' $(DESTDIR)/etc/systemd/system/node-resized.service
	install -d $(DESTDIR)/etc/systemd/system/kubelet.service.d
	sed 's|^ExecStartPre=-/usr/bin/node-resized |ExecStartPre=-$(PREFIX)/bin/node-resized |' packaging/kubelet/90-node-resized.conf >$(DESTDIR)/etc/systemd/system/kubelet.service.d/90-node-resized.conf
	chmod 0644 $(DESTDIR)/etc/systemd/system/kubelet.service.d/90-node-resized.conf
	grep -q '^ExecStartPre=-$(PREFIX)/bin/node-resized kubelet-prestart ' $(DESTDIR)/etc/systemd/system/kubelet.service.d/90-node-resized.conf
	test -e $(DESTDIR)/etc/default/node-resized || install -D -m 0644 packaging/default/node-resized $(DESTDIR)/etc/default/node-resized

# The deb and rpm packages of each of ARCHES, in dist/ with nfpm's names
# (node-resized_<version>_<arch>.deb, node-resized-<version>-1.<arch>.rpm;
# the deb's arch is amd64, arm64, ppc64el or s390x, the rpm's x86_64,
# aarch64, ppc64le or s390x), built with nfpm's Go API by the separate
# tools/ module from build-cross's binaries; their manual pages come from
# the --help of make build's, which run here. <version> is
# VERSION made acceptable to dpkg and rpm: v1.2.3 -> 1.2.3,
# v1.2.3-4-gabc1234 -> 1.2.3+git4.abc1234, abc1234-dirty (no tag) ->
# 0.0.0~gitabc1234.dirty (packaging/README.md).
# The packages' dates (files, changelog, manual pages) are the last
# commit's, so that one commit packages the same.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
comma := ,
empty :=
space := $(empty) $(empty)
package: build build-cross
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) -C tools run ./cmd/nfpm-pack -root $(CURDIR) -arch $(subst $(space),$(comma),$(strip $(ARCHES))) -bin '$(BIN)/linux_{arch}' -help-bin $(BIN) -out dist -version $(VERSION)

# The DaemonSet's container image: a multi-architecture OCI image index of
# ARCHES (linux), built from make build-cross's binaries by
# tools/cmd/image-pack with go-containerregistry, no container engine. It
# writes $(DIST)/image/oci (an OCI image layout: skopeo copy --all oci:...,
# crane push) and $(DIST)/node-resized-image-<tag>.tar, the same layout in
# one tar with a docker-style manifest.json (docker load, podman load, ctr
# images import, skopeo copy --all oci-archive:...). The image is named
# $(IMAGE):<tag>, <tag> being VERSION without its leading v unless
# IMAGE_TAG is set; the Containerfile builds the same contents with
# docker buildx or buildah (packaging/README.md). Its dates are the last
# commit's, so that one commit builds the same digest.
IMAGE     ?= ghcr.io/node-resized/node-resized
IMAGE_TAG ?=
DIST      ?= dist
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null)
image: build-cross
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) -C tools run ./cmd/image-pack -root $(CURDIR) -bin $(abspath $(BIN)) \
		-arches '$(ARCHES)' -name $(IMAGE) $(if $(IMAGE_TAG),-tag $(IMAGE_TAG)) -version $(VERSION) -revision '$(REVISION)' -out $(abspath $(DIST))

# The manual pages, made from the binaries' --help as the packages' are,
# into $(BIN)/man (read them with man -l).
man: build
	$(GO) -C tools run ./cmd/nfpm-pack -help-bin $(abspath $(BIN)) -man $(abspath $(BIN))/man -version $(VERSION)

# The packages' contents, control data and scripts, an install, upgrade and
# purge with dpkg --root and rpm --root in temporary roots (as root), and
# make install into a DESTDIR; the manual pages; lintian and rpmlint (no
# error, no warning: overrides and filters say why) on every architecture's
# packages; the arm64, ppc64el and s390x debs installed with dpkg --root and
# their rpms unpacked, their binaries checked to be that architecture's and
# run under qemu-user; systemd-analyze verify and security on the unit and
# the kubelet's drop-in. Needs dpkg-dev, rpm, lintian, rpmlint, man-db,
# systemd and qemu-user-static. It packages all four architectures,
# whatever ARCHES says. And the container image (tools/cmd/image-pack):
# make image's, its platforms, binaries and labels; two builds of the same
# input the same digest; its agreement with the Containerfile; a push to a
# registry in the test's process.
package-test: build
	$(MAKE) --no-print-directory build-cross ARCHES='amd64 arm64 ppc64le s390x'
	$(MAKE) --no-print-directory image ARCHES='amd64 arm64 ppc64le s390x'
	cd tools && $(GO) vet ./...
	cd tools && NODE_RESIZED_BIN=$(abspath $(BIN)) NODE_RESIZED_IMAGE=$(abspath $(DIST))/image/oci $(GO) test $(TEST_VET) -count=1 -v ./...

clean:
	rm -rf $(BIN)
