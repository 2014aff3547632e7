{{/*
Chart name, truncated to 63 characters (a DNS label).
*/}}
{{- define "cacheroute.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: <release>-<chart>, or <release> when it already contains the chart
name; fullnameOverride wins. Truncated to 63 characters.
*/}}
{{- define "cacheroute.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
chart label value: <name>-<version>.
*/}}
{{- define "cacheroute.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels (immutable in a Deployment: keep them minimal and stable).
*/}}
{{- define "cacheroute.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cacheroute.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Common labels for every resource.
*/}}
{{- define "cacheroute.labels" -}}
helm.sh/chart: {{ include "cacheroute.chart" . }}
{{ include "cacheroute.selectorLabels" . }}
app.kubernetes.io/version: {{ include "cacheroute.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cacheroute
app.kubernetes.io/component: {{ ternary "inference" "router" (eq .Values.mode "sidecar") }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
ServiceAccount name.
*/}}
{{- define "cacheroute.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cacheroute.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
cacheroute image tag: image.tag, defaulting to the chart appVersion.
*/}}
{{- define "cacheroute.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/*
Image reference from an {repository, tag, digest} object. Call with
(dict "image" .Values.image "defaultTag" "...").
*/}}
{{- define "cacheroute.imageRef" -}}
{{- $img := .image }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- $tag := default .defaultTag $img.tag }}
{{- if $tag }}
{{- printf "%s:%s" $img.repository (toString $tag) }}
{{- else }}
{{- $img.repository }}
{{- end }}
{{- end }}
{{- end }}

{{/*
host:port, bracketing IPv6 hosts. Call with (list HOST PORT).
*/}}
{{- define "cacheroute.hostPort" -}}
{{- $host := index . 0 | toString }}
{{- $port := index . 1 | int }}
{{- if and (contains ":" $host) (not (hasPrefix "[" $host)) }}
{{- printf "[%s]:%d" $host $port }}
{{- else }}
{{- printf "%s:%d" $host $port }}
{{- end }}
{{- end }}

{{/*
The sidecar flags the chart passes through from cacheroute.config, in flag
order: "<values key>=<flag name>". The environment variable is
CACHEROUTE_ + the flag name upper-cased with '-' -> '_'. listen,
metrics-listen, shutdown-grace and sysfs-root are rendered separately.
*/}}
{{- define "cacheroute.configFlags" -}}
- threads=threads
- maxMessageBytes=max-message-bytes
- replanInterval=replan-interval
- receipts=receipts
- replan=replan
- maxImbalance=max-imbalance
- admitHysteresis=admit-hysteresis
- routeBy=route-by
- loadBound=load-bound
- inflightTtl=inflight-ttl
- inflightMax=inflight-max
- logLevel=log-level
- handshakeTimeout=handshake-timeout
- maxConnectionIdle=max-connection-idle
- maxConnectionAge=max-connection-age
- maxConnectionAgeGrace=max-connection-age-grace
- maxConcurrentStreams=max-concurrent-streams
- memoryQuotaBytes=memory-quota-bytes
- maxCallsPerMethod=max-calls-per-method
- requestDeadline=request-deadline
- replyDeadline=reply-deadline
- maxPendingReplyBytes=max-pending-reply-bytes
- metricsTimeout=metrics-timeout
- metricsMaxConnections=metrics-max-connections
- metricsPerIpConnections=metrics-per-ip-connections
- nShards=n-shards
- qcap=qcap
- warmSlotsPerShard=warm-slots-per-shard
- halfLife=half-life
- window=window
- estimatorClock=estimator-clock
- maxOwners=max-owners
- modelConfig=model-config
- modelLayers=model-layers
- modelKvHeads=model-kv-heads
- modelHeadDim=model-head-dim
- kvDtypeBytes=kv-dtype-bytes
- tensorParallel=tensor-parallel
- kvBytesPerToken=kv-bytes-per-token
- modelParamsB=model-params-b
- modelDModel=model-d-model
- mfu=mfu
- peakTflops=peak-tflops
- prefillFixedMs=prefill-fixed-ms
- prefillCoeffs=prefill-coeffs
- kvSources=kv-source
- linkGbps=link-gbps
- linkEfficiency=link-efficiency
- h2dGbps=h2d-gbps
- loadFixedMs=load-fixed-ms
- linkQueuePenalty=link-queue-penalty
- decisionMarginMs=decision-margin-ms
- calibrate=calibrate
- calibrationHalfLife=calibration-half-life
- calibrationMinSamples=calibration-min-samples
- probeInterval=probe-interval
- nics=nic
{{- end }}

