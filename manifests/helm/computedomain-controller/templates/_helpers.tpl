{{/*
The app name: always the chart name (computedomain-controller). nameOverride keeps NVIDIA's
meaning, the name of NVIDIA's install (below): an NVIDIA values file must not give our pods
the app label of NVIDIA's pods, nor move the selectors swap.sh, the anti-affinity and the
dashboards use.
*/}}
{{- define "computedomain-controller.name" -}}
{{- .Chart.Name }}
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
The name of NVIDIA's install, as NVIDIA's chart derives it: nameOverride, else its chart name.
NVIDIA's controller Deployment and Lease are "<it>-controller", its pods' selector label
"<it>-component: controller" (docs/contract.md §19).
*/}}
{{- define "computedomain-controller.nvidiaName" -}}
{{- default "dra-driver-nvidia-gpu" .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The Lease name: controller.leaderElection.leaseLockName, or, when that is empty, NVIDIA's
controller's Lease "<NVIDIA's name>-controller" (install mode "into NVIDIA's driver namespace").
*/}}
{{- define "computedomain-controller.leaseLockName" -}}
{{- .Values.controller.leaderElection.leaseLockName | default (printf "%s-controller" (include "computedomain-controller.nvidiaName" .)) }}
{{- end }}

{{/*
NVIDIA_CONTROLLER_SELECTORS when nameOverride names an install the controller's default does
not know (the default knows dra-driver-nvidia-gpu and nvidia-dra-driver-gpu): the default plus
"<nameOverride>-component=controller"; "" otherwise (the controller's default applies).
*/}}
{{- define "computedomain-controller.nvidiaControllerSelectors" -}}
{{- $known := list "dra-driver-nvidia-gpu" "nvidia-dra-driver-gpu" }}
{{- $name := include "computedomain-controller.nvidiaName" . }}
{{- if not (has $name $known) }}
{{- range $known }}{{ . }}-component=controller;{{ end }}{{ $name }}-component=controller
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
The value of an entry of controller.containers.computeDomain.env (the last of that name, as the
Deployment renders it), "" when there is none or it has no `value`. Called with
(list $ "NAME").
*/}}
{{- define "computedomain-controller.userEnv" -}}
{{- $root := index . 0 }}
{{- $name := index . 1 }}
{{- $value := "" }}
{{- range ($root.Values.controller.containers.computeDomain.env | default list) }}
{{- if eq (toString .name) $name }}
{{- $value = toString (.value | default "") }}
{{- end }}
{{- end }}
{{- $value }}
{{- end }}

{{/*
The driver namespace (NAMESPACE): daemon DaemonSets, their pods, cliques, the daemon
ServiceAccount. driverNamespace, else a NAMESPACE value in the env values, else the namespace
NVIDIA's kubelet plugin runs in (found in the cluster at install and upgrade time: ours must
manage NVIDIA's namespace, or two controllers would write), else the controller's namespace.
*/}}
{{- define "computedomain-controller.driverNamespace" -}}
{{- $fromEnv := include "computedomain-controller.userEnv" (list . "NAMESPACE") | trim }}
{{- if and .Values.driverNamespace $fromEnv (ne $fromEnv .Values.driverNamespace) }}
{{- fail (printf "driverNamespace=%s and env NAMESPACE=%s disagree: set one of them" .Values.driverNamespace $fromEnv) }}
{{- end }}
{{- /* if/else, not `default`: a pipeline runs every argument, and the cluster is asked (and two
plugins' namespaces fail) only when nothing names the namespace. */}}
{{- if .Values.driverNamespace }}
{{- .Values.driverNamespace }}
{{- else if $fromEnv }}
{{- $fromEnv }}
{{- else }}
{{- include "computedomain-controller.nvidiaNamespace" . | default (include "computedomain-controller.namespace" .) }}
{{- end }}
{{- end }}

{{/*
The namespace of NVIDIA's kubelet plugin DaemonSet (its pods selected by
"<name>-component: kubelet-plugin", or GPU Operator's "app: nvidia-dra-driver-kubelet-plugin"),
"" when none runs or the cluster cannot be asked (helm template: lookup finds nothing). Two
namespaces fail: which one ours should serve is the SRE's to say.
*/}}
{{- define "computedomain-controller.nvidiaNamespace" -}}
{{- $found := list }}
{{- range (lookup "apps/v1" "DaemonSet" "" "").items | default list }}
{{- $ds := . }}
{{- range $key, $value := ((.spec.selector | default dict).matchLabels | default dict) }}
{{- if or (and (hasSuffix "-component" $key) (eq (toString $value) "kubelet-plugin")) (and (eq $key "app") (eq (toString $value) "nvidia-dra-driver-kubelet-plugin")) }}
{{- $found = append $found $ds.metadata.namespace }}
{{- end }}
{{- end }}
{{- end }}
{{- $found = uniq $found | sortAlpha }}
{{- if gt (len $found) 1 }}
{{- fail (printf "NVIDIA's kubelet plugin runs in namespaces %s: set driverNamespace to the one this controller serves" (join ", " $found)) }}
{{- end }}
{{- first $found | default "" }}
{{- end }}

