-- Parts a merge replaced are removed within a cleanup period, by the table's
-- cleanup thread. By default the period grows to five minutes while there is
-- nothing to remove, so under a steady load a thousand replaced parts piled up
-- in memory for minutes, and were then removed at once by a hundred new
-- threads that stayed: the embedded ClickHouse grew by ~80 MB in one step.
ALTER TABLE reports MODIFY SETTING max_cleanup_delay_period = 30, concurrent_part_removal_threshold = 1000000;
ALTER TABLE changes_progress MODIFY SETTING max_cleanup_delay_period = 30, concurrent_part_removal_threshold = 1000000;
ALTER TABLE results MODIFY SETTING max_cleanup_delay_period = 30, concurrent_part_removal_threshold = 1000000;
ALTER TABLE policy_counts MODIFY SETTING max_cleanup_delay_period = 30, concurrent_part_removal_threshold = 1000000;
ALTER TABLE policy_windows MODIFY SETTING max_cleanup_delay_period = 30, concurrent_part_removal_threshold = 1000000;
ALTER TABLE policy_totals_windows MODIFY SETTING max_cleanup_delay_period = 30, concurrent_part_removal_threshold = 1000000;
