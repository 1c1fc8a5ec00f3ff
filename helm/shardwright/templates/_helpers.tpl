{{/* Names: short enough that "<fullname>-scheduler" stays a valid DNS label. */}}
{{- define "shardwright.name" -}}
{{- .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "shardwright.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "shardwright.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "shardwright.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shardwright.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "shardwright.labels" -}}
helm.sh/chart: {{ include "shardwright.chart" . }}
{{ include "shardwright.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "shardwright.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "shardwright.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* One image for every pod: the CUDA image as soon as GPU workers run, so that the
     client, the scheduler and the workers share one Dask version. */}}
{{- define "shardwright.image" -}}
{{- $image := ternary .Values.gpuImage .Values.image .Values.workers.gpu.enabled -}}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) -}}
{{- end -}}

{{- define "shardwright.pullPolicy" -}}
{{- $image := ternary .Values.gpuImage .Values.image .Values.workers.gpu.enabled -}}
{{- $image.pullPolicy -}}
{{- end -}}

{{- define "shardwright.schedulerAddress" -}}
{{- printf "tcp://%s-scheduler.%s.svc:%d" (include "shardwright.fullname" .) .Release.Namespace (int .Values.scheduler.port) -}}
{{- end -}}

{{/* Pod-level settings shared by every pod: identity, pull secrets, security. */}}
{{- define "shardwright.podCommon" -}}
serviceAccountName: {{ include "shardwright.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "shardwright.placement" -}}
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
{{- end -}}

{{/* Environment of the containers that touch data (workers and the Job). */}}
{{- define "shardwright.dataEnv" -}}
- name: TMPDIR
  value: /scratch
{{- if .Values.credentials.gcpKeySecret.name }}
- name: GOOGLE_APPLICATION_CREDENTIALS
  value: /var/run/secrets/shardwright/gcp/{{ .Values.credentials.gcpKeySecret.key }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "shardwright.envFrom" -}}
{{- range .Values.credentials.envFromSecrets }}
- secretRef:
    name: {{ . }}
{{- end }}
{{- end -}}

{{- define "shardwright.dataVolumeMounts" -}}
- name: scratch
  mountPath: /scratch
{{- if .Values.credentials.gcpKeySecret.name }}
- name: gcp-key
  mountPath: /var/run/secrets/shardwright/gcp
  readOnly: true
{{- end }}
{{- end -}}

{{- define "shardwright.dataVolumes" -}}
- name: scratch
  emptyDir:
    {{- if .Values.workers.scratchSizeLimit }}
    sizeLimit: {{ .Values.workers.scratchSizeLimit }}
    {{- else }} {}
    {{- end }}
{{- if .Values.credentials.gcpKeySecret.name }}
- name: gcp-key
  secret:
    secretName: {{ .Values.credentials.gcpKeySecret.name }}
    items:
      - key: {{ .Values.credentials.gcpKeySecret.key }}
        path: {{ .Values.credentials.gcpKeySecret.key }}
{{- end }}
{{- end -}}

{{/* The scheduler container; .root is the chart context, .port/.dashboardPort its ports. */}}
{{- define "shardwright.schedulerContainer" -}}
- name: scheduler
  image: {{ include "shardwright.image" .root }}
  imagePullPolicy: {{ include "shardwright.pullPolicy" .root }}
  command: ["dask", "scheduler"]
  args:
    - --port
    - {{ .port | quote }}
    - --dashboard-address
    - {{ printf ":%d" (int .dashboardPort) | quote }}
    {{- range .root.Values.scheduler.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  ports:
    - name: tcp-comm
      containerPort: {{ .port }}
      protocol: TCP
    - name: http-dashboard
      containerPort: {{ .dashboardPort }}
      protocol: TCP
  readinessProbe:
    tcpSocket:
      port: tcp-comm
    initialDelaySeconds: 2
    periodSeconds: 5
  livenessProbe:
    httpGet:
      path: /health
      port: http-dashboard
    initialDelaySeconds: 15
    periodSeconds: 20
  {{- with .root.Values.scheduler.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .root.Values.containerSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* A worker container. .root: chart context; .gpu: GPU group or not; .name: the worker
     name argument ("" for none); .env: environment the mode adds. */}}
{{- define "shardwright.workerContainer" -}}
{{- $v := .root.Values -}}
{{- $group := ternary $v.workers.gpu $v.workers.cpu .gpu -}}
- name: {{ ternary "gpu-worker" "worker" .gpu }}
  image: {{ include "shardwright.image" .root }}
  imagePullPolicy: {{ include "shardwright.pullPolicy" .root }}
  {{- if .gpu }}
  command: ["dask-cuda-worker"]
  {{- else }}
  command: ["dask", "worker"]
  {{- end }}
  args:
    - $(DASK_SCHEDULER_ADDRESS)
    {{- if .gpu }}
    - --nthreads
    - "1"
    - --resources
    - GPU=1
    {{- if $group.rmmPoolSize }}
    - --rmm-pool-size
    - {{ $group.rmmPoolSize | quote }}
    {{- end }}
    {{- else }}
    - --nworkers
    - "1"
    - --nthreads
    - {{ $group.threads | quote }}
    {{- end }}
    {{- if .name }}
    - --name
    - {{ .name | quote }}
    {{- end }}
    - --dashboard-address
    - ":8788"
    - --local-directory
    - /scratch
    - --death-timeout
    - {{ $v.workers.deathTimeout | quote }}
    {{- range $group.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  ports:
    - name: http-dashboard
      containerPort: 8788
      protocol: TCP
  env:
    {{- with .env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- include "shardwright.dataEnv" .root | nindent 4 }}
  {{- with (include "shardwright.envFrom" .root) }}
  envFrom:
    {{- . | trim | nindent 4 }}
  {{- end }}
  {{- $resources := deepCopy (default (dict) $group.resources) -}}
  {{- if .gpu }}
  {{- $limits := merge (dict "nvidia.com/gpu" ($group.gpusPerWorker | toString)) (default (dict) $resources.limits) -}}
  {{- $_ := set $resources "limits" $limits -}}
  {{- end }}
  {{- with $resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    {{- include "shardwright.dataVolumeMounts" .root | nindent 4 }}
  {{- with $v.containerSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* The conversion container: `shardwright convert ... --scheduler $(DASK_SCHEDULER_ADDRESS)`.
     .root: chart context; .env: environment the mode adds. */}}
{{- define "shardwright.convertContainer" -}}
{{- $job := .root.Values.job -}}
- name: convert
  image: {{ include "shardwright.image" .root }}
  imagePullPolicy: {{ include "shardwright.pullPolicy" .root }}
  command: ["shardwright", "convert"]
  args:
    - {{ $job.source | quote }}
    - {{ $job.dest | quote }}
    - --format
    - {{ $job.format | quote }}
    - --scheduler
    - $(DASK_SCHEDULER_ADDRESS)
    {{- if $job.resume }}
    - --resume
    {{- end }}
    {{- if $job.leaseWait }}
    - --lease-wait
    - {{ $job.leaseWait | quote }}
    {{- end }}
    {{- if $job.gpu }}
    - --gpu
    {{- end }}
    {{- with $job.storageOptions }}
    - --storage-options
    - {{ toJson . | quote }}
    {{- end }}
    {{- with $job.sourceStorageOptions }}
    - --source-storage-options
    - {{ toJson . | quote }}
    {{- end }}
    {{- range $job.args }}
    - {{ . | quote }}
    {{- end }}
  env:
    {{- with .env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- include "shardwright.dataEnv" .root | nindent 4 }}
  {{- with (include "shardwright.envFrom" .root) }}
  envFrom:
    {{- . | trim | nindent 4 }}
  {{- end }}
  {{- with $job.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    {{- include "shardwright.dataVolumeMounts" .root | nindent 4 }}
  {{- with .root.Values.containerSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* Waits until job.waitForWorkers workers joined the scheduler at .address: the cluster and
     the conversion start together, and a GPU conversion refuses a cluster without GPU workers. */}}
{{- define "shardwright.waitForWorkersContainer" -}}
- name: wait-for-workers
  image: {{ include "shardwright.image" .root }}
  imagePullPolicy: {{ include "shardwright.pullPolicy" .root }}
  command:
    - python
    - -c
    - |
      import os
      from distributed import Client
      with Client(os.environ["DASK_SCHEDULER_ADDRESS"], timeout="600s") as client:
          client.wait_for_workers(int(os.environ["MIN_WORKERS"]), timeout="1800s")
          print(f"{len(client.scheduler_info()['workers'])} workers ready")
  env:
    - name: DASK_SCHEDULER_ADDRESS
      value: {{ .address }}
    - name: MIN_WORKERS
      value: {{ .root.Values.job.waitForWorkers | quote }}
  {{- with .root.Values.containerSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
