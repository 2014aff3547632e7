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
metrics-listen, health-listen, shutdown-grace, sysfs-root, state-file and the
TLS and token files (cacheroute.tls, cacheroute.adminToken) are rendered
separately.
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
- inflightPerCaller=inflight-per-caller
- objectives=objectives
- admitBudgetMs=admit-budget-ms
- admitPressure=admit-pressure
- admitPressureOff=admit-pressure-off
- admitPressureTauS=admit-pressure-tau-s
- admitMeetSlo=admit-meet-slo
- admitMaxQueued=admit-max-queued
- admitMaxPerId=admit-max-per-id
- admitMaxHeldBytes=admit-max-held-bytes
- admitMaxWaitMs=admit-max-wait-ms
- admitTrackedIds=admit-tracked-ids
- blockTokens=block-tokens
- indexBlocks=index-blocks
- maxRouteHashes=max-route-hashes
- missWeight=miss-weight
- routePlanned=route-planned
- scrapeInterval=scrape-interval
- scrapeTimeout=scrape-timeout
- scrapePath=scrape-path
- scrapePort=scrape-port
- scrapeMaxBytes=scrape-max-bytes
- snapshotInterval=snapshot-interval
- logLevel=log-level
- handshakeTimeout=handshake-timeout
- maxConnectionIdle=max-connection-idle
- maxConnectionAge=max-connection-age
- maxConnectionAgeGrace=max-connection-age-grace
- maxConcurrentStreams=max-concurrent-streams
- memoryQuotaBytes=memory-quota-bytes
- maxCallsPerMethod=max-calls-per-method
- maxArrivalsPerCall=max-arrivals-per-call
- requestDeadline=request-deadline
- replyDeadline=reply-deadline
- maxPendingReplyBytes=max-pending-reply-bytes
- maxDecodeBytes=max-decode-bytes
- streamIdleTimeout=stream-idle-timeout
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
- maxReservationMs=max-reservation-ms
- reservationHorizonS=reservation-horizon-s
- reservationConfirmS=reservation-confirm-s
- probeInterval=probe-interval
- nics=nic
- adminIdentities=admin-identity
- routeIdentities=route-identity
- routeAccess=route-access
- kvEvents=kv-events
- kvEventsMaxFrameBytes=kv-events-max-frame-bytes
- kvEventsTopic=kv-events-topic
- kvEventsDpSize=kv-events-dp-size
- reservations=reservations
- compressedRequests=compressed-requests
- endpointFailErrors=endpoint-fail-errors
- endpointFailWindow=endpoint-fail-window
- endpointDownFor=endpoint-down-for
{{- end }}

{{/*
The shared state backend's flags (docs/replicas.md), from
cacheroute.stateBackend, rendered only when its url is set: "<values
key>=<flag name>", as configFlags.
*/}}
{{- define "cacheroute.backendFlags" -}}
- url=state-backend
- cluster=cluster
- syncInterval=sync-interval
- leaseTtl=lease-ttl
- replicaTtl=replica-ttl
- timeoutMs=backend-timeout
- start=backend-start
{{- end }}

{{/*
The endpoint picker's flags (docs/epp.md), from epp, rendered in mode epp
only: "<values key>=<flag name>", as configFlags. --epp-listen is rendered
from epp.listenHost and epp.port.
*/}}
{{- define "cacheroute.eppFlags" -}}
- fallbacks=epp-fallbacks
- tokens=epp-tokens
- ownerHeader=epp-owner-header
- maxBodyBytes=epp-max-body-bytes
- tokenizeTimeout=epp-tokenize-timeout
- bodyMode=epp-body-mode
- maxRequests=epp-max-requests
- maxBufferedBytes=epp-max-buffered-bytes
- baseModel=epp-base-model
{{- end }}

{{/*
Flags rendered from values outside cacheroute.config and
cacheroute.stateBackend (replica-id comes from the pod's name).
*/}}
{{- define "cacheroute.ownedFlags" -}}
- listen
- metrics-listen
- health-listen
- shutdown-grace
- sysfs-root
- tls-cert
- tls-key
- tls-client-ca
- admin-token-file
- state-file
- replica-id
- state-backend-password-file
- endpoints-file
- endpoints-dns
- dns-interval
- dns-server
- kv-events-template
- epp-listen
- endpoints-k8s-pool
- k8s-api
- k8s-token-file
- k8s-ca-file
{{- end }}

