{{/* The name of every object: fullnameOverride, else the chart's name. */}}
{{- define "node-resized.fullname" -}}
{{- default .Chart.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The ServiceAccount's name. */}}
{{- define "node-resized.serviceAccountName" -}}
{{- default (include "node-resized.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The pods' selector: the same as the kustomize base's. */}}
{{- define "node-resized.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
{{- end -}}

{{/* Every object's labels: the selector's and Helm's own. */}}
{{- define "node-resized.labels" -}}
{{ include "node-resized.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The image: a digest wins over the tag. */}}
{{- define "node-resized.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}
