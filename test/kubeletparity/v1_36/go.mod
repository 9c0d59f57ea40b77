module github.com/node-resized/node-resized/test/kubeletparity/v1_36

go 1.26.8

require (
	github.com/go-logr/logr v1.4.4
	github.com/google/cadvisor v0.56.2
	github.com/node-resized/node-resized/test/kubeletparity/cases v0.0.0
	k8s.io/api v0.37.2
	k8s.io/apiserver v0.36.3
	k8s.io/component-base v0.37.2
	k8s.io/klog/v2 v2.140.0
	k8s.io/kubernetes v1.36.3
	k8s.io/utils v0.0.0-20260626114624-be93311217bd
)

require (
	cel.dev/expr v0.25.1 // indirect
	cyphar.com/go-pathrs v0.2.5 // indirect
	github.com/JeffAshton/win_pdh v0.0.0-20161109143554-76bb4ee9f0ab // indirect
	github.com/Microsoft/go-winio v0.6.2 // indirect
	github.com/antlr4-go/antlr/v4 v4.13.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/blang/semver/v4 v4.0.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/cyphar/filepath-securejoin v0.7.0 // indirect
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc // indirect
	github.com/distribution/reference v0.6.0 // indirect
	github.com/emicklei/go-restful/v3 v3.13.0 // indirect
	github.com/fsnotify/fsnotify v1.9.0 // indirect
	github.com/fxamacker/cbor/v2 v2.9.1 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/go-openapi/jsonpointer v1.0.0 // indirect
	github.com/go-openapi/jsonreference v1.0.0 // indirect
	github.com/go-openapi/swag v0.27.1 // indirect
	github.com/godbus/dbus/v5 v5.2.4 // indirect
	github.com/google/cel-go v0.26.0 // indirect
	github.com/google/gnostic-models v0.7.1 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/gorilla/websocket v1.5.4-0.20250319132907-e064f32e3674 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/moby/spdystream v0.5.1 // indirect
	github.com/moby/sys/mountinfo v0.7.2 // indirect
	github.com/moby/sys/userns v0.1.0 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/node-resized/node-resized v0.0.0 // indirect
	github.com/opencontainers/cgroups v0.1.0 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/selinux v1.13.1 // indirect
	github.com/pmezard/go-difflib v1.0.1-0.20181226105442-5d4384ee4fb2 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/stoewer/go-strcase v1.3.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc v0.65.0 // indirect
	go.opentelemetry.io/otel v1.44.0 // indirect
	go.opentelemetry.io/otel/metric v1.44.0 // indirect
	go.opentelemetry.io/otel/trace v1.44.0 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/exp v0.0.0-20251219203646-944ab1f22d93 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/oauth2 v0.37.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/term v0.47.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.15.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260414002931-afd174a4e478 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260720211330-0afa2a65878a // indirect
	google.golang.org/grpc v1.82.1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	gopkg.in/evanphx/json-patch.v4 v4.13.0 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	k8s.io/apiextensions-apiserver v0.0.0 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	k8s.io/client-go v0.37.2 // indirect
	k8s.io/cloud-provider v0.0.0 // indirect
	k8s.io/component-helpers v0.36.3 // indirect
	k8s.io/controller-manager v0.36.3 // indirect
	k8s.io/cri-api v0.36.3 // indirect
	k8s.io/cri-client v0.0.0 // indirect
	k8s.io/csi-translation-lib v0.0.0 // indirect
	k8s.io/dynamic-resource-allocation v0.36.3 // indirect
	k8s.io/kube-openapi v0.0.0-20260721132016-d427ff9ee9ad // indirect
	k8s.io/kube-scheduler v0.0.0 // indirect
	k8s.io/kubelet v0.37.2 // indirect
	k8s.io/mount-utils v0.0.0 // indirect
	k8s.io/streaming v0.36.3 // indirect
	sigs.k8s.io/json v0.0.0-20250730193827-2d320260d730 // indirect
	sigs.k8s.io/randfill v1.0.0 // indirect
	sigs.k8s.io/structured-merge-diff/v6 v6.4.2 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)

replace (
	github.com/node-resized/node-resized => ../../..
	github.com/node-resized/node-resized/test/kubeletparity/cases => ../cases
)

// k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
// with ./staging/...; as a dependency each one needs its published version.
// (sample-cli-plugin and sample-controller are not required by it.)
replace (
	k8s.io/api => k8s.io/api v0.36.3
	k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.36.3
	k8s.io/apimachinery => k8s.io/apimachinery v0.36.3
	k8s.io/apiserver => k8s.io/apiserver v0.36.3
	k8s.io/cli-runtime => k8s.io/cli-runtime v0.36.3
	k8s.io/client-go => k8s.io/client-go v0.36.3
	k8s.io/cloud-provider => k8s.io/cloud-provider v0.36.3
	k8s.io/cluster-bootstrap => k8s.io/cluster-bootstrap v0.36.3
	k8s.io/code-generator => k8s.io/code-generator v0.36.3
	k8s.io/component-base => k8s.io/component-base v0.36.3
	k8s.io/component-helpers => k8s.io/component-helpers v0.36.3
	k8s.io/controller-manager => k8s.io/controller-manager v0.36.3
	k8s.io/cri-api => k8s.io/cri-api v0.36.3
	k8s.io/cri-client => k8s.io/cri-client v0.36.3
	k8s.io/cri-streaming => k8s.io/cri-streaming v0.36.3
	k8s.io/csi-translation-lib => k8s.io/csi-translation-lib v0.36.3
	k8s.io/dynamic-resource-allocation => k8s.io/dynamic-resource-allocation v0.36.3
	k8s.io/endpointslice => k8s.io/endpointslice v0.36.3
	k8s.io/externaljwt => k8s.io/externaljwt v0.36.3
	k8s.io/kms => k8s.io/kms v0.36.3
	k8s.io/kube-aggregator => k8s.io/kube-aggregator v0.36.3
	k8s.io/kube-controller-manager => k8s.io/kube-controller-manager v0.36.3
	k8s.io/kube-proxy => k8s.io/kube-proxy v0.36.3
	k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.36.3
	k8s.io/kubectl => k8s.io/kubectl v0.36.3
	k8s.io/kubelet => k8s.io/kubelet v0.36.3
	k8s.io/metrics => k8s.io/metrics v0.36.3
	k8s.io/mount-utils => k8s.io/mount-utils v0.36.3
	k8s.io/pod-security-admission => k8s.io/pod-security-admission v0.36.3
	k8s.io/sample-apiserver => k8s.io/sample-apiserver v0.36.3
	k8s.io/streaming => k8s.io/streaming v0.36.3
)