{{/*
The gRPC listen host: config.listenHost, else 127.0.0.1 in sidecar mode
(only the engine in the same pod needs it) and 0.0.0.0 standalone.
*/}}
{{- define "cacheroute.listenHost" -}}
{{- $h := .Values.cacheroute.config.listenHost | default "" | toString }}
{{- if $h }}{{ $h }}{{ else if eq .Values.mode "sidecar" }}127.0.0.1{{ else }}0.0.0.0{{ end }}
{{- end }}

{{/*
The metrics listen host: config.metricsListenHost, else 127.0.0.1 in
sidecar mode without a ServiceMonitor, 0.0.0.0 otherwise.
*/}}
{{- define "cacheroute.metricsListenHost" -}}
{{- $h := .Values.cacheroute.config.metricsListenHost | default "" | toString }}
{{- if $h }}{{ $h }}{{ else if and (eq .Values.mode "sidecar") (not .Values.metrics.serviceMonitor.enabled) }}127.0.0.1{{ else }}0.0.0.0{{ end }}
{{- end }}

{{/*
"true" when --health-listen is rendered (and the probes use it): with TLS,
or when the gRPC port binds loopback (the kubelet probes the pod IP).
*/}}
{{- define "cacheroute.healthListener" -}}
{{- $h := include "cacheroute.listenHost" . }}
{{- if or .Values.cacheroute.tls.enabled (has $h (list "127.0.0.1" "::1" "localhost")) }}true{{ end }}
{{- end }}

{{/*
The port the kubelet's gRPC probes use.
*/}}
{{- define "cacheroute.probePort" -}}
{{- ternary .Values.cacheroute.ports.health .Values.cacheroute.ports.grpc (eq (include "cacheroute.healthListener" .) "true") | int }}
{{- end }}

{{/*
Whether the Service is rendered: service.enabled, or by default in
standalone and epp modes, or when a ServiceMonitor needs one.
*/}}
{{- define "cacheroute.serviceEnabled" -}}
{{- $e := .Values.service.enabled }}
{{- if kindIs "invalid" $e }}{{ if or (ne .Values.mode "sidecar") .Values.metrics.serviceMonitor.enabled }}true{{ end }}{{ else if $e }}true{{ end }}
{{- end }}

