-- Latest state of every object, one row per committed change. ReplacingMergeTree
-- keeps the highest resource_version per identity; FINAL hides deleted ones.
CREATE TABLE IF NOT EXISTS reports
(
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
    object String CODEC(ZSTD(3))
)
ENGINE = ReplacingMergeTree(resource_version, deleted)
ORDER BY (resource, namespace, name)
-- Granules of at most 1 MiB of rows (about 170 reports of 6 KB) rather than
-- ClickHouse's 10 MiB: a GET reads one report, and ClickHouse decompresses its
-- granule of `object` from the granule's start to reach it.
SETTINGS index_granularity_bytes = 1048576;

-- How far the materializer has got in the change log.
CREATE TABLE IF NOT EXISTS changes_progress
(
    topic String,
    partition UInt32,
    offset UInt64,
    resource_version UInt64,
    written DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(resource_version)
ORDER BY (topic, partition);
