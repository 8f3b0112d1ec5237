-- Named queries on the jobs table. Each `-- name: X` header starts one query.
-- `{schema}` is the configured schema; literal braces are doubled. Every time is
-- the database clock (now()); no application server's clock is ever written.
-- Every write after a claim is fenced: WHERE id AND claim_token AND status = 'processing'.

-- name: job_insert_many
-- One round trip for any number of jobs. Ids are drawn up front so each input row
-- can be matched to its result; a unique-key conflict inserts nothing for that row
-- (the caller then looks the existing id up). Rows go in in key order, so two
-- batches that share keys never wait for each other in a cycle (see
-- job_insert_batch). NOTIFY once per distinct queue.
WITH input AS (
    SELECT nextval('{schema}.jobs_id_seq'::regclass) AS id, i.*
    FROM unnest(
        %(queues)s::text[], %(classes)s::text[], %(datas)s::jsonb[], %(priorities)s::integer[],
        %(run_ats)s::timestamptz[], %(delays)s::double precision[], %(max_retries)s::integer[],
        %(timeouts)s::double precision[], %(idempotents)s::boolean[], %(unique_keys)s::text[],
        %(lease_names)s::text[], %(schedule_names)s::text[], %(on_busys)s::text[],
        %(lease_ttls)s::double precision[], %(trace_contexts)s::text[], %(pod_runs)s::text[]
    ) WITH ORDINALITY AS i(queue, job_class, data, priority, run_at, delay, max_retries,
                           timeout_seconds, idempotent, unique_key, lease_name, schedule_name,
                           on_busy, lease_ttl_seconds, trace_context, pod_run, ord)
),
inserted AS (
    INSERT INTO {schema}.jobs (id, queue, job_class, data, priority, run_at, max_retries,
                               timeout_seconds, idempotent, unique_key, lease_name, schedule_name,
                               on_busy, lease_ttl_seconds, trace_context, pod_run)
    SELECT id, queue, job_class, data, priority,
           coalesce(run_at, now()) + make_interval(secs => coalesce(delay, 0)),
           max_retries, timeout_seconds, idempotent, unique_key, lease_name, schedule_name,
           on_busy, lease_ttl_seconds, trace_context, pod_run
    FROM input ORDER BY unique_key COLLATE "C", ord
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, queue
),
notified AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT input.ord, inserted.id AS inserted_id, input.unique_key, (SELECT n FROM notified) AS n
FROM input LEFT JOIN inserted ON inserted.id = input.id
ORDER BY input.ord;

-- name: job_insert_batch
-- The rows of one enqueue_many call, in one statement and one round trip: they
-- share every column but data and unique_key, so those travel once (scalars) and
-- the per-row ones as one JSON array each, zipped by ROWS FROM (no keys: a NULL
-- array, every key NULL). Ids are drawn up front so each row is matched to its
-- result; a unique-key conflict (with a stored row or an earlier row of the batch)
-- inserts nothing for that row, whose id comes back NULL (the caller then looks
-- the existing id up). Rows go in in key order (code points: COLLATE "C" is the
-- order Python's sort gives job_copy's rows): two batches that share keys then
-- wait for each other's keys in one order, never in a cycle (a deadlock). The
-- ids come back as one array in row order. NOTIFY once when anything was
-- inserted (delivered at commit).
WITH input AS (
    SELECT nextval('{schema}.jobs_id_seq'::regclass) AS id, i.data, i.unique_key, i.ord
    FROM ROWS FROM (jsonb_array_elements(%(datas)s::jsonb),
                    jsonb_array_elements_text(%(unique_keys)s::jsonb))
         WITH ORDINALITY AS i(data, unique_key, ord)
),
inserted AS (
    INSERT INTO {schema}.jobs (id, queue, job_class, data, priority, run_at, max_retries,
                               timeout_seconds, idempotent, unique_key, lease_name, schedule_name,
                               on_busy, lease_ttl_seconds, trace_context, pod_run)
    SELECT id, %(queue)s, %(job_class)s, data, %(priority)s,
           coalesce(%(run_at)s::timestamptz, now()) + make_interval(secs => %(delay)s),
           %(max_retries)s, %(timeout)s, %(idempotent)s, unique_key, %(lease_name)s,
           %(schedule_name)s, %(on_busy)s, %(lease_ttl)s, %(trace_context)s, %(pod_run)s
    FROM input ORDER BY unique_key COLLATE "C", ord
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id
),
notified AS (
    SELECT count(pg_notify(%(channel)s, %(queue)s)) AS n
    FROM (SELECT 1 FROM inserted LIMIT 1) AS any_inserted
)
SELECT array_agg(inserted.id ORDER BY input.ord), (SELECT n FROM notified)
FROM input LEFT JOIN inserted ON inserted.id = input.id;

