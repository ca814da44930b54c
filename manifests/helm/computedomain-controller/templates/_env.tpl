{{/*
The controller container's env as the chart sets it, a YAML list under NVIDIA's names, so this
Deployment and NVIDIA's chart configure the two controllers alike. deployment.yaml merges
controller.containers.computeDomain.env into it by name.
- IMAGE_NAME is NVIDIA's DRA driver image (image.*), rendered only when image.tag is set (or
  the repository holds a digest): unset, the controller gives new IMEX daemons the image of
  NVIDIA's kubelet plugin (our image has no daemon; the two must be one release).
- LOG_VERBOSITY is controller.logVerbosity, or logVerbosity when that is null (NVIDIA's chart
  gives logVerbosity to its controller and to the daemons).
- NVIDIA_VISIBLE_DEVICES=void: the NVIDIA container runtime must not hand GPUs to the controller.
*/}}
{{- define "computedomain-controller.env" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
{{- $driverNs := include "computedomain-controller.driverNamespace" . }}
- name: NAMESPACE
  {{- if or .Values.driverNamespace (ne $driverNs (include "computedomain-controller.namespace" .)) }}
  value: {{ $driverNs | quote }}
  {{- else }}
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
  {{- end }}
{{- with include "computedomain-controller.driverImage" . }}
- name: IMAGE_NAME
  value: {{ . | quote }}
{{- end }}
{{- with .Values.imagePullSecrets }}
- name: CD_DAEMON_IMAGE_PULL_SECRET_NAMES
  value: "{{ range $i, $s := . }}{{ if $i }},{{ end }}{{ $s.name }}{{ end }}"
{{- end }}
{{- with .Values.daemonPods.priorityClassName }}
- name: CD_DAEMON_PRIORITY_CLASS_NAME
  value: {{ . | quote }}
{{- end }}
{{- with .Values.daemonPods.resources }}
- name: CD_DAEMON_RESOURCES_JSON
  value: {{ toJson . | quote }}
{{- end }}
- name: LOG_VERBOSITY_CD_DAEMON
  value: {{ .Values.logVerbosity | toString | quote }}
- name: MAX_NODES_PER_IMEX_DOMAIN
  value: {{ .Values.controller.maxNodesPerImexDomain | toString | quote }}
- name: IMEX_MODE
  value: {{ .Values.resources.computeDomains.imex.mode | quote }}
- name: IMEX_ISOLATION
  value: {{ .Values.resources.computeDomains.imex.isolation | quote }}
{{- with .Values.featureGates }}
- name: FEATURE_GATES
  value: "{{ range $key, $value := . }}{{ $key }}={{ $value }},{{ end }}"
{{- end }}
- name: LEADER_ELECTION_ENABLED
  value: {{ .Values.controller.leaderElection.enabled | toString | quote }}
- name: LEADER_ELECTION_LEASE_LOCK_NAME
  value: {{ include "computedomain-controller.leaseLockName" . | quote }}
- name: LEADER_ELECTION_LEASE_LOCK_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: LEADER_ELECTION_LEASE_DURATION
  value: {{ .Values.controller.leaderElection.leaseDuration | toString | quote }}
- name: LEADER_ELECTION_RENEW_DEADLINE
  value: {{ .Values.controller.leaderElection.renewDeadline | toString | quote }}
- name: LEADER_ELECTION_RETRY_PERIOD
  value: {{ .Values.controller.leaderElection.retryPeriod | toString | quote }}
- name: KUBE_API_QPS
  value: {{ .Values.controller.kubeApiQps | toString | quote }}
- name: KUBE_API_BURST
  value: {{ .Values.controller.kubeApiBurst | toString | quote }}
- name: HTTP_ENDPOINT
  value: {{ ternary .Values.controller.metrics.httpEndpoint "" .Values.controller.metrics.enabled | quote }}
- name: METRICS_PATH
  value: {{ .Values.controller.metrics.metricsPath | quote }}
{{- if and .Values.controller.metrics.enabled .Values.controller.metrics.profilePath }}
- name: PPROF_PATH
  value: {{ .Values.controller.metrics.profilePath | quote }}
{{- end }}
- name: PROBE_ADDRESS
  value: {{ .Values.controller.probes.address | quote }}
- name: LOG_FORMAT
  value: {{ .Values.controller.logFormat | quote }}
- name: LOG_VERBOSITY
  value: {{ ternary .Values.logVerbosity .Values.controller.logVerbosity (kindIs "invalid" .Values.controller.logVerbosity) | toString | quote }}
{{- with .Values.controller.workers }}
- name: WORKERS
  value: {{ . | toString | quote }}
{{- end }}
{{- with include "computedomain-controller.nvidiaControllerSelectors" . }}
- name: NVIDIA_CONTROLLER_SELECTORS
  value: {{ . | quote }}
{{- end }}
{{- if .Values.placementWebhook.enabled }}
- name: PLACEMENT_WEBHOOK_ADDRESS
  value: {{ printf ":%v" .Values.placementWebhook.port | quote }}
- name: PLACEMENT_WEBHOOK_HOSTS
  value: {{ printf "computedomain-placement-webhook.%s.svc" (include "computedomain-controller.namespace" .) | quote }}
{{- if .Values.placementWebhook.certManager.enabled }}
- name: PLACEMENT_WEBHOOK_CERT_DIR
  value: /etc/computedomain/webhook-tls
{{- end }}
{{- end }}
- name: NVIDIA_VISIBLE_DEVICES
  value: void
{{- end }}

{{/*
The env entries of the container: the chart's, each replaced by an entry of the same name from
controller.containers.computeDomain.env, then those entries; of two entries with one name the
later wins, and every name is rendered once.
*/}}
{{- define "computedomain-controller.mergedEnv" -}}
{{- $user := .Values.controller.containers.computeDomain.env | default list }}
{{- $last := dict }}
{{- range $i, $entry := $user }}
{{- if not $entry.name }}
{{- fail (printf "controller.containers.computeDomain.env[%d] has no name" $i) }}
{{- end }}
{{- $_ := set $last (toString $entry.name) $i }}
{{- end }}
{{- $merged := list }}
{{- range (include "computedomain-controller.env" . | fromYamlArray) }}
{{- if not (hasKey $last .name) }}
{{- $merged = append $merged . }}
{{- end }}
{{- end }}
{{- range $i, $entry := $user }}
{{- if eq (get $last (toString $entry.name)) $i }}
{{- $merged = append $merged $entry }}
{{- end }}
{{- end }}
{{- toYaml $merged }}
{{- end }}
