-- The results whose properties carry a numeric score (a CVSS score from a
-- vulnerability scanner's report, for example) as narrow typed arrays of their
-- own, derived by ClickHouse from the result arrays at insert time. Scores are
-- sparse: questions about them read these (mostly empty) arrays from
-- reports FINAL instead of every result's columns.
ALTER TABLE reports ADD COLUMN IF NOT EXISTS scored_policy Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> isNotNull(s), result_policy, result_score);
ALTER TABLE reports ADD COLUMN IF NOT EXISTS scored_rule Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> isNotNull(s), result_rule, result_score);
ALTER TABLE reports ADD COLUMN IF NOT EXISTS scored_resource_kind Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> isNotNull(s), result_resource_kind, result_score);
ALTER TABLE reports ADD COLUMN IF NOT EXISTS scored_resource_namespace Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> isNotNull(s), result_resource_namespace, result_score);
ALTER TABLE reports ADD COLUMN IF NOT EXISTS scored_resource_name Array(String)
    MATERIALIZED arrayFilter((x, s) -> isNotNull(s), result_resource_name, result_score);
ALTER TABLE reports ADD COLUMN IF NOT EXISTS scored_score Array(Float64)
    MATERIALIZED arrayMap(s -> assumeNotNull(s), arrayFilter(s -> isNotNull(s), result_score));
-- Parts written before this migration get the columns in the background.
ALTER TABLE reports MATERIALIZE COLUMN scored_policy, MATERIALIZE COLUMN scored_rule,
    MATERIALIZE COLUMN scored_resource_kind, MATERIALIZE COLUMN scored_resource_namespace,
    MATERIALIZE COLUMN scored_resource_name, MATERIALIZE COLUMN scored_score;
