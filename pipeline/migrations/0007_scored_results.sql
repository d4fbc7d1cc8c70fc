-- Results whose properties carry a numeric score (a CVSS score from a
-- vulnerability scanner's report, for example), one row per result of every
-- stored report version, filled by ClickHouse itself from each insert into
-- reports. Scores are sparse: questions about them read this narrow table and
-- the current versions' keys instead of every result's columns. Rows of
-- superseded versions stay until replaced; join on the current versions
-- (reports FINAL) to see only current results.
CREATE TABLE IF NOT EXISTS scored_results
(
    resource LowCardinality(String),
    namespace String,
    name String,
    resource_version UInt64,
    policy LowCardinality(String),
    rule LowCardinality(String),
    resource_kind LowCardinality(String),
    resource_namespace LowCardinality(String),
    resource_name String,
    score Float64,
    committed DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(resource_version)
ORDER BY (resource, namespace, name, policy, rule, resource_kind, resource_namespace, resource_name);

CREATE MATERIALIZED VIEW IF NOT EXISTS scored_results_from_reports TO scored_results AS
SELECT resource, namespace, name, resource_version, policy, rule, resource_kind,
       resource_namespace, resource_name, assumeNotNull(maybe_score) AS score, committed
FROM reports
ARRAY JOIN result_policy AS policy, result_rule AS rule, result_resource_kind AS resource_kind,
           result_resource_namespace AS resource_namespace,
           result_resource_name AS resource_name, result_score AS maybe_score
WHERE isNotNull(maybe_score);

-- Reports stored before this migration (a repeated row is collapsed by FINAL).
INSERT INTO scored_results
SELECT resource, namespace, name, resource_version, policy, rule, resource_kind,
       resource_namespace, resource_name, assumeNotNull(maybe_score) AS score, committed
FROM reports FINAL
ARRAY JOIN result_policy AS policy, result_rule AS rule, result_resource_kind AS resource_kind,
           result_resource_namespace AS resource_namespace,
           result_resource_name AS resource_name, result_score AS maybe_score
WHERE isNotNull(maybe_score);