-- name: fragment_insert_one
-- The common case of job_insert_many, one job, as a plain INSERT: no arrays to
-- build and unpack, so about twice the single-enqueue rate.
-- It wakes one idle worker, not all (migration 0025, job_wakeups): it takes the
-- newest live mark of a worker that serves the queue (SKIP LOCKED: concurrent
-- enqueues take different ones) and NOTIFYs that worker's channel; with no such
-- mark, the shared channel (every listening worker, as 0.1.0 did). Delivered at
-- commit; a rolled-back enqueue leaves the mark in place.
inserted AS (
    INSERT INTO {schema}.jobs (queue, job_class, data, priority, run_at, max_retries,
                               timeout_seconds, idempotent, unique_key, lease_name, schedule_name,
                               on_busy, lease_ttl_seconds, trace_context, pod_run)
    VALUES (%(queue)s, %(job_class)s, %(data)s, %(priority)s,
            coalesce(%(run_at)s::timestamptz, now()) + make_interval(secs => %(delay)s),
            %(max_retries)s, %(timeout)s, %(idempotent)s, %(unique_key)s, %(lease_name)s,
            %(schedule_name)s, %(on_busy)s, %(lease_ttl)s, %(trace_context)s, %(pod_run)s)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, queue
),
woken AS (
    DELETE FROM {schema}.job_wakeups AS w
    WHERE w.id = (SELECT m.id FROM {schema}.job_wakeups AS m, inserted
                  WHERE m.until > now() AND (m.queues IS NULL OR inserted.queue = ANY(m.queues))
                  ORDER BY m.id DESC LIMIT 1
                  FOR UPDATE OF m SKIP LOCKED)
    RETURNING w.channel
),
notified AS (
    SELECT count(pg_notify(coalesce((SELECT channel FROM woken), %(channel)s), inserted.queue))
           AS n
    FROM inserted
)

-- name: job_insert_one
-- One job (fragment_insert_one), committed as the transaction it runs in is
-- configured: the caller's own transaction (enqueue with conn=) decides.
WITH {fragment_insert_one}
SELECT inserted.id, (SELECT n FROM notified) FROM inserted;

-- name: job_insert_one_visible
-- One job on a pooled connection, in a transaction of its own that commits
-- asynchronously (synchronous_commit = off, for this transaction only): the
-- row and its NOTIFY are visible as soon as it commits, without waiting for
-- its WAL flush, so a worker claims it while the flush is still in progress.
-- Never returned to the caller by itself: the enqueue then runs flush_barrier
-- (a durable commit, whose flush covers this one) and returns only after it,
-- so an enqueue that returned is durable as before. Whatever a worker does
-- with the job meanwhile is covered by the claim's own durability rule
-- (fragment_claim_rows): a non-idempotent job's claim commits durably, which
-- flushes this row first.
WITH {fragment_insert_one},
asynchronous AS (SELECT set_config('synchronous_commit', 'off', true) AS setting)
SELECT inserted.id, (SELECT n FROM notified) FROM inserted CROSS JOIN asynchronous;

-- name: flush_barrier
-- Returns once everything committed before it is durable. A synchronous commit
-- flushes the WAL up to its own commit record -- so every asynchronous commit
-- written before it too -- but PostgreSQL flushes only for a transaction that
-- has an xid *and* wrote WAL before its commit record (RecordTransactionCommit):
-- `SELECT pg_current_xact_id()` alone commits without waiting. A transactional
-- logical message takes an xid and writes one small WAL record, and changes no
-- table; logical decoding consumers see it under this prefix and may ignore it.
-- Where this role may not emit one, the function waits for the WAL writer's
-- flush instead (migration 0019): never an error after the enqueue committed.
SELECT {schema}.flush_barrier();

-- name: job_copy_begin
-- First statement of a COPY batch (job_copy), in the same transaction: the
-- transaction's clock (now(), what an INSERT's defaults would use, so a run_at
-- is still the database's time) and one id per row drawn up front, so each row
-- is matched to its id without a RETURNING. NOTIFY once per distinct queue: it
-- is delivered at commit, and dropped with the batch if the COPY fails.
SELECT now(),
       array(SELECT nextval('{schema}.jobs_id_seq'::regclass)
             FROM generate_series(1, %(n)s::integer)),
       (SELECT count(pg_notify(%(channel)s, q)) FROM unnest(%(queues)s::text[]) AS q);

-- name: job_copy
-- Bulk insert in binary COPY format: no statement to parse per row, no arrays
-- to build and unpack, every value sent in its binary form. COPY has no ON
-- CONFLICT: a unique key that already exists fails the whole COPY with a
-- unique violation, and the caller redoes the batch through job_insert_many
-- (see JobsTable.insert_many).
COPY {schema}.jobs (id, queue, job_class, data, priority, run_at, max_retries, timeout_seconds,
                    idempotent, unique_key, lease_name, schedule_name, on_busy,
                    lease_ttl_seconds, trace_context, pod_run)
FROM STDIN (FORMAT BINARY);

-- name: job_ids_by_unique_key
SELECT unique_key, id FROM {schema}.jobs WHERE unique_key = ANY(%(unique_keys)s::text[]);

