-- The failing results as narrow typed arrays of their own, derived by
-- ClickHouse from the result arrays at insert time, in the reports of one
-- cluster and of a fleet. Failures are a small part of all results (about one
-- in twenty in the benchmark's Kyverno reports): questions about them (the
-- resources failing most) read these arrays from FINAL instead of every
-- result's columns.
ALTER TABLE reports ADD COLUMN IF NOT EXISTS failing_policy Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> s = 'fail', result_policy, result_status);
ALTER TABLE reports ADD COLUMN IF NOT EXISTS failing_severity Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> s = 'fail', result_severity, result_status);
ALTER TABLE reports ADD COLUMN IF NOT EXISTS failing_resource_kind Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> s = 'fail', result_resource_kind, result_status);
ALTER TABLE reports ADD COLUMN IF NOT EXISTS failing_resource_namespace Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> s = 'fail', result_resource_namespace, result_status);
ALTER TABLE reports ADD COLUMN IF NOT EXISTS failing_resource_name Array(String)
    MATERIALIZED arrayFilter((x, s) -> s = 'fail', result_resource_name, result_status);
-- Parts written before this migration get the columns in the background.
ALTER TABLE reports MATERIALIZE COLUMN failing_policy,
    MATERIALIZE COLUMN failing_severity,
    MATERIALIZE COLUMN failing_resource_kind,
    MATERIALIZE COLUMN failing_resource_namespace,
    MATERIALIZE COLUMN failing_resource_name;
ALTER TABLE fleet_reports ADD COLUMN IF NOT EXISTS failing_policy Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> s = 'fail', result_policy, result_status);
ALTER TABLE fleet_reports ADD COLUMN IF NOT EXISTS failing_severity Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> s = 'fail', result_severity, result_status);
ALTER TABLE fleet_reports ADD COLUMN IF NOT EXISTS failing_resource_kind Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> s = 'fail', result_resource_kind, result_status);
ALTER TABLE fleet_reports ADD COLUMN IF NOT EXISTS failing_resource_namespace Array(LowCardinality(String))
    MATERIALIZED arrayFilter((x, s) -> s = 'fail', result_resource_namespace, result_status);
ALTER TABLE fleet_reports ADD COLUMN IF NOT EXISTS failing_resource_name Array(String)
    MATERIALIZED arrayFilter((x, s) -> s = 'fail', result_resource_name, result_status);
-- Parts written before this migration get the columns in the background.
ALTER TABLE fleet_reports MATERIALIZE COLUMN failing_policy,
    MATERIALIZE COLUMN failing_severity,
    MATERIALIZE COLUMN failing_resource_kind,
    MATERIALIZE COLUMN failing_resource_namespace,
    MATERIALIZE COLUMN failing_resource_name;