{{/*
The TLS and admin-token flags as env entries (a list of dicts, as YAML).
Fails when TLS is on without a Secret, or admin identities without mTLS.
*/}}
{{- define "cacheroute.securityEnv" -}}
{{- $tls := .Values.cacheroute.tls }}
{{- $env := list }}
{{- if $tls.enabled }}
{{- if not $tls.secretName }}
{{- fail "cacheroute.tls.enabled needs cacheroute.tls.secretName (a kubernetes.io/tls Secret)" }}
{{- end }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "tls-cert") "value" (printf "%s/tls.crt" $tls.mountPath)) }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "tls-key") "value" (printf "%s/tls.key" $tls.mountPath)) }}
{{- if $tls.mutual }}
{{- $ca := ternary (printf "%s-ca/ca.crt" $tls.mountPath) (printf "%s/ca.crt" $tls.mountPath) (ne $tls.clientCASecretName "") }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "tls-client-ca") "value" $ca) }}
{{- end }}
{{- end }}
{{- if and .Values.cacheroute.config.adminIdentities (not (and $tls.enabled $tls.mutual)) }}
{{- fail "cacheroute.config.adminIdentities needs cacheroute.tls.enabled and cacheroute.tls.mutual (identities come from verified client certificates)" }}
{{- end }}
{{- if and .Values.cacheroute.config.routeIdentities (not (and $tls.enabled $tls.mutual)) }}
{{- fail "cacheroute.config.routeIdentities needs cacheroute.tls.enabled and cacheroute.tls.mutual (identities come from verified client certificates)" }}
{{- end }}
{{- with .Values.cacheroute.adminToken }}
{{- if .secretName }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "admin-token-file") "value" (printf "%s/%s" .mountPath .key)) }}
{{- end }}
{{- end }}
{{- toYaml $env }}
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
Env entries (a list of dicts, as YAML) for a flag table ("<key>=<flag>"
lines, as configFlags) and the values it reads; unset values are left out.
Call with (list TABLE VALUES).
*/}}
{{- define "cacheroute.tableEnv" -}}
{{- $values := index . 1 }}
{{- $env := list }}
{{- range (index . 0 | fromYamlArray) }}
{{- $pair := splitList "=" . }}
{{- $key := index $pair 0 }}
{{- $value := include "cacheroute.flagValue" (list $key (get $values $key)) }}
{{- if ne $value "" }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" (index $pair 1)) "value" $value) }}
{{- end }}
{{- end }}
{{- toYaml $env }}
{{- end }}

{{/*
The state backend URL: cacheroute.stateBackend.url, else the chart's own
Redis when redis.enabled, else "" (off). Both set fails: the chart's Redis
would run unused.
*/}}
{{- define "cacheroute.stateBackendUrl" -}}
{{- $url := .Values.cacheroute.stateBackend.url }}
{{- if .Values.redis.enabled }}
{{- if $url }}
{{- fail (printf "redis.enabled and cacheroute.stateBackend.url (%s) are both set: the chart's Redis would run unused. Leave cacheroute.stateBackend.url empty to use the chart's Redis, or set redis.enabled=false to use the existing one." $url) }}
{{- end }}
{{- printf "redis://%s.%s.svc:%d/%d" (include "cacheroute.redis.fullname" .) .Release.Namespace (.Values.redis.port | int) (.Values.redis.db | int) }}
{{- else }}
{{- $url }}
{{- end }}
{{- end }}

{{/*
The chart's Redis (redis.enabled): its name, <fullname>-redis (the full
name trimmed so that the suffix fits in 63 characters).
*/}}
{{- define "cacheroute.redis.fullname" -}}
{{- printf "%s-redis" (include "cacheroute.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{/*
The Redis pods' selector labels: a name of their own, so that neither
Deployment's selector matches the other's pods.
*/}}
{{- define "cacheroute.redis.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-redis" (include "cacheroute.name" . | trunc 57 | trimSuffix "-") }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of the chart's Redis objects.
*/}}
{{- define "cacheroute.redis.labels" -}}
helm.sh/chart: {{ include "cacheroute.chart" . }}
{{ include "cacheroute.redis.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.redis.image.tag | default "latest" | toString | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cacheroute
app.kubernetes.io/component: redis
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The --cluster name: stateBackend.cluster, else <namespace>.<fullname>, so
that two releases sharing one Redis never merge their rates (the binary's
own default, "cacheroute", would be the same for both).
*/}}
{{- define "cacheroute.backendCluster" -}}
{{- .Values.cacheroute.stateBackend.cluster | default (printf "%s.%s" .Release.Namespace (include "cacheroute.fullname" .)) }}
{{- end }}

{{/*
The shared state backend's env entries (a list of dicts, as YAML), empty
without stateBackend.url; the password file's only with passwordSecret.name. The replica id is the pod's name: unique among
live pods, and kept across container restarts, so a restarted container
takes its own counts back.
*/}}
{{- define "cacheroute.backendEnv" -}}
{{- $sb := .Values.cacheroute.stateBackend }}
{{- $url := include "cacheroute.stateBackendUrl" . }}
{{- $env := list }}
{{- if $url }}
{{- $values := deepCopy $sb }}
{{- $_ := set $values "url" $url }}
{{- $_ = set $values "cluster" (include "cacheroute.backendCluster" .) }}
{{- $env = include "cacheroute.tableEnv" (list (include "cacheroute.backendFlags" .) $values) | fromYamlArray }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "replica-id") "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name"))) }}
{{- with $sb.passwordSecret }}
{{- if .name }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "state-backend-password-file") "value" (printf "%s/%s" .mountPath .key)) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $env }}
{{- end }}