-- name: fragment_claim_rows
-- Shared by every claim variant (it follows their `WITH picked AS (...)`): turn
-- the rows in `picked` into processing rows with a fresh token each, count the
-- attempt, and return what the worker needs.
-- The token is derived from a batch id the claimant chose (fresh per claim) and
-- the row id, so a claimant whose reply was lost can ask which rows it claimed
-- (job_claims_of_batch) instead of guessing.
-- Durability, decided by the claimed rows themselves: when every claimed job is
-- idempotent the claim commits asynchronously (synchronous_commit = off for
-- this transaction only): it does not wait for its WAL flush, which is most of
-- an idle worker's enqueue-to-start time. A server crash can at worst forget
-- the claim; the job is then pending again and runs again, which an idempotent
-- job allows (at-least-once). A claim that holds a non-idempotent job commits
-- as the server is configured (durable by default) before the worker sees it,
-- so a crash can never return such a job to pending after it started (it would
-- run twice): it stays processing and is reaped as interrupted.
-- set_config(..., true) is local to the transaction; the commit reads the
-- setting before the transaction's settings are reset, and a transaction-mode
-- pooler never sees it leak into the next client's transaction.
-- The claimant's wake-up mark (migration 0025, job_wakeups) is renewed here, in
-- the claim's own transaction: its old marks go (and anyone's expired ones), and
-- a claimant that still has a free slot after this claim (it took fewer than
-- wake_free) marks itself with its own channel, so the next single enqueue of one
-- of its queues NOTIFYs it alone. wake_channel NULL: no mark (not listening).
, claimed AS (
    UPDATE {schema}.jobs AS j
    SET status = 'processing', attempts = j.attempts + 1,
        claim_token = md5(%(batch)s::text || ':' || j.id::text)::uuid,
        claimed_by = %(host)s, claimed_at = now(), heartbeat_at = now(),
        claim_expires_at = now() + make_interval(secs => %(grace)s), lease_lost = false,
        updated_at = now()
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.queue, j.job_class, j.data, j.priority, j.attempts, j.max_retries,
              j.timeout_seconds, j.idempotent, j.claim_token, j.lease_name, j.schedule_name,
              greatest(extract(epoch FROM now() - j.run_at), 0)::double precision AS queue_wait,
              j.on_busy, j.lease_ttl_seconds, j.trace_context
),
durability AS (
    SELECT set_config('synchronous_commit',
                      CASE WHEN bool_and(claimed.idempotent) THEN 'off'
                           ELSE current_setting('synchronous_commit') END,
                      true) AS setting
    FROM claimed
),
unmarked AS (
    DELETE FROM {schema}.job_wakeups AS w
    WHERE w.id IN (SELECT m.id FROM {schema}.job_wakeups AS m
                   WHERE m.channel = %(wake_channel)s::text OR m.until < now()
                   FOR UPDATE SKIP LOCKED)
),
marked AS (
    INSERT INTO {schema}.job_wakeups (channel, queues, until)
    SELECT %(wake_channel)s::text, %(wake_queues)s::text[],
           now() + make_interval(secs => %(wake_seconds)s)
    WHERE %(wake_channel)s::text IS NOT NULL
      AND (SELECT count(*) FROM claimed) < %(wake_free)s
)
SELECT claimed.* FROM claimed CROSS JOIN durability

