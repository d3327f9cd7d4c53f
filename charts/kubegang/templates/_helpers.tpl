{{/* Names, labels and the small pieces every template shares. */}}

{{- define "kubegang.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubegang.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains (include "kubegang.name" .) .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "kubegang.name" .) | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The agent's ServiceAccount: a fixed name, because agent/policy/own-node-only.yaml matches it. */}}
{{- define "kubegang.agentServiceAccount" -}}kubegang-agent{{- end -}}

{{/* Name of one component's objects: <fullname>-<component>. */}}
{{- define "kubegang.component" -}}
{{- printf "%s-%s" (include "kubegang.fullname" .root) .component -}}
{{- end -}}

{{- define "kubegang.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "kubegang.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubegang
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "operator"). */}}
{{- define "kubegang.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubegang.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kubegang.componentLabels" -}}
{{ include "kubegang.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kubegang.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The extender's in-cluster DNS name (what its server certificate names). */}}
{{- define "kubegang.extenderHost" -}}
{{- printf "%s.%s.svc" (include "kubegang.component" (dict "root" . "component" "extender")) .Release.Namespace -}}
{{- end -}}

{{- define "kubegang.extenderTlsSecret" -}}
{{- include "kubegang.component" (dict "root" . "component" "extender-tls") -}}
{{- end -}}

{{- define "kubegang.clientTlsSecret" -}}
{{- include "kubegang.component" (dict "root" . "component" "client-tls") -}}
{{- end -}}

{{/* Where every component finds its certificate (kubernetes.io/tls layout, as cert-manager writes it). */}}
{{- define "kubegang.tlsDir" -}}/etc/kubegang/tls{{- end -}}

{{- define "kubegang.podSecurityContext" -}}
{{- toYaml .Values.securityContext.pod -}}
{{- end -}}

{{- define "kubegang.containerSecurityContext" -}}
{{- toYaml .Values.securityContext.container -}}
{{- end -}}

{{/* Scheduling knobs shared by every workload: call with the component's values. */}}
{{/*
A component's PriorityClass: its own priorityClassName when set, else the chart's class of that tier
(templates/priority-classes.yaml) when priorityClasses.create, else none.
Call with (dict "root" $ "v" <component values> "tier" "critical"|"node-critical").
*/}}
{{- define "kubegang.priorityClassName" -}}
{{- if .v.priorityClassName -}}
{{- .v.priorityClassName -}}
{{- else if .root.Values.priorityClasses.create -}}
{{- include "kubegang.component" (dict "root" .root "component" .tier) -}}
{{- end -}}
{{- end -}}

{{- define "kubegang.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/*
The kubegang scheduler profile's name, read from files/kubegang-scheduler.yaml (the one scheduler
configuration): the GPU routing policy sends pods to exactly the profile the chart's scheduler runs.
*/}}
{{- define "kubegang.schedulerName" -}}
{{- $line := regexFind "(?m)^\\s*-\\s*schedulerName:\\s*\\S+" (.Files.Get "files/kubegang-scheduler.yaml") -}}
{{- if not $line -}}
{{- fail "files/kubegang-scheduler.yaml names no profile (profiles[0].schedulerName)" -}}
{{- end -}}
{{- regexReplaceAll "^.*schedulerName:\\s*" $line "" | trimAll "\"'" -}}
{{- end -}}

{{/* Namespace and pod label whose value "disabled" opts out of GPU routing (templates/gpu-routing.yaml). */}}
{{- define "kubegang.routingLabel" -}}kubegang.io/routing{{- end -}}

{{/* The metrics listeners' serving certificate (ca.crt, tls.crt, tls.key), and the name it is issued to:
the ServiceMonitor verifies every kubegang target against that one name. */}}
{{- define "kubegang.metricsTlsSecret" -}}
{{- include "kubegang.component" (dict "root" . "component" "metrics-tls") -}}
{{- end -}}
{{- define "kubegang.metricsServerName" -}}
{{- include "kubegang.component" (dict "root" . "component" "metrics") -}}
{{- end -}}
{{- define "kubegang.metricsTlsDir" -}}/etc/kubegang/metrics-tls{{- end -}}

{{/* The flags that put a process's /metrics behind HTTPS and the token check (kubegang.authn), or not. */}}
{{- define "kubegang.metricsAuthArgs" -}}
{{- if .Values.metricsAuth.enabled }}
- --metrics-auth=on
- --metrics-tls-cert={{ include "kubegang.metricsTlsDir" . }}/tls.crt
- --metrics-tls-key={{ include "kubegang.metricsTlsDir" . }}/tls.key
{{- else }}
- --metrics-auth=off
{{- end }}
{{- end -}}

{{/*
Numbers in flags and fields. A value from a `-f` values file is a float64, which a template prints in
scientific notation from a million on (`--api-burst=1e+06`, `replicas: 1e+06`), and neither the
processes' flag parsers nor the API server take that for an integer; `--set` gives int64 and is not
affected. So every integer value is printed through `int64`; a value the schema lets be fractional
("number": apiQps, the backfill delays, pollIntervalSeconds) through "kubegang.number", whose toJson
prints plain decimals ("1000000", "0.5"); an int-or-percent value through "kubegang.intOrPercent".
*/}}
{{- define "kubegang.number" -}}
{{- toJson . -}}
{{- end -}}

{{- define "kubegang.intOrPercent" -}}
{{- if kindIs "string" . -}}{{- . -}}{{- else -}}{{- int64 . -}}{{- end -}}
{{- end -}}

{{/*
Refuse, naming both values, two listeners of one process on the same port: the process would bind
the second and exit "address already in use" at every start (CrashLoopBackOff) without naming either
value. Call with (dict "component" "operator" "ports" (list (list "metricsPort" 8080) (list "healthPort" 8081))).
*/}}
{{- define "kubegang.distinctPorts" -}}
{{- $seen := dict -}}
{{- range .ports -}}
{{- $port := toString (int64 (index . 1)) -}}
{{- if hasKey $seen $port -}}
{{- fail (printf "%s.%s and %s.%s are both %s: the %s cannot listen twice on one port (it would exit with \"address already in use\"); give each its own port" $.component (get $seen $port) $.component (index . 0) $port $.component) -}}
{{- end -}}
{{- $_ := set $seen $port (index . 0) -}}
{{- end -}}
{{- end -}}