{{/*
Fails rendering where replicas would answer different routes: several
standalone or epp pods without a shared state backend (each would plan from its own
share of the arrivals), or a backend with the calls clock (per-replica call
counts do not add up to one rate).
*/}}
{{- define "cacheroute.checkReplicas" -}}
{{- $n := .Values.replicaCount | int }}
{{- $url := include "cacheroute.stateBackendUrl" . }}
{{- if and (ne .Values.mode "sidecar") (gt $n 1) (not $url) }}
{{- fail (printf "replicaCount %d in %s mode needs cacheroute.stateBackend.url (an existing Redis, redis://HOST:PORT[/DB] or unix:PATH) or redis.enabled=true (the chart's own): without it each replica plans from its own share of the arrivals and answers different routes for the same owner. Set one, or replicaCount: 1." $n .Values.mode) }}
{{- end }}
{{- if and $url (eq (toString .Values.cacheroute.config.estimatorClock) "calls") }}
{{- fail "cacheroute.stateBackend.url needs cacheroute.config.estimatorClock seconds (or unset): the calls clock counts each replica's own calls, so replicas' rates cannot be added." }}
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
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "listen") "value" (include "cacheroute.hostPort" (list (include "cacheroute.listenHost" .) .Values.cacheroute.ports.grpc))) }}
{{- if eq (include "cacheroute.healthListener" .) "true" }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "health-listen") "value" (include "cacheroute.hostPort" (list $cfg.healthListenHost .Values.cacheroute.ports.health))) }}
{{- end }}
{{- $env = concat $env (include "cacheroute.securityEnv" . | fromYamlArray) }}
{{- if .Values.metrics.enabled }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "metrics-listen") "value" (include "cacheroute.hostPort" (list (include "cacheroute.metricsListenHost" .) .Values.cacheroute.ports.metrics))) }}
{{- else }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "metrics-listen") "value" "") }}
{{- end }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "shutdown-grace") "value" (include "cacheroute.scalar" $cfg.shutdownGrace)) }}
{{- $env = concat $env (include "cacheroute.tableEnv" (list (include "cacheroute.configFlags" .) $cfg) | fromYamlArray) }}
{{- $env = concat $env (include "cacheroute.backendEnv" . | fromYamlArray) }}
{{- if eq .Values.mode "epp" }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "epp-listen") "value" (include "cacheroute.hostPort" (list .Values.epp.listenHost .Values.epp.port))) }}
{{- $env = concat $env (include "cacheroute.tableEnv" (list (include "cacheroute.eppFlags" .) .Values.epp) | fromYamlArray) }}
{{- end }}
{{- if $cfg.sysfsRoot }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "sysfs-root") "value" $cfg.sysfsRoot) }}
{{- else if .Values.cacheroute.hostSysfs.enabled }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "sysfs-root") "value" .Values.cacheroute.hostSysfs.mountPath) }}
{{- end }}
{{- $state := .Values.cacheroute.state }}
{{- if $cfg.stateFile }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "state-file") "value" $cfg.stateFile) }}
{{- else if $state.enabled }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "state-file") "value" (printf "%s/%s" (trimSuffix "/" $state.mountPath) $state.fileName)) }}
{{- end }}
{{- if include "cacheroute.endpointsSource" . }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "endpoints-file") "value" (include "cacheroute.endpointsFile" .)) }}
{{- end }}
{{- $env = concat $env (include "cacheroute.dnsEnv" . | fromYamlArray) }}
{{- if include "cacheroute.k8sDiscovery" . }}
{{- $d := .Values.epp.discovery }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "endpoints-k8s-pool") "value" (include "cacheroute.k8sPool" .)) }}
{{- range $key, $flag := dict "api" "k8s-api" "tokenFile" "k8s-token-file" "caFile" "k8s-ca-file" }}
{{- with (get $d $key) }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" $flag) "value" .) }}
{{- end }}
{{- end }}
{{- with .Values.endpoints.kvEventsTemplate }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "kv-events-template") "value" .) }}
{{- end }}
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
{{- range (include "cacheroute.ownedFlags" . | fromYamlArray) }}
{{- $names = append $names (include "cacheroute.flagEnvName" .) }}
{{- end }}
{{- range concat (include "cacheroute.configFlags" . | fromYamlArray) (include "cacheroute.backendFlags" . | fromYamlArray) (include "cacheroute.eppFlags" . | fromYamlArray) }}
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
A native gRPC probe. Call with (dict "probe" <values> "port" <int>
"service" <the mode's service, used when the probe's is null>).
*/}}
{{- define "cacheroute.grpcProbe" -}}
grpc:
  port: {{ .port | int }}
  service: {{ ternary .service .probe.service (kindIs "invalid" .probe.service) | quote }}
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
  {{- if eq (include "cacheroute.healthListener" .) "true" }}
  - name: health
    containerPort: {{ .Values.cacheroute.ports.health | int }}
    protocol: TCP
  {{- end }}
  {{- if eq .Values.mode "epp" }}
  - name: grpc-ext-proc
    containerPort: {{ .Values.epp.port | int }}
    protocol: TCP
  {{- end }}
