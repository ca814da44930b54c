{{/*
The app name: nameOverride, else the chart name (computedomain-controller).
*/}}
{{- define "computedomain-controller.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Base name of the objects: fullnameOverride, else the app name. Like NVIDIA's chart, the release
name is not part of it: one ComputeDomain controller runs per cluster, and the default keeps the
names of manifests/ (the metrics Service `computedomain-controller-metrics` is the `job` the
alerts select).
*/}}
{{- define "computedomain-controller.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- include "computedomain-controller.name" . }}
{{- end }}
{{- end }}

{{/*
The namespace of the controller (Deployment, ServiceAccount, Lease): namespaceOverride, else the
release namespace. "The release namespace" in values.yaml and README.md means this.
*/}}
{{- define "computedomain-controller.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{/*
The driver namespace (NAMESPACE): daemon DaemonSets, their pods, cliques, the daemon
ServiceAccount. driverNamespace, else the controller's namespace.
*/}}
{{- define "computedomain-controller.driverNamespace" -}}
{{- default (include "computedomain-controller.namespace" .) .Values.driverNamespace }}
{{- end }}

{{- define "computedomain-controller.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: never NVIDIA's `<chart name>-component` labels, by which the controller
recognises NVIDIA's own controller pods (NVIDIA_CONTROLLER_SELECTORS).
*/}}
{{- define "computedomain-controller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "computedomain-controller.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{/* Pod template labels. */}}
{{- define "computedomain-controller.podLabels" -}}
{{ include "computedomain-controller.selectorLabels" . }}
app.kubernetes.io/part-of: computedomain
{{- end }}

{{/* Labels of every controller object. */}}
{{- define "computedomain-controller.labels" -}}
helm.sh/chart: {{ include "computedomain-controller.chart" . }}
{{ include "computedomain-controller.podLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels of the IMEX daemon's RBAC objects (manifests/rbac/daemon_*.yaml). */}}
{{- define "computedomain-controller.daemonLabels" -}}
helm.sh/chart: {{ include "computedomain-controller.chart" . }}
app.kubernetes.io/name: compute-domain-daemon
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: computedomain
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "computedomain-controller.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "computedomain-controller.fullname" .) .Values.serviceAccount.name }}
{{- else if .Values.serviceAccount.name }}
{{- .Values.serviceAccount.name }}
{{- else }}
{{- fail "serviceAccount.create=false needs serviceAccount.name (this chart does not bind its rules to the namespace's default ServiceAccount)" }}
{{- end }}
{{- end }}

{{/* Subjects of every controller binding: its ServiceAccount in its own namespace. */}}
{{- define "computedomain-controller.subjects" }}
- kind: ServiceAccount
  name: {{ include "computedomain-controller.serviceAccountName" . }}
  namespace: {{ include "computedomain-controller.namespace" . }}
{{- end }}

{{/* The controller image; tag "" means the chart's appVersion. */}}
{{- define "computedomain-controller.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/* IMAGE_NAME: NVIDIA's driver image (tag "" means daemonImage.repository as given). */}}
{{- define "computedomain-controller.daemonImage" -}}
{{- if .Values.daemonImage.tag }}
{{- printf "%s:%s" .Values.daemonImage.repository (toString .Values.daemonImage.tag) }}
{{- else }}
{{- .Values.daemonImage.repository }}
{{- end }}
{{- end }}

{{/* The port number of a "[host]:port" address. */}}
{{- define "computedomain-controller.port" -}}
{{- $port := splitList ":" (toString .) | last }}
{{- if not (regexMatch "^[0-9]+$" $port) }}
{{- fail (printf "%q is not a [host]:port address" (toString .)) }}
{{- end }}
{{- $port }}
{{- end }}

{{/*
Values that cannot work: fail at install/template time with one line rather than render a
controller that crash-loops or two leaders that both write.
*/}}
{{- define "computedomain-controller.validate" -}}
{{- if and (gt (int .Values.controller.replicas) 1) (not .Values.controller.leaderElection.enabled) }}
{{- fail "controller.replicas > 1 needs controller.leaderElection.enabled=true: without leader election every replica writes" }}
{{- end }}
{{- if not .Values.daemonImage.repository }}
{{- fail "daemonImage.repository is empty: set it to NVIDIA's DRA driver image of the release your kubelet plugin runs" }}
{{- end }}
{{- if not .Values.controller.probes.address }}
{{- fail "controller.probes.address is empty: the liveness and readiness probes need it" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (not (and .Values.controller.metrics.enabled .Values.metricsService.enabled)) }}
{{- fail "serviceMonitor.enabled=true needs controller.metrics.enabled=true and metricsService.enabled=true" }}
{{- end }}
{{- if and (eq (toString .Values.resources.computeDomains.imex.mode) "hostManaged") (not (get (.Values.featureGates | default dict) "HostManagedIMEXDaemon")) }}
{{- fail "imex.mode=\"hostManaged\" requires the HostManagedIMEXDaemon feature gate to be enabled" }}
{{- end }}
{{- end }}
