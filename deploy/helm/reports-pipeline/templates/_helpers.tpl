{{- define "rp.name" -}}reports-pipeline{{- end -}}
{{- define "rp.labels" -}}
app.kubernetes.io/name: {{ include "rp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
{{- define "rp.env" -}}
- name: KAFKA_BOOTSTRAP
  value: {{ include "rp.kafkaBootstrap" . | quote }}
{{- if .Values.clickhouse.existingSecret }}
- name: CLICKHOUSE_URL
  valueFrom:
    secretKeyRef: {name: {{ .Values.clickhouse.existingSecret }}, key: CLICKHOUSE_URL}
{{- else }}
- name: CLICKHOUSE_URL
  value: {{ .Values.clickhouse.url | quote }}
{{- end }}
- name: REPORTS_DATABASE
  value: {{ .Values.database | quote }}
- name: REPORTS_TOPIC_PREFIX
  value: {{ .Values.topicPrefix | quote }}
- name: REPORTS_CLUSTER
  value: {{ .Values.cluster | quote }}
- name: REPORTS_REPLICATION_FACTOR
  value: {{ .Values.kafka.replicationFactor | quote }}
- name: REPORTS_MIN_INSYNC_REPLICAS
  value: {{ .Values.kafka.minInsyncReplicas | quote }}
{{- end -}}

{{- define "rp.kafkaBootstrap" -}}
{{- if .Values.kafka.deploy -}}
{{ include "rp.name" . }}-kafka-0.{{ include "rp.name" . }}-kafka.{{ .Release.Namespace }}.svc:9092
{{- else -}}
{{ .Values.kafka.bootstrap }}
{{- end -}}
{{- end -}}

{{/* The image: repository and tag (the chart's appVersion unless set). */}}
{{- define "rp.image" -}}
{{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) | quote }}
{{- end }}
