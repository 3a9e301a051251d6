{{/* The chart's name, fullname and labels. */}}

{{- define "gitopsbot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gitopsbot.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Cluster-scoped objects (ClusterRoles and their bindings) are shared by every release in
the cluster: their names carry the release namespace too. */}}
{{- define "gitopsbot.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "gitopsbot.fullname" .) -}}
{{- end -}}

{{- define "gitopsbot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gitopsbot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gitopsbot.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gitopsbot.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gitopsbot.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The subject every binding names: the chart's ServiceAccount. */}}
{{- define "gitopsbot.subject" -}}
- kind: ServiceAccount
  name: {{ include "gitopsbot.fullname" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* The ClusterRole and Role of files/tensorfusion-rules.yaml (a copy of
deploy/rbac/rules.yaml that tests/deploy keeps identical), as a dict by kind. */}}
{{- define "gitopsbot.tensorFusionRules" -}}
{{- $out := dict -}}
{{- range regexSplit "(?m)^---\\s*$" (.Files.Get "files/tensorfusion-rules.yaml") -1 -}}
{{- $doc := fromYaml . -}}
{{- if and $doc (hasKey $doc "kind") -}}
{{- $_ := set $out $doc.kind $doc.rules -}}
{{- end -}}
{{- end -}}
{{- if not (and (hasKey $out "ClusterRole") (hasKey $out "Role")) -}}
{{- fail "files/tensorfusion-rules.yaml must hold a ClusterRole and a Role" -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}
