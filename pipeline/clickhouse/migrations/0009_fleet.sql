-- The fleet's tables, filled only by `reports-pipeline fleet` (which follows
-- the public topics of several clusters into one store); empty in a single
-- cluster's store. The trend tables (policy_counts, policy_windows,
-- policy_totals_windows) and results already carry the cluster.

-- The current reports of every cluster, one row per committed change; the
-- highest resource_version per (cluster, identity) is the current one.
CREATE TABLE IF NOT EXISTS fleet_reports
(
    cluster LowCardinality(String),
    resource LowCardinality(String),
    namespace String,
    name String,
    uid String,
    resource_version UInt64,
    deleted UInt8,
    created DateTime64(3, 'UTC'),
    committed DateTime64(3, 'UTC'),
    labels Map(String, String),
    scope_kind LowCardinality(String),
    scope_name String,
    pass UInt32,
    fail UInt32,
    warn UInt32,
    error UInt32,
    skip UInt32,
    object String CODEC(ZSTD(3)),
    -- when the fleet wrote the row (its lag: written - committed)
    written DateTime64(3, 'UTC') DEFAULT now64(3),
    result_policy Array(LowCardinality(String))
        MATERIALIZED arrayMap(r -> JSONExtractString(r, 'policy'),
            arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results'))),
    result_status Array(LowCardinality(String))
        MATERIALIZED arrayMap(r -> JSONExtractString(r, 'result'),
            arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results'))),
    result_severity Array(LowCardinality(String))
        MATERIALIZED arrayMap(r -> JSONExtractString(r, 'severity'),
            arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results'))),
    result_resource_kind Array(LowCardinality(String))
        MATERIALIZED arrayMap(r -> if(JSONLength(r, 'resources') > 0, JSONExtractString(r, 'resources', 1, 'kind'), scope_kind),
            arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results'))),
    result_resource_namespace Array(LowCardinality(String))
        MATERIALIZED arrayMap(r -> if(JSONLength(r, 'resources') > 0, if(JSONExtractString(r, 'resources', 1, 'namespace') = '', namespace, JSONExtractString(r, 'resources', 1, 'namespace')), namespace),
            arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results'))),
    result_resource_name Array(String)
        MATERIALIZED arrayMap(r -> if(JSONLength(r, 'resources') > 0, JSONExtractString(r, 'resources', 1, 'name'), scope_name),
            arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results')))
)
ENGINE = ReplacingMergeTree(resource_version, deleted)
ORDER BY (cluster, resource, namespace, name)
SETTINGS max_cleanup_delay_period = 30, concurrent_part_removal_threshold = 1000000;

-- How far the fleet has got in each cluster's topics, written with each batch
-- it takes from them: where it resumes. The latest row per key wins (a resync
-- moves a position back).
CREATE TABLE IF NOT EXISTS fleet_progress
(
    cluster LowCardinality(String),
    topic String,
    partition UInt32,
    offset Int64,
    last_change DateTime64(3, 'UTC'),
    written DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree(written)
ORDER BY (cluster, topic, partition)
SETTINGS max_cleanup_delay_period = 30, concurrent_part_removal_threshold = 1000000;

-- Each source the fleet follows, as it last saw it: following, unreachable
-- (since last_contact) or resync (its retention passed the fleet's position).
CREATE TABLE IF NOT EXISTS fleet_sources
(
    cluster LowCardinality(String),
    bootstrap String,
    prefix String,
    state LowCardinality(String),
    detail String,
    last_contact DateTime64(3, 'UTC'),
    updated DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree(updated)
ORDER BY cluster
SETTINGS max_cleanup_delay_period = 30, concurrent_part_removal_threshold = 1000000;
