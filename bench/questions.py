"""The analytics questions the benchmark asks: docs/analytics.md's ClickHouse SQL
(a test keeps the two identical) and the same questions asked of the
reference server's PostgreSQL schema, one JSONB document per report keyed by
name, namespace and cluster."""

from __future__ import annotations

CLICKHOUSE = {
    "failing-now": """\
-- name: failing-now
-- Failing results per namespace and policy right now.
SELECT namespace, policy, fail
FROM policy_counts FINAL
WHERE cluster = 'default' AND fail > 0
ORDER BY fail DESC, namespace, policy
""",
    "daily-fails": """\
-- name: daily-fails
-- Daily fail count per policy across the cluster over the last 30 days (the
-- last total of each day, carried forward over days without activity).
SELECT day, policy, fs[idx] AS failing
FROM (
    SELECT policy, arraySort(groupArray(toDate(window_start))) AS ds,
           arraySort((f, w) -> w, groupArray(fail), groupArray(window_start)) AS fs
    FROM policy_totals_windows FINAL
    WHERE cluster = 'default' AND window_start >= today() - 30
    GROUP BY policy
)
ARRAY JOIN arrayMap(i -> toDate(today() - 30 + i), range(31)) AS day
WHERE (arrayLastIndex(x -> x <= day, ds) AS idx) > 0
ORDER BY day, policy
""",
    "top-resources": """\
-- name: top-resources
-- The 10 resources with the most high or critical failures in current reports.
SELECT kind AS resource_kind, ns AS resource_namespace, resource_name, count() AS failures
FROM reports FINAL
ARRAY JOIN failing_severity AS severity, failing_resource_kind AS kind,
           failing_resource_namespace AS ns, failing_resource_name AS resource_name
WHERE resource IN ('policyreports.wgpolicyk8s.io', 'clusterpolicyreports.wgpolicyk8s.io',
                   'reports.openreports.io', 'clusterreports.openreports.io')
  AND severity IN ('high', 'critical')
GROUP BY resource_kind, resource_namespace, resource_name
ORDER BY failures DESC, resource_namespace, resource_name
LIMIT 10
""",
    "high-scores": """\
-- name: high-scores
-- Results in current reports whose properties hold a numeric score of at least
-- 8.0 (for example a CVSS score from a vulnerability scanner's report).
SELECT namespace, name AS report, policy, rule, resource_kind, resource_name, score
FROM reports FINAL
ARRAY JOIN scored_policy AS policy, scored_rule AS rule, scored_resource_kind AS resource_kind,
           scored_resource_name AS resource_name, scored_score AS score
WHERE score >= 8.0
ORDER BY score DESC, namespace, report, rule
""",
}

#: The reference server's table (Kyverno reports-server, PostgreSQL store).
FLEET = {
    "fleet-failing-now": """\
-- name: fleet-failing-now
-- Failing results right now, per cluster.
SELECT cluster, sum(fail) AS failing
FROM policy_counts FINAL
GROUP BY cluster
ORDER BY failing DESC, cluster
""",
    "fleet-top-policies": """\
-- name: fleet-top-policies
-- The policies that fail most across the fleet, in how many clusters, and
-- since when (the first failing result the fleet holds).
SELECT c.policy AS policy, c.failing AS failing, c.clusters AS clusters, f.since AS since
FROM (
    SELECT policy, sum(fail) AS failing, countIf(fail > 0) AS clusters
    FROM (SELECT cluster, policy, sum(fail) AS fail FROM policy_counts FINAL
          GROUP BY cluster, policy)
    GROUP BY policy
) AS c
LEFT JOIN (
    SELECT policy, min(committed) AS since FROM results WHERE result = 'fail' GROUP BY policy
) AS f ON f.policy = c.policy
WHERE c.failing > 0
ORDER BY failing DESC, policy
LIMIT 10
""",
    "fleet-policy-by-cluster": """\
-- name: fleet-policy-by-cluster
-- Where one policy fails most.
SELECT cluster, sum(fail) AS failing
FROM policy_counts FINAL
WHERE policy = {policy:String}
GROUP BY cluster
HAVING failing > 0
ORDER BY failing DESC, cluster
""",
    "fleet-reports": """\
-- name: fleet-reports
-- Reports and failing results per cluster, from the reports themselves.
SELECT cluster, count() AS reports, sum(fail) AS failing
FROM fleet_reports FINAL
GROUP BY cluster
ORDER BY cluster
""",
}
"""docs/fleet.md's questions across clusters (a test keeps them identical)."""

POSTGRES_SCHEMA = """\
CREATE TABLE IF NOT EXISTS policyreports (
    name VARCHAR NOT NULL,
    namespace VARCHAR NOT NULL,
    clusterId VARCHAR NOT NULL,
    report JSONB NOT NULL,
    PRIMARY KEY (name, namespace, clusterId)
)"""

#: Its store has no history, so "daily fails" is read from the results'
#: timestamps of the current reports: the nearest it can answer.
POSTGRES = {
    "failing-now": """\
SELECT namespace, r->>'policy' AS policy, count(*) AS fail
FROM policyreports, jsonb_array_elements(report->'results') AS r
WHERE clusterId = 'default' AND r->>'result' = 'fail'
GROUP BY namespace, policy
ORDER BY fail DESC, namespace, policy""",
    "daily-fails": """\
SELECT to_timestamp((r->'timestamp'->>'seconds')::bigint)::date AS day,
       r->>'policy' AS policy, count(*) AS failing
FROM policyreports, jsonb_array_elements(report->'results') AS r
WHERE clusterId = 'default' AND r->>'result' = 'fail'
  AND to_timestamp((r->'timestamp'->>'seconds')::bigint) >= current_date - 30
GROUP BY day, policy
ORDER BY day, policy""",
    "top-resources": """\
SELECT report->'scope'->>'kind' AS resource_kind,
       report->'scope'->>'namespace' AS resource_namespace,
       report->'scope'->>'name' AS resource_name, count(*) AS failures
FROM policyreports, jsonb_array_elements(report->'results') AS r
WHERE clusterId = 'default' AND r->>'result' = 'fail'
  AND r->>'severity' IN ('high', 'critical')
GROUP BY 1, 2, 3
ORDER BY failures DESC, 2, 3
LIMIT 10""",
    "high-scores": """\
SELECT namespace, name, r->>'policy' AS policy, r->>'rule' AS rule,
       report->'scope'->>'kind' AS kind, report->'scope'->>'name' AS resource,
       (r->'properties'->>'score')::float8 AS score
FROM policyreports, jsonb_array_elements(report->'results') AS r
WHERE clusterId = 'default'
  AND r->'properties'->>'score' ~ '^[0-9]+(\\.[0-9]+)?$'
  AND (r->'properties'->>'score')::float8 >= 8.0
ORDER BY score DESC, namespace, name, rule""",
}
