-- Named queries on queues: pause/resume (queue_pauses) and per-queue figures
-- computed from the jobs table's partial indexes.

-- name: fragment_queue_not_paused
-- Included by every claim variant (jobs.sql): a candidate row's queue is not
-- paused. Both subqueries are uncorrelated: each runs once per claim (an
-- InitPlan), not per candidate row.
-- Written so the planner cannot misjudge it (issue 16, docs/benchmarks.md "How
-- cost grows"): a correlated NOT EXISTS (and `queue <> ALL(...)` alone) is
-- estimated from the queue column's statistics, and with the few distinct
-- queues most tables have the planner concluded that almost no pending row
-- passes; it then read and sorted *every* pending row instead of walking the
-- claim index for the first few (a claim over 100,000 pending jobs took 130 ms
-- instead of 1 ms, growing with the table). An OR with the "nothing is paused"
-- test keeps the estimate at least half the rows, so the ordered index scan
-- with its LIMIT wins, and with no pause (the usual case) each row's test is free.
(NOT EXISTS (SELECT 1 FROM {schema}.queue_pauses)
 OR {schema}.jobs.queue <> ALL (ARRAY(SELECT qp.queue FROM {schema}.queue_pauses AS qp)))

-- name: queue_pause
-- Idempotent: pausing a paused queue keeps its first pause time. Returns the queue.
INSERT INTO {schema}.queue_pauses (queue, paused_by) VALUES (%(queue)s, %(by)s)
ON CONFLICT (queue) DO UPDATE SET paused_by = {schema}.queue_pauses.paused_by
RETURNING queue, paused_at;

-- name: queue_resume
-- NOTIFY as an enqueue does: its due jobs wake idle workers, whose polls back off
-- while LISTEN is up (worker/claiming.py).
WITH resumed AS (
    DELETE FROM {schema}.queue_pauses WHERE queue = %(queue)s RETURNING queue
)
SELECT queue, pg_notify(%(channel)s, queue) FROM resumed;

-- name: queue_paused_list
SELECT queue, paused_at, paused_by FROM {schema}.queue_pauses ORDER BY queue;

-- name: queue_list
-- Per queue: pending (and due) depth, oldest due age, running, and what finished
-- in the last %(window)s seconds. Every part reads a partial index (pending,
-- processing, finished_at), never the whole table. A queue appears while it has
-- pending, running or recently finished jobs, or while it is paused.
WITH pending AS (
    -- Pool and pod runs each from their own partial index (0015_pool_claim_indexes).
    SELECT queue, count(*) AS pending,
           count(*) FILTER (WHERE run_at <= now()) AS due,
           min(run_at) FILTER (WHERE run_at <= now()) AS oldest_due
    FROM (SELECT queue, run_at FROM {schema}.jobs
          WHERE status = 'pending' AND pod_run IS NULL
          UNION ALL
          SELECT queue, run_at FROM {schema}.jobs
          WHERE status = 'pending' AND pod_run IS NOT NULL) AS waiting
    GROUP BY queue
),
running AS (
    SELECT queue, count(*) AS running FROM {schema}.jobs
    WHERE status = 'processing' GROUP BY queue
),
recent AS (
    SELECT queue, count(*) FILTER (WHERE status = 'completed') AS completed,
           count(*) FILTER (WHERE status = 'failed') AS failed
    FROM {schema}.jobs
    WHERE finished_at > now() - make_interval(secs => %(window)s)
    GROUP BY queue
),
names AS (
    SELECT queue FROM pending UNION SELECT queue FROM running
    UNION SELECT queue FROM recent UNION SELECT queue FROM {schema}.queue_pauses
)
SELECT n.queue, coalesce(p.pending, 0), coalesce(p.due, 0),
       greatest(extract(epoch FROM now() - p.oldest_due), 0)::double precision,
       coalesce(r.running, 0), coalesce(c.completed, 0), coalesce(c.failed, 0),
       qp.paused_at
FROM names AS n
LEFT JOIN pending AS p ON p.queue = n.queue
LEFT JOIN running AS r ON r.queue = n.queue
LEFT JOIN recent AS c ON c.queue = n.queue
LEFT JOIN {schema}.queue_pauses AS qp ON qp.queue = n.queue
ORDER BY n.queue;

-- name: jobs_finished_per_minute
-- Jobs that finished per minute since %(since)s: completed, and failed or
-- interrupted. A range over jobs_finished_idx (finished_at), so it reads the rows
-- that finished in the range and nothing else; the console asks only for the
-- minutes it has not kept yet (console/charts.py).
SELECT date_trunc('minute', finished_at) AS minute,
       count(*) FILTER (WHERE status = 'completed') AS completed,
       count(*) FILTER (WHERE status IN ('failed', 'interrupted')) AS failed
FROM {schema}.jobs
WHERE finished_at >= %(since)s
GROUP BY 1
ORDER BY 1;
