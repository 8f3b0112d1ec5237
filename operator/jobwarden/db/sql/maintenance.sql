-- Database upkeep: retention of finished jobs and the health of the hot tables
-- (dead tuples, autovacuum). Issue 16; docs/operations.md "Retention" and
-- "Dead tuples".

-- name: retention_bound
-- The newest `finished_at` a retention rule deletes for one status: the older of
-- "now minus the age" and "the finished_at of the (keep+1)-th newest row" (either
-- may be NULL: no such rule). Computed once per pass, so the batched deletes that
-- follow walk a fixed range and a count rule does not re-scan its `keep` rows for
-- every batch. NULL: nothing to delete.
SELECT LEAST(
    CASE WHEN %(older_than)s::float8 IS NULL THEN NULL
         ELSE now() - make_interval(secs => %(older_than)s::float8) END,
    CASE WHEN %(keep)s::bigint IS NULL THEN NULL ELSE (
        SELECT finished_at FROM {schema}.jobs
        WHERE status = %(status)s::{schema}.job_status AND finished_at IS NOT NULL
        ORDER BY finished_at DESC
        OFFSET %(keep)s::bigint LIMIT 1
    ) END
);

-- name: retention_delete
-- One batch of one status's finished jobs at or before `through`, in its own short
-- transaction. Rows another transaction holds (a manual retry, `jobwarden jobs
-- purge`, a schedule's history trim) are skipped, not waited for: no deleter ever
-- queues behind another, and a row two of them pick is deleted once. Jobs of a
-- schedule with a history limit for this status group are left to that limit
-- (0012_retention.sql). Attempt rows go with their job (ON DELETE CASCADE).
WITH doomed AS (
    SELECT j.id FROM {schema}.jobs AS j
    WHERE j.status = %(status)s::{schema}.job_status
      AND j.finished_at <= %(through)s
      AND (j.schedule_name IS NULL OR NOT EXISTS (
          SELECT 1 FROM {schema}.schedules AS s
          WHERE s.name = j.schedule_name
            AND (CASE WHEN %(status)s::text = 'completed' THEN s.successful_history_limit
                      ELSE s.failed_history_limit END) IS NOT NULL))
    LIMIT %(batch)s
    FOR UPDATE OF j SKIP LOCKED
)
DELETE FROM {schema}.jobs AS j USING doomed WHERE j.id = doomed.id;

-- name: db_autovacuum_setting
-- The server's autovacuum switch, and track_counts (autovacuum does nothing without it).
SELECT current_setting('autovacuum')::boolean AND current_setting('track_counts')::boolean;

-- name: db_table_health
-- Dead and live tuples, the last (auto)vacuum and each hot table's own autovacuum
-- switch (reloption `autovacuum_enabled`, default on). The counters are the
-- statistics collector's: approximate, and reset with the server's statistics.
SELECT c.relname::text,
       coalesce(st.n_live_tup, 0),
       coalesce(st.n_dead_tup, 0),
       coalesce(NOT ('autovacuum_enabled=false' = ANY(coalesce(c.reloptions, '{{}}'))), true),
       extract(epoch FROM now() - greatest(st.last_autovacuum, st.last_vacuum))::float8,
       pg_table_size(c.oid),
       pg_indexes_size(c.oid)
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables AS st ON st.relid = c.oid
WHERE n.nspname = %(schema)s
  AND c.relkind = 'r'
  AND c.relname = ANY(%(tables)s::text[])
ORDER BY c.relname;