{{/*
CACHEROUTE_<FLAG> for a flag name.
*/}}
{{- define "cacheroute.flagEnvName" -}}
{{- printf "CACHEROUTE_%s" (. | upper | replace "-" "_") }}
{{- end }}

{{/*
One scalar flag value as the binary's command line would take it. Numbers go
through toJson so that 67108864 stays 67108864 (not 6.7108864e+07, as Go
prints a YAML-decoded float64).
*/}}
{{- define "cacheroute.scalar" -}}
{{- if kindIs "string" . }}
{{- . }}
{{- else if kindIs "bool" . }}
{{- ternary "true" "false" . }}
{{- else }}
{{- toJson . }}
{{- end }}
{{- end }}

{{/*
A kv-source item: "NAME=GBPS[,RTT_MS]" as given, or built from
{name, gbps, rttMs}.
*/}}
{{- define "cacheroute.kvSource" -}}
{{- if kindIs "map" . }}
{{- $s := printf "%s=%s" .name (include "cacheroute.scalar" .gbps) }}
{{- if not (kindIs "invalid" .rttMs) }}
{{- $s = printf "%s,%s" $s (include "cacheroute.scalar" .rttMs) }}
{{- end }}
{{- $s }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/*
The value of one config flag, or "" when it is not set. Lists are joined
with single spaces; prefill-coeffs given as a list is joined with commas;
calibrate given as a boolean (YAML reads an unquoted on/off as one) is
on or off. Call with (list KEY VALUE).
*/}}
{{- define "cacheroute.flagValue" -}}
{{- $key := index . 0 }}
{{- $v := index . 1 }}
{{- if kindIs "invalid" $v }}
{{- else if and (eq $key "calibrate") (kindIs "bool" $v) }}
{{- ternary "on" "off" $v }}
{{- else if kindIs "slice" $v }}
{{- $items := list }}
{{- range $v }}
{{- if eq $key "kvSources" }}
{{- $items = append $items (include "cacheroute.kvSource" .) }}
{{- else }}
{{- $items = append $items (include "cacheroute.scalar" .) }}
{{- end }}
{{- end }}
{{- join (ternary "," " " (eq $key "prefillCoeffs")) $items }}
{{- else }}
{{- include "cacheroute.scalar" $v }}
{{- end }}
{{- end }}

{{/*
The shutdown grace in whole seconds (rounded up).
*/}}
{{- define "cacheroute.shutdownGrace" -}}
{{- .Values.cacheroute.config.shutdownGrace | float64 | ceil | int64 }}
{{- end }}

{{/*
terminationGracePeriodSeconds: the user's value (checked to exceed
--shutdown-grace) or shutdownGrace + 5.
*/}}
{{- define "cacheroute.terminationGracePeriodSeconds" -}}
{{- $grace := .Values.cacheroute.config.shutdownGrace | float64 }}
{{- $t := .Values.terminationGracePeriodSeconds }}
{{- if kindIs "invalid" $t }}
{{- add (include "cacheroute.shutdownGrace" . | int64) 5 }}
{{- else if le ($t | float64) $grace }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be greater than cacheroute.config.shutdownGrace (%v): the kubelet would kill cacheroute before it has drained. Raise it, or leave it unset to get shutdownGrace + 5." $t $grace) }}
{{- else }}
{{- $t | int64 }}
{{- end }}
{{- end }}

{{/*
The environment of the cacheroute container: CACHEROUTE_* flags and the
NVIDIA runtime variables, then extraEnv. Fails on a duplicate name.
*/}}
{{- define "cacheroute.env" -}}
{{- $cfg := .Values.cacheroute.config }}
{{- $env := list }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "listen") "value" (include "cacheroute.hostPort" (list $cfg.listenHost .Values.cacheroute.ports.grpc))) }}
{{- if .Values.metrics.enabled }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "metrics-listen") "value" (include "cacheroute.hostPort" (list $cfg.metricsListenHost .Values.cacheroute.ports.metrics))) }}
{{- else }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "metrics-listen") "value" "") }}
{{- end }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "shutdown-grace") "value" (include "cacheroute.scalar" $cfg.shutdownGrace)) }}
{{- range (include "cacheroute.configFlags" . | fromYamlArray) }}
{{- $pair := splitList "=" . }}
{{- $key := index $pair 0 }}
{{- $value := include "cacheroute.flagValue" (list $key (get $cfg $key)) }}
{{- if ne $value "" }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" (index $pair 1)) "value" $value) }}
{{- end }}
{{- end }}
{{- if $cfg.sysfsRoot }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "sysfs-root") "value" $cfg.sysfsRoot) }}
{{- else if .Values.cacheroute.hostSysfs.enabled }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "sysfs-root") "value" .Values.cacheroute.hostSysfs.mountPath) }}
{{- end }}
{{- if .Values.cacheroute.nvidia.enabled }}
{{- $env = append $env (dict "name" "NVIDIA_VISIBLE_DEVICES" "value" (toString .Values.cacheroute.nvidia.visibleDevices)) }}
{{- $env = append $env (dict "name" "NVIDIA_DRIVER_CAPABILITIES" "value" .Values.cacheroute.nvidia.driverCapabilities) }}
{{- end }}
{{- $names := list }}
{{- range $env }}
{{- $names = append $names .name }}
{{- end }}
{{- /* Flags the chart knows are owned by values, set or not. */}}
{{- range (list "listen" "metrics-listen" "shutdown-grace" "sysfs-root") }}
{{- $names = append $names (include "cacheroute.flagEnvName" .) }}
{{- end }}
{{- range (include "cacheroute.configFlags" . | fromYamlArray) }}
{{- $names = append $names (include "cacheroute.flagEnvName" (index (splitList "=" .) 1)) }}
{{- end }}
{{- range .Values.cacheroute.extraEnv }}
{{- if has .name $names }}
{{- fail (printf "cacheroute.extraEnv sets %s, which the chart renders from its values; set the value under cacheroute.config (or cacheroute.nvidia) instead." .name) }}
{{- end }}
{{- $names = append $names .name }}
{{- $env = append $env . }}
{{- end }}
{{- toYaml $env }}
{{- end }}

