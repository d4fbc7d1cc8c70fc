-- Current counts per namespace and policy, written by the aggregator whenever
-- they change; the highest resource_version per key is the current value.
CREATE TABLE IF NOT EXISTS policy_counts
(
    cluster LowCardinality(String),
    namespace LowCardinality(String),
    policy LowCardinality(String),
    pass UInt32,
    fail UInt32,
    warn UInt32,
    error UInt32,
    skip UInt32,
    resource_version UInt64,
    updated DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(resource_version)
ORDER BY (cluster, namespace, policy);

-- Tumbling windows per namespace and policy: activity in the window and the
-- counts at its latest update. Rewritten as the window fills; the highest
-- version per window is its value.
CREATE TABLE IF NOT EXISTS policy_windows
(
    cluster LowCardinality(String),
    namespace LowCardinality(String),
    policy LowCardinality(String),
    window_start DateTime('UTC'),
    window_end DateTime('UTC'),
    results_written UInt32,
    new_failures UInt32,
    resolved_failures UInt32,
    pass UInt32,
    fail UInt32,
    warn UInt32,
    error UInt32,
    skip UInt32,
    resource_version UInt64,
    updated DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(resource_version)
PARTITION BY toYYYYMM(window_start)
ORDER BY (cluster, namespace, policy, window_start)
TTL window_start + INTERVAL 400 DAY;
