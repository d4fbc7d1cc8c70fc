-- When each results row was written: the materializer's (or a fleet's) lag
-- behind the change's commit is written - committed, one row per result of
-- every change (no row of a change replaces another's).
ALTER TABLE results ADD COLUMN IF NOT EXISTS written DateTime64(3, 'UTC') DEFAULT now64(3);
