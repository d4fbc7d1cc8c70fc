-- The results history sorted by report: the results of one report version sit
-- next to each other, so the report's and resource's identifiers (uuids,
-- repeated on every result) compress to almost nothing. Same columns, same
-- replay collapsing (one row per report version and result index).
CREATE TABLE IF NOT EXISTS results_by_report
(
    cluster LowCardinality(String),
    resource LowCardinality(String),
    namespace LowCardinality(String),
    report String CODEC(ZSTD(3)),
    report_uid String CODEC(ZSTD(3)),
    resource_version UInt64 CODEC(Delta, ZSTD(3)),
    idx UInt32,
    committed DateTime64(3, 'UTC') CODEC(Delta, ZSTD(3)),
    resource_kind LowCardinality(String),
    resource_namespace LowCardinality(String),
    resource_name String CODEC(ZSTD(3)),
    resource_uid String CODEC(ZSTD(3)),
    policy LowCardinality(String),
    rule LowCardinality(String),
    result LowCardinality(String),
    severity LowCardinality(String),
    category LowCardinality(String),
    source LowCardinality(String),
    scored UInt8,
    message String CODEC(ZSTD(3)),
    properties Map(LowCardinality(String), String) CODEC(ZSTD(3)),
    result_time DateTime('UTC') CODEC(Delta, ZSTD(3))
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(committed)
ORDER BY (cluster, namespace, resource, report, resource_version, idx)
TTL toDateTime(committed) + toIntervalDay(90);

INSERT INTO results_by_report SELECT * FROM results;

RENAME TABLE results TO results_by_policy, results_by_report TO results;

DROP TABLE results_by_policy;
