{{/*
Names. The release `kai-scheduler` gives the objects `kai-scheduler` and `kai-podgrouper`; another release
name R gives `R-scheduler` and `R-podgrouper` (a name ending in `-scheduler` loses that suffix first), so two
releases never share a cluster-scoped ClusterRole or ClusterRoleBinding.
*/}}
{{- define "kai.prefix" -}}
{{- $name := default .Release.Name .Values.fullnameOverride -}}
{{- trimSuffix "-scheduler" $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "kai.scheduler.name" -}}
{{- printf "%s-scheduler" (include "kai.prefix" .) -}}
{{- end -}}

{{- define "kai.podgrouper.name" -}}
{{- printf "%s-podgrouper" (include "kai.prefix" .) -}}
{{- end -}}

{{- define "kai.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "kai.labels" -}}
helm.sh/chart: {{ include "kai.chart" . }}
app.kubernetes.io/part-of: kai-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels of a component's objects; call with (dict "ctx" $ "component" "scheduler"). */}}
{{- define "kai.componentLabels" -}}
{{ include "kai.labels" .ctx }}
app.kubernetes.io/name: {{ printf "kai-%s" .component }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Selector labels of a component; call with (dict "ctx" $ "component" "scheduler"). */}}
{{- define "kai.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "kai-%s" .component }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Image of a component; call with (dict "ctx" $ "values" .Values.scheduler). */}}
{{- define "kai.image" -}}
{{- $g := .ctx.Values.global -}}
{{- $tag := .values.image.tag | default $g.imageTag | default .ctx.Chart.AppVersion -}}
{{- if $g.imageRegistry -}}
{{- printf "%s/%s:%s" $g.imageRegistry .values.image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Whether a component elects a leader: "true" or "". Call with the component's values. On at any
replica count ("auto", the former default, means on); off only when asked, and never above one replica,
where it would mean two writers for sure. */}}
{{- define "kai.leaderElect" -}}
{{- $mode := toString .leaderElection -}}
{{- if or (eq $mode "true") (eq $mode "auto") -}}
true
{{- else if eq $mode "false" -}}
{{- if gt (int .replicas) 1 -}}
{{- fail (printf "leaderElection=false needs replicas: 1, not %d: without a Lease every replica writes" (int .replicas)) -}}
{{- end -}}
{{- else -}}
{{- fail (printf "leaderElection must be true or false, not %q" $mode) -}}
{{- end -}}
{{- end -}}

{{/* The Deployment strategy of a component: a `strategy:` block, or nothing for a rolling update. Call
with (dict "ctx" $ "values" .Values.scheduler "name" "kai-scheduler"). Recreate without leader election
(then at least a rollout cannot run two writers), and once more on the upgrade that turns it on: the
running pods hold no Lease, so they would not wait for the new ones to get it. `helm template` cannot
look at the running Deployment and renders a rolling update. */}}
{{- define "kai.strategy" -}}
{{- $recreate := not (include "kai.leaderElect" .values) -}}
{{- if not $recreate -}}
{{- $running := lookup "apps/v1" "Deployment" .ctx.Release.Namespace .name -}}
{{- if $running -}}
{{- $containers := dig "spec" "template" "spec" "containers" list $running -}}
{{- $args := list -}}
{{- if $containers }}{{ $args = (first $containers).args }}{{ end -}}
{{- $recreate = not (has "--leader-elect=true" $args) -}}
{{- end -}}
{{- end -}}
{{- if $recreate -}}
strategy:
  type: Recreate
{{- end -}}
{{- end -}}

{{/* The scheduler's configuration file, with gpusharing.enabled from global.gpuSharing, the
reservation pods' image from the scheduler's, and gpusharing.requireWebhook where the chart installs the
GPU-sharing webhook. */}}
{{- define "kai.scheduler.config" -}}
{{- $config := deepCopy .Values.scheduler.config -}}
{{- $plugins := get $config "plugins" | default dict -}}
{{- $sharing := get $plugins "gpusharing" | default dict -}}
{{- $_ := set $sharing "enabled" (eq (toString .Values.global.gpuSharing) "true") -}}
{{- $_ := set $sharing "reservationImage" (include "kai.image" (dict "ctx" . "values" .Values.scheduler)) -}}
{{- if include "kai.webhook" . }}
{{- $_ := set $sharing "requireWebhook" true -}}
{{- end }}
{{- $_ := set $plugins "gpusharing" $sharing -}}
{{- $_ := set $config "plugins" $plugins -}}
{{- toYaml $config -}}
{{- end -}}

{{/* Flags both components share; call with (dict "ctx" $ "values" .Values.scheduler "lease" "name"). */}}
{{- define "kai.commonArgs" -}}
{{- $g := .ctx.Values.global -}}
- --log-level={{ $g.logLevel }}
- --log-format={{ $g.logFormat }}
- --admin-address=0.0.0.0:{{ .ctx.Values.adminPort }}
{{- if not (kindIs "invalid" .values.kubeQps) }}
- --kube-qps={{ .values.kubeQps }}
{{- end }}
{{- if not (kindIs "invalid" .values.kubeBurst) }}
- --kube-burst={{ .values.kubeBurst }}
{{- end }}
{{- if include "kai.leaderElect" .values }}
- --leader-elect=true
- --lease-name={{ .lease }}
- --lease-namespace={{ .ctx.Release.Namespace }}
{{- else }}
{{- /* Said explicitly: the binaries elect by default. */}}
- --leader-elect=false
{{- end }}
{{- end -}}

{{/* The pod spec parts both components share; call with (dict "ctx" $ "values" .Values.scheduler). */}}
{{- define "kai.podCommon" -}}
{{- $g := .ctx.Values.global -}}
{{- with $g.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $g.podSecurityContext | nindent 2 }}
{{- with $g.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $g.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $g.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $g.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The container parts both components share; call with (dict "ctx" $ "values" .Values.scheduler). */}}
{{- define "kai.containerCommon" -}}
{{- $g := .ctx.Values.global -}}
imagePullPolicy: {{ $g.imagePullPolicy }}
ports:
  - name: admin
    containerPort: {{ .ctx.Values.adminPort }}
    protocol: TCP
{{- range .ports }}
  - {{ toYaml . | nindent 4 | trim }}
{{- end }}
{{- with .values.extraEnv }}
env:
  {{- toYaml . | nindent 2 }}
{{- end }}
livenessProbe:
  {{- toYaml .values.livenessProbe | nindent 2 }}
readinessProbe:
  {{- toYaml .values.readinessProbe | nindent 2 }}
resources:
  {{- toYaml .values.resources | nindent 2 }}
securityContext:
  {{- toYaml $g.securityContext | nindent 2 }}
{{- end -}}

{{/* Whether GPU sharing is on: "true" or "". */}}
{{- define "kai.gpuSharing" -}}
{{- if eq (toString .Values.global.gpuSharing) "true" }}true{{ end -}}
{{- end -}}

{{/* Whether the GPU-sharing admission webhook is installed: "true" or "". */}}
{{- define "kai.webhook" -}}
{{- if and (include "kai.gpuSharing" .) .Values.gpuSharingWebhook.enabled }}true{{ end -}}
{{- end -}}

{{/* Names of the webhook's objects: its Service, Secret and MutatingWebhookConfiguration. */}}
{{- define "kai.webhook.service" -}}
{{- printf "%s-webhook" (include "kai.scheduler.name" .) -}}
{{- end -}}
{{- define "kai.webhook.secret" -}}
{{- printf "%s-webhook-tls" (include "kai.scheduler.name" .) -}}
{{- end -}}
{{- define "kai.webhook.configuration" -}}
{{- printf "%s-gpu-sharing" (include "kai.scheduler.name" .) -}}
{{- end -}}

{{/* Whether cert-manager keeps the webhook's certificate: "true" or "" (the scheduler keeps it). */}}
{{- define "kai.webhook.certManager" -}}
{{- $source := toString .Values.gpuSharingWebhook.certificates.source -}}
{{- if eq $source "certManager" -}}
true
{{- else if ne $source "self" -}}
{{- fail (printf "gpuSharingWebhook.certificates.source must be self or certManager, not %q" $source) -}}
{{- end -}}
{{- end -}}

{{/* The names the API server calls the webhook at, comma-separated: the Service's, or the host of
gpuSharingWebhook.url. */}}
{{- define "kai.webhook.hosts" -}}
{{- with .Values.gpuSharingWebhook.url -}}
{{- (splitList ":" (urlParse .).host) | first -}}
{{- else -}}
{{- $svc := include "kai.webhook.service" . -}}
{{- $ns := .Release.Namespace -}}
{{- printf "%s.%s.svc,%s,%s.%s,%s.%s.svc.cluster.local" $svc $ns $svc $svc $ns $svc $ns -}}
{{- end -}}
{{- end -}}

{{/* The per-kind defaults ConfigMap as "namespace/name", or "" when none is configured. */}}
{{- define "kai.kindDefaults" -}}
{{- if .Values.podgrouper.kindDefaults -}}
{{ .Release.Namespace }}/{{ include "kai.podgrouper.name" . }}-kind-defaults
{{- else if and .Values.podgrouper.kindDefaultsConfigMap.name .Values.podgrouper.kindDefaultsConfigMap.namespace -}}
{{ .Values.podgrouper.kindDefaultsConfigMap.namespace }}/{{ .Values.podgrouper.kindDefaultsConfigMap.name }}
{{- end -}}
{{- end -}}