{{/*
The additional namespaces, comma-joined: NVIDIA's ADDITIONAL_NAMESPACES entry of the env values,
split at commas, trimmed, each once, without the driver namespace (as NVIDIA's chart reads it).
*/}}
{{- define "computedomain-controller.additionalNamespaces" -}}
{{- $driverNs := include "computedomain-controller.driverNamespace" . }}
{{- $namespaces := list }}
{{- range splitList "," (include "computedomain-controller.userEnv" (list . "ADDITIONAL_NAMESPACES")) }}
{{- $ns := trim . }}
{{- if and $ns (ne $ns $driverNs) }}
{{- $namespaces = append $namespaces $ns }}
{{- end }}
{{- end }}
{{- join "," (uniq $namespaces) }}
{{- end }}

{{/*
"true" when the controller elects a leader: LEADER_ELECTION_ENABLED in the env values when
given (read as the controller reads it: 1/true/yes/on), else controller.leaderElection.enabled.
*/}}
{{- define "computedomain-controller.leaderElection" -}}
{{- $fromEnv := "" }}
{{- $given := false }}
{{- range (.Values.controller.containers.computeDomain.env | default list) }}
{{- if eq (toString .name) "LEADER_ELECTION_ENABLED" }}
{{- $given = true }}
{{- $fromEnv = toString (.value | default "") | trim | lower }}
{{- end }}
{{- end }}
{{- if $given }}
{{- has $fromEnv (list "1" "true" "yes" "on") }}
{{- else }}
{{- .Values.controller.leaderElection.enabled | toString }}
{{- end }}
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

{{/*
Name of our ClusterRole and ClusterRoleBinding for the IMEX daemon's ServiceAccount: the
fullname with "-controller" turned into "-daemon" (computedomain-daemon by default, as
manifests/rbac). Never NVIDIA's names (its chart's compute-domain-daemon-role and -binding, the
GPU Operator's compute-domain-daemon): installing this chart beside them must leave them alone.
*/}}
{{- define "computedomain-controller.daemonRbacName" -}}
{{- printf "%s-daemon" (include "computedomain-controller.fullname" . | trimSuffix "-controller") | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
"true" when this release may render compute-domain-daemon-service-account in a namespace
(called with (list $ namespace)): no such ServiceAccount exists there yet, or this release made
it (Helm's meta.helm.sh/release-name and -namespace annotations say so, as on an upgrade of it).
One that belongs to anything else, NVIDIA's release, the GPU Operator, `kubectl apply`, is left
as it is; the binding below still names it. Under `helm template` and a client-side dry run
`lookup` sees no cluster, so the ServiceAccount is always rendered there: with NVIDIA's chart in
the driver namespace set daemonServiceAccount.create=false (manifests/helm/values/ do).
*/}}
{{- define "computedomain-controller.daemonServiceAccountIsOurs" -}}
{{- $root := index . 0 }}
{{- $namespace := index . 1 }}
{{- $found := lookup "v1" "ServiceAccount" $namespace "compute-domain-daemon-service-account" }}
{{- if not $found }}
{{- "true" }}
{{- else }}
{{- $annotations := (get $found "metadata" | default dict).annotations | default dict }}
{{- $release := get $annotations "meta.helm.sh/release-name" | default "" }}
{{- $releaseNamespace := get $annotations "meta.helm.sh/release-namespace" | default "" }}
{{- if and (eq $release $root.Release.Name) (eq $releaseNamespace $root.Release.Namespace) }}
{{- "true" }}
{{- end }}
{{- end }}
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

{{/* Our controller image; tag "" means the chart's appVersion. */}}
{{- define "computedomain-controller.controllerImage" -}}
{{- printf "%s:%s" .Values.controllerImage.repository (.Values.controllerImage.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/*
IMAGE_NAME: NVIDIA's driver image as image.* names it, "" when image.tag is empty and the
repository holds no digest: the controller then gives new IMEX daemons the image NVIDIA's kubelet
plugin runs in the driver namespace (one driver image for both), so no NVIDIA release is written
here and an upgrade of NVIDIA's release moves new daemons along.
*/}}
{{- define "computedomain-controller.driverImage" -}}
{{- $tag := .Values.image.tag | toString }}
{{- if $tag }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- else if contains "@" .Values.image.repository }}
{{- .Values.image.repository }}
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
{{- if .Values.daemonImage }}
{{- fail "daemonImage is gone: NVIDIA's key image.repository / image.tag is the IMEX daemon image now, and controllerImage.* ours (after --reuse-values: --set daemonImage=null)" }}
{{- end }}
{{- if regexMatch "(^|/)computedomain-controller([:@]|$)" (toString .Values.image.repository) }}
{{- fail (printf "image.repository=%s is our controller image, but image.* is NVIDIA's DRA driver image, which the IMEX daemons run: set controllerImage.repository instead" (toString .Values.image.repository)) }}
{{- end }}
{{- if and (gt (int .Values.controller.replicas) 1) (ne (include "computedomain-controller.leaderElection" .) "true") }}
{{- fail (printf "controller.replicas=%d with leader election off: every replica would write; set controller.leaderElection.enabled=true or controller.replicas=1" (int .Values.controller.replicas)) }}
{{- end }}
{{- if and .Values.image.tag (not .Values.image.repository) }}
{{- fail "image.tag is set but image.repository is empty: set both to NVIDIA's DRA driver image of the release your kubelet plugin runs, or neither (the kubelet plugin's image is used)" }}
{{- end }}
{{- if and .Values.resourceApiVersion (ne (toString .Values.resourceApiVersion) "resource.k8s.io/v1") }}
{{- fail (printf "resourceApiVersion=%s: the controller writes ResourceClaimTemplates as resource.k8s.io/v1 only (Kubernetes 1.34+), as NVIDIA's v0.4.x controller does" (toString .Values.resourceApiVersion)) }}
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
