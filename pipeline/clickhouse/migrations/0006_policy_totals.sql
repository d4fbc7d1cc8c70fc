-- Counts per policy across every namespace of a cluster, as they stood at the
-- end of each window in which the policy saw activity. Cluster-wide trends
-- read one row per policy and window here instead of one per namespace in
-- policy_windows (written from this version on; earlier windows stay there).
CREATE TABLE IF NOT EXISTS policy_totals_windows
(
    cluster LowCardinality(String),
    policy LowCardinality(String),
    window_start DateTime('UTC'),
    window_end DateTime('UTC'),
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
ORDER BY (cluster, policy, window_start)
TTL window_start + INTERVAL 400 DAY;