env:
  {{- include "cacheroute.env" . | nindent 2 }}
{{- if .Values.cacheroute.startupProbe.enabled }}
startupProbe:
  {{- include "cacheroute.grpcProbe" (dict "probe" .Values.cacheroute.startupProbe "port" (include "cacheroute.probePort" .) "service" (ternary "liveness" "" (eq .Values.mode "epp"))) | nindent 2 }}
{{- end }}
{{- if .Values.cacheroute.livenessProbe.enabled }}
livenessProbe:
  {{- include "cacheroute.grpcProbe" (dict "probe" .Values.cacheroute.livenessProbe "port" (include "cacheroute.probePort" .) "service" (ternary "liveness" "" (eq .Values.mode "epp"))) | nindent 2 }}
{{- end }}
{{- if .Values.cacheroute.readinessProbe.enabled }}
readinessProbe:
  {{- include "cacheroute.grpcProbe" (dict "probe" .Values.cacheroute.readinessProbe "port" (include "cacheroute.probePort" .) "service" (ternary "readiness" "cacheroute.v1.CacheRoute" (eq .Values.mode "epp"))) | nindent 2 }}
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
  {{- if .Values.cacheroute.state.enabled }}
  - name: cacheroute-state
    mountPath: {{ .Values.cacheroute.state.mountPath }}
  {{- end }}
  {{- if include "cacheroute.endpointsSource" . }}
  {{- /* The directory, never a subPath: the kubelet updates a ConfigMap
      volume in place (an atomic swap of its ..data link) but never a
      subPath mount, and the sidecar re-reads the file itself. */}}
  - name: cacheroute-endpoints
    mountPath: {{ trimSuffix "/" .Values.endpoints.mountPath }}
    readOnly: true
  {{- end }}
  {{- include "cacheroute.securityMounts" . }}
  {{- with .Values.cacheroute.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/*
The state file's volume (cacheroute.state): an emptyDir, or a claim (the
chart's own, "<fullname>-state", unless existingClaim names one).
*/}}
{{- define "cacheroute.stateVolume" -}}
{{- $state := .Values.cacheroute.state -}}
name: cacheroute-state
{{- if eq $state.volume "pvc" }}
persistentVolumeClaim:
  claimName: {{ $state.pvc.existingClaim | default (printf "%s-state" (include "cacheroute.fullname" .)) }}
{{- else }}
emptyDir:
  sizeLimit: {{ $state.sizeLimit }}
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

{{/*
Volume mounts for the TLS, token and Redis password Secrets (indented for
the container).
*/}}
{{- define "cacheroute.securityMounts" -}}
{{- $tls := .Values.cacheroute.tls }}
{{- if $tls.enabled }}
  - name: cacheroute-tls
    mountPath: {{ $tls.mountPath }}
    readOnly: true
{{- if and $tls.mutual $tls.clientCASecretName }}
  - name: cacheroute-tls-ca
    mountPath: {{ printf "%s-ca" $tls.mountPath }}
    readOnly: true
{{- end }}
{{- end }}
{{- if .Values.cacheroute.adminToken.secretName }}
  - name: cacheroute-admin-token
    mountPath: {{ .Values.cacheroute.adminToken.mountPath }}
    readOnly: true
{{- end }}
{{- if eq (include "cacheroute.backendPassword" .) "true" }}
  - name: cacheroute-state-backend-password
    mountPath: {{ .Values.cacheroute.stateBackend.passwordSecret.mountPath }}
    readOnly: true
{{- end }}
{{- end }}

{{/*
"true" when the state backend's password Secret is used: a url and a
Secret name (backendEnv passes the file only then, too).
*/}}
{{- define "cacheroute.backendPassword" -}}
{{- $sb := .Values.cacheroute.stateBackend }}
{{- if and (include "cacheroute.stateBackendUrl" .) $sb.passwordSecret.name }}true{{ end }}
{{- end }}

