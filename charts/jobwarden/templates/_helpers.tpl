{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "jobwarden.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: release + chart unless the release name already contains the chart
name. Truncated to leave room for suffixes such as "-operator".
*/}}
{{- define "jobwarden.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "jobwarden.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every resource. */}}
{{- define "jobwarden.labels" -}}
helm.sh/chart: {{ include "jobwarden.chart" . }}
{{ include "jobwarden.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: jobwarden
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "jobwarden.selectorLabels" -}}
app.kubernetes.io/name: {{ include "jobwarden.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "jobwarden.operatorSelectorLabels" -}}
{{ include "jobwarden.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Labels the operator puts on every worker pod it creates (docs/kubernetes.md,
"Pods the operator creates"). The PodMonitor and the workers Service select
on them, so they must not depend on the release.
*/}}
{{- define "jobwarden.workerPodSelectorLabels" -}}
app.kubernetes.io/part-of: jobwarden
app.kubernetes.io/component: worker
{{- end }}

{{- define "jobwarden.operatorName" -}}
{{- printf "%s-operator" (include "jobwarden.fullname" .) }}
{{- end }}

{{- define "jobwarden.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "jobwarden.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "jobwarden.image" -}}
{{- $repository := .Values.image.repository }}
{{- with .Values.image.registry }}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The Secret holding the DSN: the user's, or the one the chart makes. */}}
{{- define "jobwarden.dsnSecretName" -}}
{{- default (printf "%s-dsn" (include "jobwarden.fullname" .)) .Values.database.existingSecret }}
{{- end }}

{{- define "jobwarden.tickSecretName" -}}
{{- default (printf "%s-tick" (include "jobwarden.fullname" .)) .Values.tick.existingSecret }}
{{- end }}

{{- define "jobwarden.consoleSecretName" -}}
{{- default (printf "%s-console" (include "jobwarden.fullname" .)) .Values.console.existingSecret }}
{{- end }}

{{- define "jobwarden.consoleName" -}}
{{- printf "%s-console" (include "jobwarden.fullname" .) }}
{{- end }}

{{- define "jobwarden.consoleSelectorLabels" -}}
{{ include "jobwarden.selectorLabels" . }}
app.kubernetes.io/component: console
{{- end }}

{{/* Where secrets are mounted in jobwarden containers (files, never env values). */}}
{{- define "jobwarden.dsnDir" -}}/var/run/secrets/jobwarden/dsn{{- end }}
{{- define "jobwarden.tickDir" -}}/var/run/secrets/jobwarden/tick{{- end }}
{{- define "jobwarden.consoleDir" -}}/var/run/secrets/jobwarden/console{{- end }}

{{/* Namespaces whose resources the operator reconciles ("" = all). */}}
{{- define "jobwarden.clusterWide" -}}
{{- if not .Values.operator.watchNamespaces }}true{{- end }}
{{- end }}

{{- /*
The job label of the operator's series: prometheusRule.operatorJob, else what the
chart's ServiceMonitor produces -- the value of the operator Service's jobLabel
label when metrics.serviceMonitor.jobLabel is set, else the Service's name.
*/}}
{{- define "jobwarden.operatorJob" -}}
{{- if .Values.prometheusRule.operatorJob }}
{{- .Values.prometheusRule.operatorJob }}
{{- else if .Values.metrics.serviceMonitor.jobLabel }}
{{- $labels := include "jobwarden.labels" . | fromYaml }}
{{- $_ := set $labels "app.kubernetes.io/component" "operator" }}
{{- $_ := set $labels "jobwarden.io/metrics" "true" }}
{{- $value := index $labels .Values.metrics.serviceMonitor.jobLabel }}
{{- if not $value }}
{{- fail (printf "metrics.serviceMonitor.jobLabel %q is not a label of the operator Service (%s)" .Values.metrics.serviceMonitor.jobLabel (keys $labels | sortAlpha | join ", ")) }}
{{- end }}
{{- $value }}
{{- else }}
{{- include "jobwarden.operatorName" . }}
{{- end }}
{{- end }}

{{/* Rules the operator needs in every namespace it watches. */}}
{{- define "jobwarden.namespacedRules" -}}
- apiGroups: [jobwarden.io]
  resources: [workerpools, jobschedules, exclusivejobs]
  verbs: [get, list, watch, patch, update]
- apiGroups: [jobwarden.io]
  resources: [exclusivejobs]
  verbs: [delete]
- apiGroups: [jobwarden.io]
  resources: [workerpools/status, jobschedules/status, exclusivejobs/status]
  verbs: [get, patch, update]
- apiGroups: [jobwarden.io]
  resources: [workerpools/finalizers, jobschedules/finalizers, exclusivejobs/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch, delete]
{{- end }}

{{/*
Namespaces where the operator may get Secrets (a WorkerPool's dsnSecretRef check), as a
list: rbac.secretNamespaces when set ("*" alone: cluster-wide), else the watched
namespaces, else (watching every namespace) the release's own. Not cluster-wide by
default (issue 27): elsewhere the DSNSecretReady condition says Unknown/Forbidden.
*/}}
{{- define "jobwarden.secretNamespaces" -}}
{{- if .Values.rbac.secretNamespaces }}
{{- toJson .Values.rbac.secretNamespaces }}
{{- else if .Values.operator.watchNamespaces }}
{{- toJson .Values.operator.watchNamespaces }}
{{- else }}
{{- toJson (list (include "jobwarden.namespace" .)) }}
{{- end }}
{{- end }}

{{/*
"true" when a prometheus-operator kind (the argument's second item) may be rendered:
the cluster serves monitoring.coreos.com/v1/<kind>, or metrics.onlyWhenApiExists is
false (helm template without --api-versions).
*/}}
{{- define "jobwarden.monitoringApi" -}}
{{- $root := index . 0 }}
{{- if or (not $root.Values.metrics.onlyWhenApiExists) ($root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" (index . 1))) }}true{{- end }}
{{- end }}

{{/* A Prometheus duration (30s, 15m, 2h, 7d, 1w) in seconds, for arithmetic in PromQL. */}}
{{- define "jobwarden.durationSeconds" -}}
{{- $d := toString . }}
{{- $units := dict "s" 1 "m" 60 "h" 3600 "d" 86400 "w" 604800 }}
{{- $unit := substr (int (sub (len $d) 1)) (len $d) $d }}
{{- if not (hasKey $units $unit) }}
{{- fail (printf "duration %q: use a number followed by s, m, h, d or w" $d) }}
{{- end }}
{{- mul (trimSuffix $unit $d | int) (get $units $unit) }}
{{- end }}

{{/*
Events of a counter over a window, including label sets born inside it.
increase() needs two samples, so a series whose first sample already counts
the event (a label set first seen at 1, or a process that started after the
window began) shows no increase; such a series has no sample a window ago, and
its current value is what happened inside the window. Called with
(list "metric_total" "15m").
*/}}
{{- define "jobwarden.recentIncrease" -}}
{{- $m := index . 0 }}{{- $w := index . 1 -}}
({{ $m }} unless {{ $m }} offset {{ $w }}) or increase({{ $m }}[{{ $w }}])
{{- end }}

{{/* The namespace every namespaced resource goes to: namespaceOverride, else the release's. */}}
{{- define "jobwarden.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}
