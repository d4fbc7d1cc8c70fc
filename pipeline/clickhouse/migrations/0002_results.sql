-- One row per result per committed change: the history analysts query.
-- Replays of a change collapse on (report identity, resource_version, idx).
CREATE TABLE IF NOT EXISTS results
(
    cluster LowCardinality(String),
    resource LowCardinality(String),
    namespace LowCardinality(String),
    report String,
    report_uid String,
    resource_version UInt64,
    idx UInt32,
    committed DateTime64(3, 'UTC'),
    resource_kind LowCardinality(String),
    resource_namespace LowCardinality(String),
    resource_name String,
    resource_uid String,
    policy LowCardinality(String),
    rule LowCardinality(String),
    result LowCardinality(String),
    severity LowCardinality(String),
    category LowCardinality(String),
    source LowCardinality(String),
    scored UInt8,
    message String CODEC(ZSTD(3)),
    properties Map(LowCardinality(String), String),
    result_time DateTime('UTC')
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(committed)
ORDER BY (cluster, namespace, policy, rule, resource, report, resource_version, idx)
TTL toDateTime(committed) + toIntervalDay(90);
