{{/* The prefix of every object's name: the release name, or <release>-gangscope. */}}
{{- define "gangscope.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object: the kustomize base's common labels, then Helm's own. */}}
{{- define "gangscope.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/part-of: {{ .Chart.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector of one component's pods (call with (list $ "collector")). */}}
{{- define "gangscope.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ $.Chart.Name }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "gangscope.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Flags both processes take, from a component's values (call with (list $ .Values.collector)). */}}
{{- define "gangscope.commonArgs" -}}
{{- $ := index . 0 -}}
{{- $c := index . 1 -}}
{{- with $.Values.topology.levels }}
- --topology-levels={{ join "," . }}
{{- end }}
{{- range $key := keys $.Values.topology.aliases | sortAlpha }}
- --topology-alias={{ $key }}={{ index $.Values.topology.aliases $key }}
{{- end }}
{{- with $c.maxSeriesPerFamily }}
- --max-series-per-family={{ . | int64 }}
{{- end }}
{{- with $c.maxSeriesPerOwner }}
- --max-series-per-owner={{ . | int64 }}
{{- end }}
{{- with $.Values.clusterName }}
- --cluster-name={{ . }}
{{- end }}
{{- with $c.metricAllowlist }}
- --metric-allowlist={{ join "," . }}
{{- end }}
{{- with $c.metricDenylist }}
- --metric-denylist={{ join "," . }}
{{- end }}
{{- with $c.metricLabelsAllowlist }}
{{- $groups := list }}
{{- range $resource, $keys := . }}
{{- $groups = append $groups (printf "%s=[%s]" $resource (join "," $keys)) }}
{{- end }}
- --metric-labels-allowlist={{ join "," $groups }}
{{- end }}
{{- with $c.discoveryInterval }}
- --discovery-interval={{ . }}
{{- end }}
{{- if $c.insecureSkipTLSVerify }}
- --insecure-skip-tls-verify
{{- end }}
{{- range $c.gpuResources }}
- --gpu-resource={{ . }}
{{- end }}
{{- with $c.logLevel }}
- --log-level={{ . }}
{{- end }}
{{- if $.Values.metricsAuth.enabled }}
- --metrics-auth
{{- end }}
{{- if $.Values.tls.enabled }}
- --tls-cert=/etc/gangscope/tls/tls.crt
- --tls-key=/etc/gangscope/tls/tls.key
{{- end }}
{{- range $c.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "gangscope.tlsSecret" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{- if eq $component "collector" -}}
{{ $.Values.tls.collectorSecretName | default (printf "%s-collector-tls" (include "gangscope.fullname" $)) }}
{{- else -}}
{{ $.Values.tls.agentSecretName | default (printf "%s-agent-tls" (include "gangscope.fullname" $)) }}
{{- end -}}
{{- end -}}