-- name: job_claim_queues
-- The claim: pick due pending rows in priority order, skipping rows another claimant
-- has locked, and turn them into processing rows with a fresh token each, all in
-- one statement. SKIP LOCKED sits in the CTE so the UPDATE only touches rows this
-- statement locked. The attempt is counted here, at claim. A pod run (pod_run set)
-- is never a worker's: the operator claims it for its pod (podruns.sql); every
-- claim variant below says `pod_run IS NULL` too.
WITH picked AS (
    SELECT id FROM {schema}.jobs
    WHERE status = 'pending' AND queue = ANY(%(queues)s::text[]) AND run_at <= now()
      AND pod_run IS NULL AND {fragment_queue_not_paused}
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
{fragment_claim_rows};

-- name: job_claim_any
-- As job_claim_queues, over every queue.
WITH picked AS (
    SELECT id FROM {schema}.jobs
    WHERE status = 'pending' AND run_at <= now() AND pod_run IS NULL
      AND {fragment_queue_not_paused}
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
{fragment_claim_rows};

-- name: job_wakeup_unmark
-- A stopping worker removes its wake-up marks (migration 0025), so no enqueue
-- NOTIFYs a channel nobody LISTENs on any more (the job would wait for a poll).
-- A mark an enqueue holds (SKIP LOCKED) is that enqueue's: its NOTIFY goes unheard.
DELETE FROM {schema}.job_wakeups AS w
WHERE w.id IN (SELECT m.id FROM {schema}.job_wakeups AS m WHERE m.channel = %(channel)s
               FOR UPDATE SKIP LOCKED);

-- name: job_claims_of_batch
-- After a claim whose reply was lost (an ambiguous commit): the rows that claim
-- did take, still processing under its tokens, with their reap deadline pushed
-- forward as a heartbeat would. Returns what fragment_claim_rows returns (keep
-- the two lists in step). claimed_by narrows it to this host's few processing rows.
UPDATE {schema}.jobs AS j
SET heartbeat_at = now(), claim_expires_at = now() + make_interval(secs => %(grace)s)
WHERE j.status = 'processing' AND j.claimed_by = %(host)s
  AND j.claim_token = md5(%(batch)s::text || ':' || j.id::text)::uuid
RETURNING j.id, j.queue, j.job_class, j.data, j.priority, j.attempts, j.max_retries,
          j.timeout_seconds, j.idempotent, j.claim_token, j.lease_name, j.schedule_name,
          greatest(extract(epoch FROM now() - j.run_at), 0)::double precision AS queue_wait,
          j.on_busy, j.lease_ttl_seconds, j.trace_context;

-- name: job_claim_outcomes
-- What became of claims whose outcome write matched nothing: the rows that still
-- carry those claim tokens, with their state and last error. A write retried after
-- its reply was lost finds its own effect here (see worker/recorder.py); the
-- reaper's work is recognisable by its 'reaped: ' error.
SELECT j.id, j.status::text, j.last_error
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS c(id, token)
JOIN {schema}.jobs AS j ON j.id = c.id AND j.claim_token = c.token;

-- name: fragment_notify_done
-- Tell `wait`ers which jobs reached a terminal state: one NOTIFY per range of 300 ids
-- (the payload, comma-separated ids, stays far below NOTIFY's 8000-byte limit), for
-- the jobs a waiter marked (job_wait_mark) only, whose marks it removes: every NOTIFY
-- costs each LISTENing backend of the database (every worker's) a transaction, so
-- nothing is sent when nobody waits (migration 0024). Expects a `done(id)` CTE;
-- delivered when the writing transaction commits.
waited AS (
    DELETE FROM {schema}.job_waiters AS w
    WHERE w.job_id = ANY(ARRAY(SELECT id FROM done))
    RETURNING w.job_id
),
notified AS (
    SELECT count(pg_notify(%(done_channel)s, g.ids)) AS n
    FROM (SELECT string_agg(job_id::text, ',') AS ids FROM waited GROUP BY job_id / 300) AS g
)

-- name: job_wait_mark
-- A waiter's mark (Client.wait): terminal writes of this job NOTIFY the `done`
-- channel (fragment_notify_done) until `until`; renewed while it waits. Marks past
-- their `until` (waiters that went away before the job ended) are deleted here.
WITH expired AS (
    DELETE FROM {schema}.job_waiters WHERE until < now() AND job_id <> %(id)s
)
INSERT INTO {schema}.job_waiters AS w (job_id, until)
VALUES (%(id)s, now() + make_interval(secs => %(seconds)s))
ON CONFLICT (job_id) DO UPDATE SET until = greatest(w.until, excluded.until);

-- name: job_complete_many
-- Batched, fenced completion. Ids missing from the result were fenced.
-- The attempt's history row is written by the same statement.
-- The worker runs it prepared (Database.call, db/calls.py), and two things keep the
-- server on one generic plan that looks each claim up by its primary key:
-- - the arrays come through scalar subqueries, so no plan knows their length:
--   a custom plan for a one-row array looks cheaper than the generic plan for an
--   unknown one, and the server then planned anew on every call (0.3 ms, more
--   than running it);
-- - the status is compared as text, so that no partial index of processing rows
--   (jobs_claimed_by_idx, jobs_reap_idx) can serve the statement: statistics taken
--   while few rows were processing make scanning all of them look cheapest, and a
--   generic plan then scanned every processing row once per row of the batch.
WITH ended AS (
    UPDATE {schema}.jobs AS j
    SET status = 'completed', result = c.result, lease_lost = c.lease_lost, finished_at = now(),
        claim_expires_at = NULL, updated_at = now()
    FROM unnest((SELECT %(ids)s::bigint[]), (SELECT %(tokens)s::uuid[]),
                (SELECT %(results)s::jsonb[]), (SELECT %(lease_lost)s::boolean[]))
         AS c(id, token, result, lease_lost)
    WHERE j.id = c.id AND j.claim_token = c.token AND j.status::text = 'processing'
    RETURNING j.id, j.attempts, j.claimed_at, j.claimed_by, 'completed'::text AS outcome,
              j.status::text AS status_after, NULL::text AS error
),
recorded AS ({fragment_attempt_record}),
done AS (SELECT id FROM ended WHERE status_after <> 'pending'),
{fragment_notify_done}
SELECT ended.id FROM ended, notified;

-- name: job_complete_one
-- job_complete_many for a batch of one (an idle worker's every completion), by a
-- scalar id: a generic plan for an array of unknown length expects ten rows and
-- reads a small table whole rather than probe its primary key ten times; for one
-- id the probe is the cheapest plan at any size.
WITH ended AS (
    UPDATE {schema}.jobs AS j
    SET status = 'completed', result = %(result)s, lease_lost = %(lease_lost)s,
        finished_at = now(), claim_expires_at = NULL, updated_at = now()
    WHERE j.id = %(id)s AND j.claim_token = %(token)s AND j.status = 'processing'
    RETURNING j.id, j.attempts, j.claimed_at, j.claimed_by, 'completed'::text AS outcome,
              j.status::text AS status_after, NULL::text AS error
),
recorded AS ({fragment_attempt_record}),
done AS (SELECT id FROM ended),
{fragment_notify_done}
SELECT ended.id FROM ended, notified;

-- name: job_complete_tx
-- A job completing itself inside its own transaction (Job.complete_in_transaction):
-- fenced like every outcome write, run on the job's connection, so the completion
-- commits with the job's effects or not at all. Locking the row here also keeps
-- a reaper (SKIP LOCKED) away until that transaction ends.
WITH ended AS (
    UPDATE {schema}.jobs AS j
    SET status = 'completed', result = %(result)s, finished_at = now(),
        claim_expires_at = NULL, updated_at = now()
    WHERE j.id = %(id)s AND j.claim_token = %(token)s AND j.status = 'processing'
    RETURNING j.id, j.attempts, j.claimed_at, j.claimed_by, 'completed'::text AS outcome,
              j.status::text AS status_after, NULL::text AS error
),
recorded AS ({fragment_attempt_record}),
done AS (SELECT id FROM ended),
{fragment_notify_done}
SELECT ended.id FROM ended, notified;

-- name: job_fail
-- One failed attempt, fenced. The new state is decided here, from the row:
-- a cancel request ends in cancelled, a non-retryable error or exhausted attempts
-- in failed, otherwise pending again after the backoff.
-- The attempt's history row is written by the same statement.
WITH ended AS (
    UPDATE {schema}.jobs AS j
    SET status = (CASE
            WHEN j.cancel_requested THEN 'cancelled'
            WHEN NOT %(retryable)s OR j.attempts > j.max_retries THEN 'failed'
            ELSE 'pending' END)::{schema}.job_status,
        run_at = CASE
            WHEN j.cancel_requested OR NOT %(retryable)s OR j.attempts > j.max_retries THEN j.run_at
            ELSE now() + make_interval(secs => %(retry_in)s) END,
        finished_at = CASE
            WHEN j.cancel_requested OR NOT %(retryable)s OR j.attempts > j.max_retries THEN now()
            ELSE NULL END,
        last_error = %(error)s, claim_expires_at = NULL, updated_at = now()
    WHERE j.id = %(id)s AND j.claim_token = %(token)s AND j.status = 'processing'
    RETURNING j.id, j.attempts, j.claimed_at, j.claimed_by, 'failed'::text AS outcome,
              j.status::text AS status_after, j.last_error AS error
),
recorded AS ({fragment_attempt_record}),
done AS (SELECT id FROM ended WHERE status_after <> 'pending'),
{fragment_notify_done}
SELECT ended.status_after FROM ended, notified;

-- name: job_cancelled
-- The attempt stopped because it was asked to (JobCancelled), or never started
-- because its lease was busy with on_busy = skip (%(dropped)s), fenced. A dropped
-- run of a schedule's slot is that slot's fate "dropped", counted on the schedule
-- and marked in its slot history by this same statement.
WITH ended AS (
    UPDATE {schema}.jobs
    SET status = 'cancelled', last_error = %(error)s, finished_at = now(), claim_expires_at = NULL,
        updated_at = now()
    WHERE id = %(id)s AND claim_token = %(token)s AND status = 'processing'
    RETURNING id, attempts, claimed_at, claimed_by, 'cancelled'::text AS outcome,
              status::text AS status_after, last_error AS error, schedule_name, unique_key
),
slot_run AS (
    SELECT e.schedule_name,
           substr(e.unique_key, length(e.schedule_name) + 2)::timestamptz AS slot,
           'dropped'::text AS fate
    FROM ended AS e
    WHERE %(dropped)s::boolean AND {fragment_slot_run}
),
{fragment_slot_fate},
recorded AS ({fragment_attempt_record}),
done AS (SELECT id FROM ended WHERE status_after <> 'pending'),
{fragment_notify_done}
SELECT ended.id FROM ended, notified;

-- name: fragment_slot_run
-- The job is the run of a schedule's slot (unique key `<name>:<slot UTC ISO 8601>`;
-- not a run-now, whose key is `<name>:run-now:<id>`).
e.schedule_name IS NOT NULL
      AND e.unique_key LIKE e.schedule_name || ':____-__-__T__:__:__Z'

-- name: fragment_slot_fate
-- A later fate of a schedule slot's run, decided by the statement that includes this
-- (job_cancelled: "dropped"; job_release: "deferred"), from its CTE `slot_run`
-- (schedule_name, slot, fate; no row when the job is not such a run): the fate's
-- count on the schedule moves and the slot's history row is marked, in that same
-- statement. A deferral marks only a slot still "enqueued" (one fate per slot: a
-- slot already replaced or dropped stays so); a drop marks it whatever it was.
fate_counted AS (
    UPDATE {schema}.schedules AS s
    SET dropped_count = s.dropped_count + (r.fate = 'dropped')::integer,
        deferred_count = s.deferred_count + (r.fate = 'deferred')::integer,
        updated_at = now()
    FROM slot_run AS r WHERE s.name = r.schedule_name
    RETURNING s.name
),
fate_marked AS (
    UPDATE {schema}.schedule_slots AS h SET fate = r.fate, recorded_at = now()
    FROM slot_run AS r
    WHERE h.schedule_name = r.schedule_name AND h.slot = r.slot
      AND (r.fate <> 'deferred' OR h.fate = 'enqueued')
    RETURNING h.slot
)

-- name: job_release
-- Give a claim back without running it (a busy lease, or a prefetched job at
-- shutdown): pending again, the attempt the claim counted given back, fenced.
-- The first deferral of a schedule slot's run is that slot's fate "deferred",
-- counted on the schedule and marked in its slot history by this same statement
-- (later deferrals of the same run count nothing: one fate per slot).
WITH released AS (
    UPDATE {schema}.jobs
    SET status = 'pending', attempts = greatest(attempts - 1, 0),
        run_at = now() + make_interval(secs => %(delay)s),
        deferrals = deferrals + %(deferral)s::integer, claim_expires_at = NULL,
        updated_at = now()
    WHERE id = %(id)s AND claim_token = %(token)s AND status = 'processing'
    RETURNING id, schedule_name, unique_key, deferrals
),
slot_run AS (
    SELECT e.schedule_name,
           substr(e.unique_key, length(e.schedule_name) + 2)::timestamptz AS slot,
           'deferred'::text AS fate
    FROM released AS e
    WHERE %(deferral)s::integer = 1 AND e.deferrals = 1 AND {fragment_slot_run}
),
{fragment_slot_fate}
SELECT id FROM released;

-- name: job_heartbeat_many
-- Batched, fenced heartbeat of every running claim of a worker: pushes the reap
-- deadline forward. Ids missing from the result lost their claim. Arrays through
-- scalar subqueries and the status compared as text, for the reasons
-- job_complete_many gives: one generic plan, rows by id.
UPDATE {schema}.jobs AS j
SET heartbeat_at = now(), claim_expires_at = now() + make_interval(secs => %(grace)s)
FROM unnest((SELECT %(ids)s::bigint[]), (SELECT %(tokens)s::uuid[])) AS c(id, token)
WHERE j.id = c.id AND j.claim_token = c.token AND j.status::text = 'processing'
RETURNING j.id, j.cancel_requested;

-- name: job_reap
-- Reclaim processing rows whose claimant stopped heartbeating. Idempotent jobs go
-- back to pending (or failed when their attempts are used up); non-idempotent jobs
-- become interrupted and never start again by themselves. SKIP LOCKED makes
-- concurrent reapers (workers, operators, clusters) split the work safely. The
-- reaped attempt's history row is written by the same statement.
-- A pod run whose pod never started (heartbeat_at still NULL: `jobwarden run-job`
-- never began, so the job's code never ran, see podruns.sql) is retried whatever
-- its idempotency: running it again cannot run it twice.
-- Its rows are read by name (db/jobs.py ReapColumns; tests/db/test_named_rows.py).
WITH stale AS (
    SELECT id, (pod_run IS NOT NULL AND heartbeat_at IS NULL) AS unstarted
    FROM {schema}.jobs
    WHERE status = 'processing' AND claim_expires_at < now()
    ORDER BY claim_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
ended AS (
    UPDATE {schema}.jobs AS j
    SET status = (CASE
            WHEN j.cancel_requested THEN 'cancelled'
            WHEN NOT j.idempotent AND NOT stale.unstarted THEN 'interrupted'
            WHEN j.attempts > j.max_retries THEN 'failed'
            ELSE 'pending' END)::{schema}.job_status,
        finished_at = CASE
            WHEN j.cancel_requested OR (NOT j.idempotent AND NOT stale.unstarted)
                 OR j.attempts > j.max_retries THEN now()
            ELSE NULL END,
        run_at = now(),
        last_error = CASE WHEN stale.unstarted
            THEN 'reaped: the pod of ' || j.pod_run || ' did not start (claimed by '
                 || coalesce(j.claimed_by, 'unknown') || ' at ' || j.claimed_at::text || ')'
            ELSE 'reaped: no heartbeat from ' || coalesce(j.claimed_by, 'unknown host')
                 || ' since ' || coalesce(j.heartbeat_at, j.claimed_at)::text END,
        claim_expires_at = NULL, updated_at = now()
    FROM stale WHERE j.id = stale.id
    RETURNING j.id, j.queue, j.job_class, j.attempts, j.claimed_at, j.claimed_by,
              'reaped'::text AS outcome, j.status::text AS status_after, j.last_error AS error,
              j.lease_name, j.lease_token, j.claim_token
),
recorded AS ({fragment_attempt_record}),
-- The lease a reaped attempt held (exclusive job, concurrency key, Forbid schedule)
-- is released with its claim, fenced on that claim (owner = claim token) and on the
-- token the attempt was handed: the key is free within the heartbeat grace, not
-- after the lease window. A holder that was only paused finds out at its next
-- renewal (lease lost), exactly as if the lease had lapsed.
freed AS ({fragment_free_ended_claims_lease}),
{fragment_wake_deferred_on_freed},
done AS (SELECT id FROM ended WHERE status_after <> 'pending'),
{fragment_notify_done}
SELECT ended.id, ended.queue, ended.job_class, ended.status_after, ended.claimed_by,
       (SELECT count(*) FROM freed) AS freed_leases,
       (SELECT count(*) FROM (SELECT pg_notify(%(lease_channel)s, name) FROM freed
                              WHERE waiting_until > now()) AS n) AS lease_notifies
FROM ended, notified, woken_notified;

-- name: fragment_job_columns
-- A job as JobRecord reads it (db/jobs.py JOB_COLUMNS): JobRecord's fields, by name
-- and in its order (tests/db/test_named_rows.py checks every query that uses it).
id, queue, job_class, data, priority, status::text AS status, run_at, attempts, max_retries,
timeout_seconds, idempotent, unique_key, lease_name, claimed_by, claimed_at, heartbeat_at,
cancel_requested, deferrals, lease_lost, lease_token, result, last_error, schedule_name,
created_at, updated_at, finished_at, trace_context, pod_run

-- name: job_get
SELECT {fragment_job_columns}
FROM {schema}.jobs WHERE id = %(id)s;

-- name: job_list
SELECT {fragment_job_columns}
FROM {schema}.jobs
WHERE (%(status)s::text IS NULL OR status::text = %(status)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(job_class)s::text IS NULL OR job_class = %(job_class)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_cancel
-- Pending jobs are cancelled at once; a processing job is asked to stop: its next
-- heartbeat() raises JobCancelled, and a failure or reap ends it as cancelled.
WITH written AS (
    UPDATE {schema}.jobs
    SET status = (CASE WHEN status = 'pending' THEN 'cancelled' ELSE status END)
                 ::{schema}.job_status,
        cancel_requested = (status = 'processing'),
        finished_at = CASE WHEN status = 'pending' THEN now() ELSE finished_at END,
        updated_at = now()
    WHERE id = %(id)s AND status IN ('pending', 'processing')
    RETURNING id, status::text AS status
),
done AS (SELECT id FROM written WHERE status = 'cancelled'),
{fragment_notify_done}
SELECT written.status FROM written, notified;

-- name: job_retry
-- A manual retry of a finished job: pending now, with one more attempt allowed.
UPDATE {schema}.jobs
SET status = 'pending', run_at = now(), max_retries = greatest(max_retries, attempts),
    cancel_requested = false, finished_at = NULL, updated_at = now()
WHERE id = %(id)s AND status IN ('failed', 'interrupted', 'cancelled')
RETURNING id;

-- name: job_purge
-- Delete finished rows in bounded batches (the caller loops) so a large purge never
-- holds a long transaction.
DELETE FROM {schema}.jobs
WHERE id IN (
    SELECT id FROM {schema}.jobs
    WHERE status::text = ANY(%(statuses)s::text[])
      AND finished_at < now() - make_interval(secs => %(older_than)s)
    LIMIT %(batch)s
);

-- name: job_running
-- The newest running jobs (the overview, the live view of dev and top). The
-- literal status lets the planner use the processing partial indexes and sort
-- the few running rows; job_search's status test (ANY over a job_status[] cast)
-- is not a constant to the planner (enum input is not immutable), which then
-- expects most rows to match and walks the primary key instead -- past every
-- row of a big table when hardly anything is running.
SELECT {fragment_job_columns}
FROM {schema}.jobs
WHERE status = 'processing'
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_delete_finished
-- One job, only when it is finished (completed, failed, interrupted, cancelled).
-- The status test is the fence: a row that was retried or claimed meanwhile no
-- longer matches (a DELETE that meets a claim's uncommitted write waits for it
-- and re-checks the new row), so a running job is never deleted. Its attempt
-- history goes with it (ON DELETE CASCADE). Returns the status it had.
DELETE FROM {schema}.jobs
WHERE id = %(id)s AND status IN ('completed', 'failed', 'interrupted', 'cancelled')
RETURNING status::text;

-- name: job_stats
SELECT queue, status::text, count(*) FROM {schema}.jobs GROUP BY queue, status ORDER BY queue, status;

-- name: job_scheduled_counts
-- Pending jobs that are not due yet (a delay, a retry backoff, a future run_at),
-- per queue: `jobwarden status` shows them apart from the pending jobs that are due.
-- Pool and pod runs each from their own partial index (0015_pool_claim_indexes).
SELECT queue, count(*)
FROM (SELECT queue FROM {schema}.jobs
      WHERE status = 'pending' AND run_at > now() AND pod_run IS NULL
      UNION ALL
      SELECT queue FROM {schema}.jobs
      WHERE status = 'pending' AND run_at > now() AND pod_run IS NOT NULL) AS later
GROUP BY queue ORDER BY queue;

-- name: db_now
SELECT now();

-- name: fragment_claim_serialized
-- Did this transaction's host_claim_lock queue on the host's cap lock (hosts.sql)?
(coalesce(current_setting('jobwarden.claim_serialized', true), '') = 'true')

-- name: job_claim_capped_queues
-- The claim under the host registry's per-host cap. Runs in a transaction right
-- after host_claim_lock (hosts.sql) took this host's row FOR SHARE (and, for a
-- capped host, the host's advisory lock), so this statement's snapshot already
-- contains every claim a sibling process on the same host committed: at most
-- cap - running rows are claimed, across all of them. The cap and the drain are
-- read here from that locked row (both statements travel in one round trip): no
-- cap claims up to the limit without counting; a draining or unregistered host
-- claims nothing (LIMIT 0), and so does a capped claim whose lock statement saw
-- no cap (it did not queue behind its siblings, so it cannot count).
WITH gate AS (
    SELECT coalesce(h.host_cap, p.host_cap) AS cap
    FROM {schema}.hosts AS h LEFT JOIN {schema}.host_pools AS p ON p.name = h.pool
    WHERE h.name = %(host)s
      AND NOT (h.draining AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now()))
),
running AS (
    SELECT count(*) AS n FROM {schema}.jobs
    WHERE status = 'processing' AND claimed_by = %(host)s
),
picked AS (
    SELECT id FROM {schema}.jobs
    WHERE status = 'pending' AND queue = ANY(%(queues)s::text[]) AND run_at <= now()
      AND pod_run IS NULL AND {fragment_queue_not_paused}
    ORDER BY priority DESC, run_at, id
    LIMIT coalesce((SELECT CASE WHEN g.cap IS NULL THEN %(limit)s::bigint
                               WHEN NOT {fragment_claim_serialized} THEN 0
                               ELSE greatest(least(%(limit)s::bigint,
                                                   g.cap - (SELECT n FROM running)), 0) END
                    FROM gate AS g), 0)
    FOR UPDATE SKIP LOCKED
)
{fragment_claim_rows};

-- name: job_claim_capped_any
-- As job_claim_capped_queues, over every queue.
WITH gate AS (
    SELECT coalesce(h.host_cap, p.host_cap) AS cap
    FROM {schema}.hosts AS h LEFT JOIN {schema}.host_pools AS p ON p.name = h.pool
    WHERE h.name = %(host)s
      AND NOT (h.draining AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now()))
),
running AS (
    SELECT count(*) AS n FROM {schema}.jobs
    WHERE status = 'processing' AND claimed_by = %(host)s
),
picked AS (
    SELECT id FROM {schema}.jobs
    WHERE status = 'pending' AND run_at <= now() AND pod_run IS NULL
      AND {fragment_queue_not_paused}
    ORDER BY priority DESC, run_at, id
    LIMIT coalesce((SELECT CASE WHEN g.cap IS NULL THEN %(limit)s::bigint
                               WHEN NOT {fragment_claim_serialized} THEN 0
                               ELSE greatest(least(%(limit)s::bigint,
                                                   g.cap - (SELECT n FROM running)), 0) END
                    FROM gate AS g), 0)
    FOR UPDATE SKIP LOCKED
)
{fragment_claim_rows};

-- name: job_next_due_queues
-- Seconds until the next pending job of these queues comes due (NULL: none waits).
-- Sent in an idle worker's claim message (JobsTable.claim_idle), after the claim in
-- the same transaction, so the worker may sleep past its poll interval without
-- missing a delayed job, a retry's backoff or a deferral that no NOTIFY announces.
-- `run_at > now()`: what is due now was the claim's, or is held by a paused queue
-- (its resume NOTIFYs) or locked by a sibling's claim.
SELECT extract(epoch FROM min(run_at) - now())::double precision
FROM {schema}.jobs
WHERE status = 'pending' AND queue = ANY(%(queues)s::text[]) AND run_at > now()
  AND pod_run IS NULL;

-- name: job_next_due_any
-- As job_next_due_queues, over every queue.
SELECT extract(epoch FROM min(run_at) - now())::double precision
FROM {schema}.jobs
WHERE status = 'pending' AND run_at > now() AND pod_run IS NULL;

-- name: job_oldest_pending
-- Age of the oldest due pending job per queue: how long work has been waiting.
-- Pool and pod runs each from their own partial index (0015_pool_claim_indexes).
SELECT queue, extract(epoch FROM now() - min(run_at))::double precision
FROM (SELECT queue, run_at FROM {schema}.jobs
      WHERE status = 'pending' AND run_at <= now() AND pod_run IS NULL
      UNION ALL
      SELECT queue, run_at FROM {schema}.jobs
      WHERE status = 'pending' AND run_at <= now() AND pod_run IS NOT NULL) AS due
GROUP BY queue;

-- name: fragment_free_ended_claims_lease
-- Shared by the statements that end a claim for a claimant that cannot release its
-- own lease (the reaper, a pod run's failure): free the lease named on each `ended`
-- row, fenced on that claim (owner = claim token) and on the token the attempt was
-- handed. Returns each freed lease's name and waiting_until (to wake its waiters).
UPDATE {schema}.leases AS l
SET owner = NULL, holder_host = NULL, expires_at = NULL, released_at = now()
FROM ended AS e
WHERE l.name = e.lease_name AND l.slot = 0 AND l.token = e.lease_token
  AND l.owner = e.claim_token::text
RETURNING l.name, l.waiting_until

-- name: fragment_wake_deferred_on_freed
-- Shared by the statements that free a lease for a claimant that cannot release it
-- itself (the reaper, a pod run's end): the next job deferred on each freed lease
-- (highest priority, oldest) is made due now, and the workers of its queue are
-- woken, as a holder's own release does (lease_hand_over). Without it the
-- job waited out its defer delay (up to 30 s) for a lease that was already free: a
-- Replace's next pod run started up to 30 s late, and never with an interval that
-- short. One job per lease, so a crowd deferred on one key does not stampede.
-- Expects a `freed(name)` CTE; the jobs it reads are pending in this statement's
-- snapshot, so none of them is a row the `ended` CTE just changed.
woken AS (
    UPDATE {schema}.jobs AS j SET run_at = now(), updated_at = now()
    FROM freed, LATERAL (
        SELECT x.id FROM {schema}.jobs AS x
        WHERE x.status = 'pending' AND x.lease_name = freed.name AND x.run_at > now()
        ORDER BY x.priority DESC, x.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ) AS next_job
    WHERE j.id = next_job.id
    RETURNING j.queue
),
woken_notified AS (
    SELECT count(pg_notify(%(jobs_channel)s, q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM woken) AS q
)

-- name: fragment_attempt_record
-- Shared by every statement that ends an attempt (complete, fail, cancelled, reap):
-- upsert the attempt's history row from the `ended` rows. The ring slot
-- `mod(attempt, 25)` bounds the history per job (0006_job_attempts.sql). The error
-- text carries the traceback the worker formatted; its last line is the error.
INSERT INTO {schema}.job_attempts AS a (job_id, slot, attempt, started_at, host, outcome,
                                       status_after, error, traceback)
SELECT id, mod(attempts, 25), attempts, claimed_at, claimed_by, outcome, status_after,
       regexp_replace(error, '^.*\n', ''),
       CASE WHEN strpos(error, chr(10)) > 0 THEN error END
FROM ended
ON CONFLICT (job_id, slot) DO UPDATE
SET attempt = excluded.attempt, started_at = excluded.started_at, finished_at = now(),
    host = excluded.host, outcome = excluded.outcome, status_after = excluded.status_after,
    error = excluded.error, traceback = excluded.traceback

-- name: job_attempt_list
-- A job's attempt history, oldest first.
SELECT attempt, started_at, finished_at, host, outcome, status_after, error, traceback
FROM {schema}.job_attempts WHERE job_id = %(id)s ORDER BY attempt;

-- name: job_class_failure_record
-- A worker could not import a job class (migration 0023): the newest failure, counted.
-- Written from the failing attempt's path only (never on success), at most once a
-- minute per class and process (worker/running.py).
INSERT INTO {schema}.job_class_failures (job_class, error, host, failed_at, failures)
VALUES (%(job_class)s, left(%(error)s, 1000), %(host)s, now(), 1)
ON CONFLICT (job_class) DO UPDATE
SET error = excluded.error, host = excluded.host, failed_at = excluded.failed_at,
    failures = {schema}.job_class_failures.failures + 1;

-- name: job_status_fingerprints
-- One digest per job of %(ids)s: the job row and its lease's rows, what an
-- ExclusiveJob's status pass reads. The operator's resync loop passes an ExclusiveJob
-- only when its digest changed (controller/kube/kinds.py).
SELECT j.id, md5(row(j.*)::text || coalesce((
    SELECT string_agg(row(l.*)::text, ',' ORDER BY l.slot) FROM {schema}.leases AS l
    WHERE l.name = j.lease_name), ''))
FROM {schema}.jobs AS j
WHERE j.id = ANY(%(ids)s::bigint[]);