{{/*
Pod volumes for the TLS, token and Redis password Secrets (indented for
the pod spec).
Only the keys the sidecar reads are projected.
*/}}
{{- define "cacheroute.securityVolumes" -}}
{{- $tls := .Values.cacheroute.tls }}
{{- if $tls.enabled }}
        - name: cacheroute-tls
          secret:
            secretName: {{ $tls.secretName }}
            items:
              - {key: tls.crt, path: tls.crt}
              - {key: tls.key, path: tls.key}
              {{- if and $tls.mutual (not $tls.clientCASecretName) }}
              - {key: ca.crt, path: ca.crt}
              {{- end }}
{{- if and $tls.mutual $tls.clientCASecretName }}
        - name: cacheroute-tls-ca
          secret:
            secretName: {{ $tls.clientCASecretName }}
            items:
              - {key: ca.crt, path: ca.crt}
{{- end }}
{{- end }}
{{- with .Values.cacheroute.adminToken }}
{{- if .secretName }}
        - name: cacheroute-admin-token
          secret:
            secretName: {{ .secretName }}
            items:
              - {key: {{ .key }}, path: {{ .key }}}
{{- end }}
{{- end }}
{{- if eq (include "cacheroute.backendPassword" .) "true" }}
{{- with .Values.cacheroute.stateBackend.passwordSecret }}
        - name: cacheroute-state-backend-password
          secret:
            secretName: {{ .name }}
            items:
              - {key: {{ .key }}, path: {{ .key }}}
{{- end }}
{{- end }}
{{- end }}

{{/*
Where the endpoints come from (endpoints.*): "list" (the chart's ConfigMap),
"existing" (endpoints.existingConfigMap) or "" (off). enabled null means on
when either is given. Fails when both are given, when enabled is true with
neither, and on an id given twice (the schema checks each entry, not that).
*/}}
{{- define "cacheroute.endpointsSource" -}}
{{- $ep := .Values.endpoints }}
{{- $list := $ep.list | default list }}
{{- if and $list $ep.existingConfigMap }}
{{- fail (printf "endpoints.list and endpoints.existingConfigMap (%s) are both set: give the endpoints in one place, endpoints.list (rendered into the chart's ConfigMap) or endpoints.existingConfigMap (yours, holding endpoints.json)." $ep.existingConfigMap) }}
{{- end }}
{{- $seen := dict }}
{{- range $i, $e := $list }}
{{- $id := toString $e.id }}
{{- if hasKey $seen $id }}
{{- fail (printf "endpoints.list[%d].id %q is given twice (endpoints.list[%v]): each endpoint needs its own id." $i $id (get $seen $id)) }}
{{- end }}
{{- $_ := set $seen $id $i }}
{{- end }}
{{- $on := $ep.enabled }}
{{- if kindIs "invalid" $on }}
{{- $on = or (gt (len $list) 0) (ne (toString $ep.existingConfigMap) "") }}
{{- end }}
{{- if $on }}
{{- if $list }}list
{{- else if $ep.existingConfigMap }}existing
{{- else }}
{{- fail "endpoints.enabled is true but endpoints.list is empty and endpoints.existingConfigMap is \"\": the sidecar would have no endpoints file. Give endpoints.list (at least one {id, address}) or endpoints.existingConfigMap, or leave endpoints.enabled null." }}
{{- end }}
{{- end }}
{{- end }}

{{/*
--endpoints-dns and its flags (endpoints.dns, dnsInterval, dnsServer,
kvEventsTemplate) as env entries, none while endpoints.dns is "". Fails
with an endpoints file (one source: the sidecar refuses both) and on a
template without dns (the sidecar refuses that too).
*/}}
{{- define "cacheroute.dnsEnv" -}}
{{- $ep := .Values.endpoints }}
{{- $env := list }}
{{- if $ep.dns }}
{{- if include "cacheroute.endpointsSource" . }}
{{- fail (printf "endpoints.dns (%s) and an endpoints file (endpoints.list or endpoints.existingConfigMap) are both set: give one endpoint source." $ep.dns) }}
{{- end }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "endpoints-dns") "value" $ep.dns) }}
{{- if not (kindIs "invalid" $ep.dnsInterval) }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "dns-interval") "value" (include "cacheroute.scalar" $ep.dnsInterval)) }}
{{- end }}
{{- if $ep.dnsServer }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "dns-server") "value" $ep.dnsServer) }}
{{- end }}
{{- if $ep.kvEventsTemplate }}
{{- $env = append $env (dict "name" (include "cacheroute.flagEnvName" "kv-events-template") "value" $ep.kvEventsTemplate) }}
{{- end }}
{{- else if and $ep.kvEventsTemplate (not (include "cacheroute.k8sDiscovery" .)) }}
{{- fail "endpoints.kvEventsTemplate needs endpoints.dns or epp.discovery (mode epp): an endpoints file names each endpoint's kv_events." }}
{{- end }}
{{- toYaml $env }}
{{- end }}

