-- Named queries for search and bulk actions over a JobFilter (structs/search.py).
-- Every filter field is optional (NULL = any). The console and CLI run these
-- without server-side prepared statements, so each runs with a plan for its
-- actual values: the NULL branches fold away and `status = ANY(...)` can use
-- the partial indexes (jobs_problem_idx, the pending/processing ones).

-- name: fragment_job_filter
-- The filter, over unaliased rows of {schema}.jobs.
(%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s::{schema}.job_status[]))
AND (%(queue)s::text IS NULL OR queue = %(queue)s)
AND (%(job_class)s::text IS NULL OR job_class = %(job_class)s)
AND (%(class_prefix)s::text IS NULL OR starts_with(job_class, %(class_prefix)s))
AND (%(created_from)s::timestamptz IS NULL OR created_at >= %(created_from)s)
AND (%(created_to)s::timestamptz IS NULL OR created_at < %(created_to)s)
AND (%(text)s::text IS NULL OR strpos(lower(data::text), %(text)s) > 0
     OR strpos(lower(coalesce(last_error, '')), %(text)s) > 0)
AND (%(error)s::text IS NULL OR strpos(lower(coalesce(last_error, '')), %(error)s) > 0)

-- name: job_search
-- One page, newest first; keyset pagination: the next page passes the last id
-- seen as %(before)s. Never counts the whole table.
SELECT {fragment_job_columns}
FROM {schema}.jobs
WHERE {fragment_job_filter}
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_count_capped
-- How many jobs match, counting at most %(cap)s (the dry run of a bulk action,
-- the console's "N matching"): bounded work however big the table is.
SELECT count(*) FROM (
    SELECT 1 FROM {schema}.jobs WHERE {fragment_job_filter} LIMIT %(cap)s
) AS matching;

-- name: job_bulk_retry
-- One batch of a bulk retry, walking ids downwards from %(before)s (the caller
-- loops with the returned lowest id, so rows changed by the batch are never
-- revisited). Same effect as job_retry on each row.
WITH batch AS (
    SELECT id FROM {schema}.jobs
    WHERE {fragment_job_filter} AND id < %(before)s
    ORDER BY id DESC LIMIT %(batch)s
    FOR UPDATE
),
done AS (
    UPDATE {schema}.jobs AS j
    SET status = 'pending', run_at = now(), max_retries = greatest(j.max_retries, j.attempts),
        cancel_requested = false, finished_at = NULL, updated_at = now()
    FROM batch WHERE j.id = batch.id AND j.status IN ('failed', 'interrupted', 'cancelled')
    RETURNING j.id, j.queue
),
notified AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n FROM (SELECT DISTINCT queue FROM done) AS q
)
SELECT (SELECT count(*) FROM done), (SELECT min(id) FROM batch), (SELECT count(*) FROM batch),
       (SELECT n FROM notified);

-- name: job_bulk_cancel
-- One batch of a bulk cancel: as job_cancel on each row (pending rows end at once,
-- running ones are asked to stop).
WITH batch AS (
    SELECT id FROM {schema}.jobs
    WHERE {fragment_job_filter} AND id < %(before)s
    ORDER BY id DESC LIMIT %(batch)s
    FOR UPDATE
),
done AS (
    UPDATE {schema}.jobs AS j
    SET status = (CASE WHEN j.status = 'pending' THEN 'cancelled'
                       ELSE j.status END)::{schema}.job_status,
        cancel_requested = (j.status = 'processing'),
        finished_at = CASE WHEN j.status = 'pending' THEN now() ELSE j.finished_at END,
        updated_at = now()
    FROM batch WHERE j.id = batch.id AND j.status IN ('pending', 'processing')
    RETURNING j.id
)
SELECT (SELECT count(*) FROM done), (SELECT min(id) FROM batch), (SELECT count(*) FROM batch),
       0;

-- name: job_bulk_purge
-- One batch of a bulk purge: finished rows only (their attempt history goes with them).
WITH batch AS (
    SELECT id FROM {schema}.jobs
    WHERE {fragment_job_filter} AND id < %(before)s
    ORDER BY id DESC LIMIT %(batch)s
    FOR UPDATE
),
done AS (
    DELETE FROM {schema}.jobs AS j
    USING batch WHERE j.id = batch.id
      AND j.status IN ('completed', 'failed', 'interrupted', 'cancelled')
    RETURNING j.id
)
SELECT (SELECT count(*) FROM done), (SELECT min(id) FROM batch), (SELECT count(*) FROM batch),
       0;

-- name: job_schedule_recent
-- A schedule's latest jobs (its enqueued slots and what became of them), newest
-- first, from jobs_schedule_idx.
SELECT {fragment_job_columns}
FROM {schema}.jobs WHERE schedule_name = %(name)s
ORDER BY id DESC LIMIT %(limit)s;
