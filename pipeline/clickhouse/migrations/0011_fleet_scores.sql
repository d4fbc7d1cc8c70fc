-- A fleet's current reports carry the columns a cluster's have for the
-- dashboard's resources and findings: each result's rule and score, and the
-- scored results as narrow arrays of their own (as 0004 and 0007 give
-- reports), derived by ClickHouse from the object at insert time.
ALTER TABLE fleet_reports ADD COLUMN IF NOT EXISTS result_rule Array(LowCardinality(String))
    MATERIALIZED arrayMap(r -> JSONExtractString(r, 'rule'),
        arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results')));
ALTER TABLE fleet_reports ADD COLUMN IF NOT EXISTS result_score Array(Nullable(Float64))
    MATERIALIZED arrayMap(r -> toFloat64OrNull(JSONExtractString(r, 'properties', 'score')),
        arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results')));
ALTER TABLE fleet_reports ADD COLUMN IF NOT EXISTS scored_policy Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> isNotNull(s), result_policy, result_score);
ALTER TABLE fleet_reports ADD COLUMN IF NOT EXISTS scored_rule Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> isNotNull(s), result_rule, result_score);
ALTER TABLE fleet_reports ADD COLUMN IF NOT EXISTS scored_resource_kind Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> isNotNull(s), result_resource_kind, result_score);
ALTER TABLE fleet_reports ADD COLUMN IF NOT EXISTS scored_resource_name Array(String)
    MATERIALIZED arrayFilter((x, s) -> isNotNull(s), result_resource_name, result_score);
ALTER TABLE fleet_reports ADD COLUMN IF NOT EXISTS scored_score Array(Float64)
    MATERIALIZED arrayMap(s -> assumeNotNull(s), arrayFilter(s -> isNotNull(s), result_score));
-- Parts written before this migration get the columns in the background.
ALTER TABLE fleet_reports MATERIALIZE COLUMN result_rule, MATERIALIZE COLUMN result_score,
    MATERIALIZE COLUMN scored_policy, MATERIALIZE COLUMN scored_rule,
    MATERIALIZE COLUMN scored_resource_kind, MATERIALIZE COLUMN scored_resource_name,
    MATERIALIZE COLUMN scored_score;