{{/*
The endpoints ConfigMap's name: the chart's <fullname>-endpoints, or
endpoints.existingConfigMap.
*/}}
{{- define "cacheroute.endpointsConfigMap" -}}
{{- if eq (include "cacheroute.endpointsSource" .) "existing" }}
{{- .Values.endpoints.existingConfigMap }}
{{- else }}
{{- printf "%s-endpoints" (include "cacheroute.fullname" .) }}
{{- end }}
{{- end }}

{{/*
--endpoints-file: endpoints.json in the mounted directory.
*/}}
{{- define "cacheroute.endpointsFile" -}}
{{- printf "%s/endpoints.json" (trimSuffix "/" .Values.endpoints.mountPath) }}
{{- end }}

{{/*
Mode epp's checks: the picker's port is its own, the InferencePool needs
the Service (its endpointPickerRef names it) and the model server pods'
labels, and the
picker's endpoints must be ip:port (the gateway dials the destination as
given; the sidecar refuses anything else in this mode).
*/}}
{{- define "cacheroute.checkEpp" -}}
{{- if eq .Values.mode "epp" }}
{{- $pool := .Values.epp.inferencePool }}
{{- if and $pool.enabled (ne (include "cacheroute.serviceEnabled" .) "true") }}
{{- fail "mode epp with epp.inferencePool.enabled needs the Service (service.enabled true or null): the InferencePool's endpointPickerRef names it." }}
{{- end }}
{{- $ports := .Values.cacheroute.ports }}
{{- if has (.Values.epp.port | int) (list ($ports.grpc | int) ($ports.metrics | int) ($ports.health | int)) }}
{{- fail (printf "epp.port %d is also one of cacheroute.ports (grpc %d, metrics %d, health %d): the picker needs a port of its own." (.Values.epp.port | int) ($ports.grpc | int) ($ports.metrics | int) ($ports.health | int)) }}
{{- end }}
{{- if and $pool.enabled (not $pool.matchLabels) }}
{{- fail "epp.inferencePool.matchLabels is empty: give the labels of the model server pods the gateway sends requests to (the InferencePool's spec.selector.matchLabels), or set epp.inferencePool.enabled=false and manage the pool yourself." }}
{{- end }}
{{- if eq (include "cacheroute.endpointsSource" .) "list" }}
{{- range $i, $e := .Values.endpoints.list }}
{{- if not (regexMatch "^([0-9]{1,3}(\\.[0-9]{1,3}){3}|\\[[0-9A-Fa-f:.]+\\]):[0-9]{1,5}$" (toString $e.address)) }}
{{- fail (printf "endpoints.list[%d].address %q: in mode epp an endpoint's address is ip:port (e.g. 10.0.0.5:8000 or [fd00::5]:8000), which the gateway dials as the destination." $i (toString $e.address)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Kubernetes discovery (epp.discovery): "true" when on, "" when off. enabled
null: on in mode epp unless another source is set (the endpoints file,
endpoints.dns); true: on in mode epp, and another source beside it fails
rendering (the sidecar takes one source of endpoints).
*/}}
{{- define "cacheroute.k8sDiscovery" -}}
{{- $d := .Values.epp.discovery }}
{{- if eq .Values.mode "epp" }}
{{- $file := or (include "cacheroute.endpointsSource" .) .Values.endpoints.dns }}
{{- if and (eq (toString $d.enabled) "true") $file }}
{{- fail "epp.discovery.enabled is true and another endpoint source is set (endpoints.list, endpoints.existingConfigMap or endpoints.dns): the sidecar takes one source of endpoints. Leave epp.discovery.enabled null (the other source wins) or turn the other off." }}
{{- end }}
{{- if or (eq (toString $d.enabled) "true") (and (kindIs "invalid" $d.enabled) (not $file)) }}true{{ end }}
{{- end }}
{{- end }}

{{/*
--endpoints-k8s-pool: epp.discovery.pool, else the release namespace and
the InferencePool's name.
*/}}
{{- define "cacheroute.k8sPool" -}}
{{- .Values.epp.discovery.pool | default (printf "%s/%s" .Release.Namespace (include "cacheroute.inferencePoolName" .)) }}
{{- end }}

{{/*
The InferencePool's name: epp.inferencePool.name, else the full name.
*/}}
{{- define "cacheroute.inferencePoolName" -}}
{{- .Values.epp.inferencePool.name | default (include "cacheroute.fullname" .) }}
{{- end }}