// Pinned by test/kubeletparity/sync-pins, at the versions test/node/kubelets/v1_36 builds that kubelet
// with: every module both builds have (see the script for why).
replace (
	cyphar.com/go-pathrs => cyphar.com/go-pathrs v0.2.2
	github.com/GoogleCloudPlatform/opentelemetry-operations-go/detectors/gcp => github.com/GoogleCloudPlatform/opentelemetry-operations-go/detectors/gcp v1.30.0
	github.com/cncf/xds/go => github.com/cncf/xds/go v0.0.0-20251210132809-ee656c7534f5
	github.com/cyphar/filepath-securejoin => github.com/cyphar/filepath-securejoin v0.6.1
	github.com/envoyproxy/go-control-plane/envoy => github.com/envoyproxy/go-control-plane/envoy v1.36.0
	github.com/envoyproxy/protoc-gen-validate => github.com/envoyproxy/protoc-gen-validate v1.3.0
	github.com/fxamacker/cbor/v2 => github.com/fxamacker/cbor/v2 v2.9.0
	github.com/go-jose/go-jose/v4 => github.com/go-jose/go-jose/v4 v4.1.3
	github.com/go-logr/logr => github.com/go-logr/logr v1.4.3
	github.com/go-openapi/jsonpointer => github.com/go-openapi/jsonpointer v0.21.0
	github.com/go-openapi/jsonreference => github.com/go-openapi/jsonreference v0.20.2
	github.com/go-openapi/swag => github.com/go-openapi/swag v0.23.0
	github.com/godbus/dbus/v5 => github.com/godbus/dbus/v5 v5.2.2
	github.com/golang-jwt/jwt/v5 => github.com/golang-jwt/jwt/v5 v5.3.0
	github.com/google/gnostic-models => github.com/google/gnostic-models v0.7.0
	github.com/klauspost/compress => github.com/klauspost/compress v1.18.0
	github.com/opencontainers/cgroups => github.com/opencontainers/cgroups v0.0.6
	github.com/prometheus/client_golang => github.com/prometheus/client_golang v1.23.2
	github.com/prometheus/client_model => github.com/prometheus/client_model v0.6.2
	github.com/prometheus/common => github.com/prometheus/common v0.67.5
	github.com/prometheus/procfs => github.com/prometheus/procfs v0.19.2
	github.com/sirupsen/logrus => github.com/sirupsen/logrus v1.9.3
	github.com/spf13/pflag => github.com/spf13/pflag v1.0.9
	github.com/stretchr/testify => github.com/stretchr/testify v1.11.1
	go.opentelemetry.io/contrib/detectors/gcp => go.opentelemetry.io/contrib/detectors/gcp v1.39.0
	go.opentelemetry.io/otel => go.opentelemetry.io/otel v1.41.0
	go.opentelemetry.io/otel/metric => go.opentelemetry.io/otel/metric v1.41.0
	go.opentelemetry.io/otel/sdk => go.opentelemetry.io/otel/sdk v1.40.0
	go.opentelemetry.io/otel/sdk/metric => go.opentelemetry.io/otel/sdk/metric v1.40.0
	go.opentelemetry.io/otel/trace => go.opentelemetry.io/otel/trace v1.41.0
	go.yaml.in/yaml/v2 => go.yaml.in/yaml/v2 v2.4.3
	go.yaml.in/yaml/v3 => go.yaml.in/yaml/v3 v3.0.4
	golang.org/x/crypto => golang.org/x/crypto v0.47.0
	golang.org/x/mod => golang.org/x/mod v0.32.0
	golang.org/x/net => golang.org/x/net v0.49.0
	golang.org/x/oauth2 => golang.org/x/oauth2 v0.34.0
	golang.org/x/sync => golang.org/x/sync v0.19.0
	golang.org/x/sys => golang.org/x/sys v0.40.0
	golang.org/x/term => golang.org/x/term v0.39.0
	golang.org/x/text => golang.org/x/text v0.33.0
	golang.org/x/time => golang.org/x/time v0.14.0
	golang.org/x/tools => golang.org/x/tools v0.41.0
	gonum.org/v1/gonum => gonum.org/v1/gonum v0.16.0
	google.golang.org/genproto/googleapis/api => google.golang.org/genproto/googleapis/api v0.0.0-20260128011058-8636f8732409
	google.golang.org/genproto/googleapis/rpc => google.golang.org/genproto/googleapis/rpc v0.0.0-20260128011058-8636f8732409
	google.golang.org/grpc => google.golang.org/grpc v1.79.3
	google.golang.org/protobuf => google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af
	k8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-20260317180543-43fb72c5454a
	k8s.io/utils => k8s.io/utils v0.0.0-20260210185600-b8788abfbbc2
	sigs.k8s.io/structured-merge-diff/v6 => sigs.k8s.io/structured-merge-diff/v6 v6.3.3
)
