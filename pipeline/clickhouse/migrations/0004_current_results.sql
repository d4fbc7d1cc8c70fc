-- The results of each stored report version as typed arrays, derived by
-- ClickHouse from the object JSON at insert time (the materializer sends
-- nothing more). With reports FINAL they answer questions about the current
-- results without joining the results history.
ALTER TABLE reports ADD COLUMN IF NOT EXISTS result_policy Array(LowCardinality(String))
    MATERIALIZED arrayMap(r -> JSONExtractString(r, 'policy'),
        arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results')));
ALTER TABLE reports ADD COLUMN IF NOT EXISTS result_rule Array(LowCardinality(String))
    MATERIALIZED arrayMap(r -> JSONExtractString(r, 'rule'),
        arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results')));
ALTER TABLE reports ADD COLUMN IF NOT EXISTS result_status Array(LowCardinality(String))
    MATERIALIZED arrayMap(r -> JSONExtractString(r, 'result'),
        arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results')));
ALTER TABLE reports ADD COLUMN IF NOT EXISTS result_severity Array(LowCardinality(String))
    MATERIALIZED arrayMap(r -> JSONExtractString(r, 'severity'),
        arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results')));
ALTER TABLE reports ADD COLUMN IF NOT EXISTS result_category Array(LowCardinality(String))
    MATERIALIZED arrayMap(r -> JSONExtractString(r, 'category'),
        arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results')));
ALTER TABLE reports ADD COLUMN IF NOT EXISTS result_resource_kind Array(LowCardinality(String))
    MATERIALIZED arrayMap(r -> if(JSONLength(r, 'resources') > 0, JSONExtractString(r, 'resources', 1, 'kind'), scope_kind),
        arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results')));
ALTER TABLE reports ADD COLUMN IF NOT EXISTS result_resource_namespace Array(LowCardinality(String))
    MATERIALIZED arrayMap(r -> if(JSONLength(r, 'resources') > 0, if(JSONExtractString(r, 'resources', 1, 'namespace') = '', namespace, JSONExtractString(r, 'resources', 1, 'namespace')), namespace),
        arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results')));
ALTER TABLE reports ADD COLUMN IF NOT EXISTS result_resource_name Array(String)
    MATERIALIZED arrayMap(r -> if(JSONLength(r, 'resources') > 0, JSONExtractString(r, 'resources', 1, 'name'), scope_name),
        arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results')));
ALTER TABLE reports ADD COLUMN IF NOT EXISTS result_score Array(Nullable(Float64))
    MATERIALIZED arrayMap(r -> toFloat64OrNull(JSONExtractString(r, 'properties', 'score')),
        arrayConcat(JSONExtractArrayRaw(object, 'results'), JSONExtractArrayRaw(object, 'spec', 'results')));