{{/*
A native gRPC probe. Call with (dict "probe" <values> "port" <int>).
*/}}
{{- define "cacheroute.grpcProbe" -}}
grpc:
  port: {{ .port | int }}
  service: {{ .probe.service | quote }}
initialDelaySeconds: {{ .probe.initialDelaySeconds | int }}
periodSeconds: {{ .probe.periodSeconds | int }}
timeoutSeconds: {{ .probe.timeoutSeconds | int }}
failureThreshold: {{ .probe.failureThreshold | int }}
{{- end }}

{{/*
The cacheroute container.
*/}}
{{- define "cacheroute.container" -}}
name: cacheroute
image: {{ include "cacheroute.imageRef" (dict "image" .Values.image "defaultTag" .Chart.AppVersion) | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- if and .Values.cacheroute.nativeSidecar (eq .Values.mode "sidecar") }}
restartPolicy: Always
{{- end }}
{{- with .Values.cacheroute.extraArgs }}
args:
  {{- toYaml . | nindent 2 }}
{{- end }}
ports:
  - name: grpc
    containerPort: {{ .Values.cacheroute.ports.grpc | int }}
    protocol: TCP
  {{- if .Values.metrics.enabled }}
  - name: metrics
    containerPort: {{ .Values.cacheroute.ports.metrics | int }}
    protocol: TCP
  {{- end }}
env:
  {{- include "cacheroute.env" . | nindent 2 }}
{{- if .Values.cacheroute.startupProbe.enabled }}
startupProbe:
  {{- include "cacheroute.grpcProbe" (dict "probe" .Values.cacheroute.startupProbe "port" .Values.cacheroute.ports.grpc) | nindent 2 }}
{{- end }}
{{- if .Values.cacheroute.livenessProbe.enabled }}
livenessProbe:
  {{- include "cacheroute.grpcProbe" (dict "probe" .Values.cacheroute.livenessProbe "port" .Values.cacheroute.ports.grpc) | nindent 2 }}
{{- end }}
{{- if .Values.cacheroute.readinessProbe.enabled }}
readinessProbe:
  {{- include "cacheroute.grpcProbe" (dict "probe" .Values.cacheroute.readinessProbe "port" .Values.cacheroute.ports.grpc) | nindent 2 }}
{{- end }}
{{- with .Values.cacheroute.resources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.cacheroute.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumeMounts:
  - name: cacheroute-tmp
    mountPath: /tmp
  {{- if .Values.cacheroute.hostSysfs.enabled }}
  - name: host-sys
    mountPath: {{ .Values.cacheroute.hostSysfs.mountPath }}
    readOnly: true
  {{- end }}
  {{- with .Values.cacheroute.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/*
The inference container (sidecar mode): name and image from values, every
other field passed through.
*/}}
{{- define "cacheroute.inferenceContainer" -}}
{{- $c := omit .Values.inference "name" "image" -}}
name: {{ .Values.inference.name }}
image: {{ include "cacheroute.imageRef" (dict "image" .Values.inference.image "defaultTag" "") | quote }}
{{- with .Values.inference.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- with $c }}
{{ toYaml . }}
{{- end }}
{{- end }}
