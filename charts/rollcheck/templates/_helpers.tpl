{{- define "rollcheck.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rollcheck.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "rollcheck.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rollcheck.serviceAccount" -}}
{{- .Values.serviceAccount.name | default (include "rollcheck.fullname" .) -}}
{{- end -}}

{{- define "rollcheck.targetNamespace" -}}
{{- .Values.target.namespace | default .Release.Namespace -}}
{{- end -}}

{{- define "rollcheck.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "rollcheck.claim" -}}
{{- .Values.reports.existingClaim | default (printf "%s-reports" (include "rollcheck.fullname" .)) -}}
{{- end -}}

{{- define "rollcheck.required" -}}
{{- $_ := required "target.deployment is required: the vLLM Deployment under test (--set target.deployment=NAME)" .Values.target.deployment -}}
{{- $_ := required "target.gatewayUrl is required: the URL clients stream from (--set target.gatewayUrl=http://...)" .Values.target.gatewayUrl -}}
{{- end -}}

{{/* The run's config: .Values.config with the target's values over it. */}}
{{- define "rollcheck.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $kube := dict "namespace" (include "rollcheck.targetNamespace" .) "deployment" .Values.target.deployment "gateway_url" .Values.target.gatewayUrl "allow_node_drain" .Values.rbac.nodeDrain "allow_preemption" .Values.rbac.preemption -}}
{{- if .Values.rbac.gatewayLogs.selector -}}
{{- $_ := set $kube "gateway_pods_namespace" (.Values.rbac.gatewayLogs.namespace | default (include "rollcheck.targetNamespace" .)) -}}
{{- $_ := set $kube "gateway_pods_selector" .Values.rbac.gatewayLogs.selector -}}
{{- if .Values.rbac.gatewayLogs.container -}}
{{- $_ := set $kube "gateway_pods_container" .Values.rbac.gatewayLogs.container -}}
{{- end -}}
{{- end -}}
{{- with .Values.target.route -}}
{{- if .name -}}
{{- $_ := set $kube "route" .name -}}
{{- $_ := set $kube "route_rule" (int .rule) -}}
{{- $_ := set $kube "stable_service" .stableService -}}
{{- $_ := set $kube "candidate_service" .candidateService -}}
{{- if .gatewayMirrors -}}
{{- $_ := set $kube "gateway_mirrors" true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if .Values.target.pdPrefillDeployment -}}
{{- $_ := set $kube "pd_prefill_deployment" .Values.target.pdPrefillDeployment -}}
{{- end -}}
{{- $_ := set $config "kube" (mergeOverwrite (deepCopy (get $config "kube" | default dict)) $kube) -}}
{{- $load := deepCopy (get $config "load" | default dict) -}}
{{- if .Values.target.apiKeySecret.name -}}
{{- $_ := set $load "api_key_env" "INFERENCE_API_KEY" -}}
{{- end -}}
{{- if gt (int .Values.locust.workers) 0 -}}
{{- $_ := set $load "external_workers" (int .Values.locust.workers) -}}
{{- $_ := set $load "master_bind" "0.0.0.0" -}}
{{- $_ := set $load "master_port" (int .Values.locust.masterPort) -}}
{{- end -}}
{{- if $load -}}
{{- $_ := set $config "load" $load -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{- define "rollcheck.apiKeyEnv" -}}
{{- if .Values.target.apiKeySecret.name }}
- name: INFERENCE_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.target.apiKeySecret.name }}
      key: {{ .Values.target.apiKeySecret.key }}
{{- end }}
{{- end -}}
