-- Retention of finished jobs (issue 16, docs/operations.md "Retention").
--
-- A schedule's CronJob history limits (successfulJobsHistoryLimit /
-- failedJobsHistoryLimit) are recorded on its row, so the database-wide
-- retention task can leave that schedule's finished jobs to the limit that
-- governs them instead of deleting them by age as well: one rule per row,
-- never two deleters with different ideas of what to keep. NULL: no limit,
-- the schedule's jobs follow the database-wide retention like any others.
ALTER TABLE {schema}.schedules
    ADD COLUMN successful_history_limit integer,
    ADD COLUMN failed_history_limit integer;
