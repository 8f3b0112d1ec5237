-- Named queries on the schedules table. `{schema}` is the configured schema; literal
-- braces are doubled. Every time is the database clock (now()) unless the caller
-- passes an explicit instant (tests pin "now" that way instead of sleeping).
--
-- The record read: the stored row, the status of the job of its last slot, the
-- newest completed job of the schedule (jobs_schedule_idx walks the schedule's jobs
-- newest first and stops at the first completed one), and the newest failure of a
-- worker to import its job class (migration 0023; one primary-key probe).

-- name: fragment_schedule_record
-- Named as db/schedules.py's ScheduleColumns, in its order (read by name).
SELECT s.name, s.expression, s.cron, s.interval_seconds, s.timezone, s.job_class, s.data,
       s.queue, s.priority, s.timeout_seconds, s.max_retries, s.idempotent, s.catch_up,
       s.catch_up_window_seconds, s.catch_up_max, s.overlap, s.suspended, s.suspended_by,
       s.spec_suspended, s.source, s.origin, s.spec_hash, s.planned_until, s.last_slot,
       s.last_enqueued_slot, s.next_slot, s.enqueued_count, s.skipped_count, s.missed_count,
       s.last_job_id, j.status::text AS last_job_status, j.finished_at AS last_job_finished_at,
       greatest(s.last_success_at, ok.finished_at) AS last_success_at, s.last_error,
       s.created_at, s.updated_at, s.pod_run, s.replaced_count, s.dropped_count,
       s.deferred_count, s.owner_held_at, f.error AS class_error, f.host AS class_error_host,
       f.failed_at AS class_error_at
FROM {schema}.schedules AS s
LEFT JOIN {schema}.jobs AS j ON j.id = s.last_job_id
LEFT JOIN {schema}.job_class_failures AS f ON f.job_class = s.job_class
LEFT JOIN LATERAL (
    SELECT c.finished_at FROM {schema}.jobs AS c
    WHERE c.schedule_name = s.name AND c.status = 'completed'
    ORDER BY c.id DESC LIMIT 1
) AS ok ON true

-- name: schedule_get
{fragment_schedule_record}
WHERE s.name = %(name)s;

-- name: schedule_get_many
-- As schedule_get, for every schedule of %(names)s that exists (the operator's batch
-- of passes reads its rows with one statement, controller/jobschedules/reconciler.py).
{fragment_schedule_record}
WHERE s.name = ANY(%(names)s::text[]);

-- name: schedule_lock
-- As schedule_get, with the schedule row locked until the caller's transaction ends:
-- a definition change and a runner pass on one schedule are serialised.
{fragment_schedule_record}
WHERE s.name = %(name)s
FOR UPDATE OF s;

-- name: schedule_list
{fragment_schedule_record}
ORDER BY s.name;

-- name: schedule_now
-- The instant a definition change works at: the caller's, or the database clock
-- (transaction start, so one change sees one "now").
SELECT coalesce(%(now)s::timestamptz, now());

-- name: schedule_insert
-- A new schedule starts from now: planned_until = now, so no slot before its
-- creation is run or counted. A concurrent insert of the same name wins the race
-- and this returns nothing (the caller then locks and updates the winner's row).
INSERT INTO {schema}.schedules (
    name, expression, cron, interval_seconds, timezone, job_class, data, queue, priority,
    timeout_seconds, max_retries, idempotent, catch_up, catch_up_window_seconds,
    catch_up_max, overlap, suspended, suspended_by, spec_suspended, source, origin,
    spec_hash, planned_until, next_slot, created_at, updated_at, pod_run
) VALUES (
    %(name)s, %(expression)s, %(cron)s, %(interval_seconds)s, %(timezone)s, %(job_class)s,
    %(data)s, %(queue)s, %(priority)s, %(timeout_seconds)s, %(max_retries)s, %(idempotent)s,
    %(catch_up)s, %(catch_up_window_seconds)s, %(catch_up_max)s, %(overlap)s, %(suspended)s,
    %(suspended_by)s, %(spec_suspended)s, %(source)s, %(origin)s, %(spec_hash)s,
    %(planned_until)s, %(next_slot)s, now(), now(), %(pod_run)s
)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: schedule_insert_many
-- schedule_insert for many new schedules at once, one row per element of the arrays
-- (the same instant %(planned_until)s for all: one transaction, one "now"). A name
-- that exists (or is inserted concurrently) is left alone and not returned.
INSERT INTO {schema}.schedules (
    name, expression, cron, interval_seconds, timezone, job_class, data, queue, priority,
    timeout_seconds, max_retries, idempotent, catch_up, catch_up_window_seconds,
    catch_up_max, overlap, suspended, suspended_by, spec_suspended, source, origin,
    spec_hash, planned_until, next_slot, created_at, updated_at, pod_run
)
SELECT r.name, r.expression, r.cron, r.interval_seconds, r.timezone, r.job_class, r.data,
       r.queue, r.priority, r.timeout_seconds, r.max_retries, r.idempotent, r.catch_up,
       r.catch_up_window_seconds, r.catch_up_max, r.overlap, r.spec_suspended,
       CASE WHEN r.spec_suspended THEN 'spec' END, r.spec_suspended, r.source, r.origin,
       r.spec_hash, %(planned_until)s, r.next_slot, now(), now(), r.pod_run
FROM unnest(%(names)s::text[], %(expressions)s::text[], %(crons)s::text[],
            %(interval_seconds)s::integer[], %(timezones)s::text[], %(job_classes)s::text[],
            %(data)s::jsonb[], %(queues)s::text[], %(priorities)s::integer[],
            %(timeout_seconds)s::double precision[], %(max_retries)s::integer[],
            %(idempotent)s::boolean[], %(catch_ups)s::text[],
            %(catch_up_window_seconds)s::integer[], %(catch_up_maxes)s::integer[],
            %(overlaps)s::text[], %(spec_suspended)s::boolean[], %(sources)s::text[],
            %(origins)s::text[], %(spec_hashes)s::text[], %(next_slots)s::timestamptz[],
            %(pod_runs)s::text[])
     AS r(name, expression, cron, interval_seconds, timezone, job_class, data, queue,
          priority, timeout_seconds, max_retries, idempotent, catch_up,
          catch_up_window_seconds, catch_up_max, overlap, spec_suspended, source, origin,
          spec_hash, next_slot, pod_run)
ORDER BY r.name
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: schedule_update
-- A changed definition (or a suspend/resume), decided by the caller on the row it
-- locked with schedule_lock. Counts only ever grow.
UPDATE {schema}.schedules
SET expression = %(expression)s, cron = %(cron)s, interval_seconds = %(interval_seconds)s,
    timezone = %(timezone)s, job_class = %(job_class)s, data = %(data)s, queue = %(queue)s,
    priority = %(priority)s, timeout_seconds = %(timeout_seconds)s,
    max_retries = %(max_retries)s, idempotent = %(idempotent)s, catch_up = %(catch_up)s,
    catch_up_window_seconds = %(catch_up_window_seconds)s, catch_up_max = %(catch_up_max)s,
    overlap = %(overlap)s, suspended = %(suspended)s, suspended_by = %(suspended_by)s,
    spec_suspended = %(spec_suspended)s, source = %(source)s, origin = %(origin)s,
    spec_hash = %(spec_hash)s, planned_until = %(planned_until)s,
    last_slot = coalesce(%(last_slot)s, last_slot), next_slot = %(next_slot)s,
    missed_count = missed_count + %(missed)s, pod_run = %(pod_run)s, updated_at = now(),
    -- `suspended` on the right is the row's old value: a resume is recorded here (and
    -- the end of a hold while the owner was absent: a writer of the definition is here).
    resumed_at = CASE WHEN (suspended OR owner_held_at IS NOT NULL) AND NOT %(suspended)s
                      THEN now() ELSE resumed_at END,
    owner_held_at = NULL
WHERE name = %(name)s;

-- name: schedule_delete
-- First of two statements in one transaction (SchedulesTable.delete): the row, after
-- any runner pass holding it has committed (the DELETE waits for its row lock).
DELETE FROM {schema}.schedules WHERE name = %(name)s RETURNING name;

-- name: schedule_slots_delete
-- Second: the schedule's slot history (migration 0016 dropped the foreign key that
-- cascaded). A later statement than the first, so its snapshot also holds the slots
-- a runner pass committed while the first waited for that pass's row lock.
DELETE FROM {schema}.schedule_slots WHERE schedule_name = %(name)s;

-- The runner's pass (jobwarden.schedules.runner) is three messages, whatever
-- the number of schedules: BEGIN and the claim; the slots' jobs (one binary
-- COPY); the write-back, the slot history and COMMIT. Every statement below
-- runs inside that one transaction, so a crash before the COMMIT rolls the
-- jobs, the advance and the history back together.

-- name: fragment_schedule_runner_due
-- The runner's claim: active schedules whose next slot has come, oldest first,
-- with the pass's clock (the caller's instant, or the transaction's now()) as the
-- last column. SKIP LOCKED splits due schedules between concurrent runners
-- (workers, the operator, other clusters) without waiting; a schedule locked by
-- another runner is that runner's for this pass. The lock is held until the
-- pass's COMMIT, so a second runner sees either the old row locked (skipped) or
-- the new one (not due any more). `next_slot <= now` is an index condition on
-- schedules_due_idx: the scan stops at the first schedule that is not due.
-- The status of the last run is read for Forbid and Replace only (Allow never
-- looks at it: one probe of the jobs' primary key less per schedule).
-- `data` comes back as its JSON text: the runner copies it onto the jobs as is
-- (parsing and re-encoding it per schedule was a tenth of the pass); `ctid` is how
-- the write-back finds the locked row again; `slot_rows` says whether its history
-- needs a prune. One job id per schedule is drawn here, for the job of its first
-- slot of the pass: the COPY writes it, and the write-back and the history name
-- the job by it instead of looking each one up by its unique key (a schedule that
-- enqueues nothing leaves a gap in the ids; more than one slot draws the rest in
-- schedule_runner_job_ids).
-- Held schedules (owner_held_at, migration 0022) are not due. The second last
-- column says whether the schedule's owner is absent: a row a cluster's operator
-- wrote, covered by that cluster's owner rows ((source, namespace) or (source, '')),
-- none of them renewed within its grace. The runner holds such a schedule instead
-- of enqueuing (schedule_runner_hold). Real
-- time (now()), not the pass's clock: the heartbeat is, whatever instant a test
-- passes. Only for kubernetes sources (one probe of a small table's primary key).
WITH clock AS (SELECT coalesce(%(now)s::timestamptz, now()) AS at)
SELECT s.name, s.expression, s.job_class, s.data::text AS data, s.queue, s.priority,
       s.timeout_seconds, s.max_retries, s.idempotent, s.catch_up,
       s.catch_up_window_seconds, s.catch_up_max, s.overlap, s.planned_until,
       s.last_job_id,
       CASE WHEN s.overlap <> 'Allow' THEN
           (SELECT j.status::text FROM {schema}.jobs AS j WHERE j.id = s.last_job_id) END
           AS last_job_status,
       s.next_slot, s.pod_run, s.ctid::text AS ctid, s.slot_rows,
       nextval('{schema}.jobs_id_seq'::regclass) AS job_id,
       CASE WHEN starts_with(s.source, 'kubernetes:') THEN coalesce(
           (SELECT bool_and(o.renewed_at + o.grace_seconds * interval '1 second' < now())
            FROM {schema}.schedule_owners AS o
            WHERE o.source = s.source AND o.namespace IN ('', split_part(s.name, '/', 1))),
           false) ELSE false END AS owner_absent,
       clock.at
FROM {schema}.schedules AS s, clock
WHERE NOT s.suspended AND s.owner_held_at IS NULL AND s.next_slot <= clock.at

-- name: schedule_runner_claim
{fragment_schedule_runner_due}
ORDER BY s.next_slot, s.name
LIMIT %(limit)s
FOR UPDATE OF s SKIP LOCKED;

-- name: schedule_runner_claim_after
-- The next page of one pass: keyset after the last (next_slot, name) of the previous
-- page, so entries the previous pages already advanced (dead until vacuumed) are not
-- walked again.
{fragment_schedule_runner_due}
  AND (s.next_slot, s.name) > (%(after_slot)s::timestamptz, %(after_name)s::text)
ORDER BY s.next_slot, s.name
LIMIT %(limit)s
FOR UPDATE OF s SKIP LOCKED;

-- name: schedule_runner_job_ids
-- More job ids, for the schedules of a pass with more than one slot to enqueue
-- (catch-up after an outage): one more round trip, only then.
SELECT nextval('{schema}.jobs_id_seq'::regclass) FROM generate_series(1, %(count)s);

-- name: schedule_runner_copy_jobs
-- The slots' jobs in binary COPY format: the cheapest insert the server has
-- (multi-row heap inserts, nothing to parse per row; 2.3x less server time than
-- INSERT ... SELECT ... ON CONFLICT for 1,000 rows). id is drawn by the claim;
-- run_at takes its default (now(), the pass's transaction clock). COPY has no
-- ON CONFLICT: a slot whose job exists (a backfill, a runner working from a stale
-- view) fails it with a unique violation, and the runner redoes the pass with
-- schedule_runner_insert_jobs.
COPY {schema}.jobs (queue, job_class, data, priority, max_retries, timeout_seconds,
                    idempotent, unique_key, lease_name, schedule_name, on_busy, pod_run, id)
FROM STDIN (FORMAT BINARY);

-- name: schedule_runner_insert_jobs
-- The redo after a conflicting COPY: the same rows, a slot whose job exists inserts
-- nothing (the unique key decides), and the keys inserted come back (the others
-- are duplicates: counted, and their fate names the existing job).
INSERT INTO {schema}.jobs (queue, job_class, data, priority, max_retries, timeout_seconds,
                           idempotent, unique_key, lease_name, schedule_name, on_busy,
                           pod_run, id)
SELECT i.queue, i.job_class, i.data::jsonb, i.priority, i.max_retries, i.timeout_seconds,
       i.idempotent, i.unique_key, i.lease_name, i.schedule_name, i.on_busy, i.pod_run, i.id
FROM unnest(%(queues)s::text[], %(classes)s::text[], %(datas)s::text[],
            %(priorities)s::integer[], %(max_retries)s::integer[],
            %(timeouts)s::double precision[], %(idempotents)s::boolean[],
            %(unique_keys)s::text[], %(lease_names)s::text[], %(schedule_names)s::text[],
            %(on_busys)s::text[], %(pod_runs)s::text[], %(ids)s::bigint[])
     WITH ORDINALITY AS i(queue, job_class, data, priority, max_retries, timeout_seconds,
                          idempotent, unique_key, lease_name, schedule_name, on_busy, pod_run,
                          id, ord)
ORDER BY i.ord
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
RETURNING unique_key;

-- name: schedule_runner_notify
-- The queues that got jobs, once each: delivered at COMMIT, dropped with a rollback.
SELECT count(pg_notify(%(channel)s, q)) FROM unnest(%(queues)s::text[]) AS q;

-- name: schedule_runner_advance
-- Write back one pass for many schedules in one statement: the new planning point,
-- the slots' fates added to the counts, the job of the newest enqueued slot (its id
-- as the claim drew it; only for a slot whose job existed before the pass -- the
-- redo's duplicates -- is there a unique key to look it up by, a later statement of
-- the pass's transaction, and COALESCE evaluates that lookup only then), the
-- newest success seen (kept so a purge of old jobs does not lose it) and the
-- history's row count. The rows travel as typed arrays: the
-- instants as ISO 8601 text (the runner formats each distinct instant once, and a
-- pass's schedules share most of them).
--
-- The rows are found by the tuple ids the claim returned, one TID fetch each: safe
-- because the claim's row locks are held (no other transaction can have moved these
-- rows since, and this one does not update them before this statement), and the
-- name must still match. Hash and merge joins are off for the rest of the pass's
-- transaction (SET LOCAL): with the arrays' length known, the planner's cost model
-- (a random page at 4x a sequential one) chose a hash join over a sequential scan of
-- the whole table for 1,000 rows -- every schedule read on every pass.
SET LOCAL enable_hashjoin = off;
SET LOCAL enable_mergejoin = off;
WITH advanced AS (
    UPDATE {schema}.schedules AS s
    SET planned_until = a.planned_until,
        last_slot = coalesce(a.last_slot, s.last_slot),
        last_enqueued_slot = coalesce(a.last_enqueued_slot, s.last_enqueued_slot),
        next_slot = a.next_slot,
        enqueued_count = s.enqueued_count + a.enqueued,
        skipped_count = s.skipped_count + a.skipped,
        missed_count = s.missed_count + a.missed,
        replaced_count = s.replaced_count + a.replaced,
        last_job_id = coalesce(a.last_job_id,
                               (SELECT j.id FROM {schema}.jobs AS j
                                WHERE j.unique_key = a.last_key), s.last_job_id),
        last_error = a.error,
        last_success_at = greatest(s.last_success_at, (
            SELECT c.finished_at FROM {schema}.jobs AS c
            WHERE c.schedule_name = s.name AND c.status = 'completed'
            ORDER BY c.id DESC LIMIT 1)),
        slot_rows = a.slot_rows,
        updated_at = now()
    FROM unnest(%(names)s::text[], %(ctids)s::tid[], %(planned_until)s::timestamptz[],
                %(last_slot)s::timestamptz[], %(last_enqueued_slot)s::timestamptz[],
                %(next_slot)s::timestamptz[], %(enqueued)s::bigint[], %(skipped)s::bigint[],
                %(missed)s::bigint[], %(replaced)s::bigint[], %(last_job_id)s::bigint[],
                %(last_key)s::text[], %(error)s::text[], %(slot_rows)s::integer[])
         AS a(name, ctid, planned_until, last_slot, last_enqueued_slot, next_slot, enqueued,
              skipped, missed, replaced, last_job_id, last_key, error, slot_rows)
    WHERE s.ctid = a.ctid AND s.name = a.name
    RETURNING 1
)
-- Every schedule of the pass advanced, or the pass fails here, before its COMMIT
-- (the cast of the message to integer is the error; it cannot happen while the
-- claim's locks hold, and a pass that left a schedule behind must not commit).
SELECT CASE WHEN count(*) = %(count)s THEN count(*)
            ELSE ('schedule runner: advanced ' || count(*) || ' of ' || %(count)s
                  || ' schedules')::bigint END
FROM advanced;

-- name: schedule_runner_hold
-- The schedules of the pass whose owner is absent (the claim's owner_absent column):
-- held in the pass's transaction, found by the claim's tuple ids as the write-back
-- finds its rows. The planning point stays where it was: when the owner returns and
-- lifts the hold (schedule_owner_resume), the catch-up rule decides the slots that
-- passed, as after any runner outage.
UPDATE {schema}.schedules AS s
SET owner_held_at = now(),
    last_error = 'the operator of ' || s.source || ' has not confirmed this schedule '
                 || 'within its grace (its resource may be gone)',
    updated_at = now()
FROM unnest(%(names)s::text[], %(ctids)s::tid[]) AS a(name, ctid)
WHERE s.ctid = a.ctid AND s.name = a.name;

-- name: schedule_owner_renew
-- An operator confirms its rows: one owner row per watched namespace ('' = all),
-- renewed on the database clock with the grace the runners are to give it.
INSERT INTO {schema}.schedule_owners (source, namespace, holder, renewed_at, grace_seconds)
SELECT %(source)s, n, %(holder)s, now(), %(grace)s
FROM unnest(%(namespaces)s::text[]) AS n
ON CONFLICT (source, namespace) DO UPDATE
SET holder = excluded.holder, renewed_at = excluded.renewed_at,
    grace_seconds = excluded.grace_seconds;

-- name: schedule_owner_list
-- Every owner row, and whether it is within its grace now (the database clock).
SELECT source, namespace, holder, renewed_at, grace_seconds,
       renewed_at + grace_seconds * interval '1 second' >= now()
FROM {schema}.schedule_owners
ORDER BY source, namespace;

-- name: schedule_owner_resume
-- An operator whose resource exists lifts the hold, keeping the planning point (the
-- catch-up rule decides the slots that passed meanwhile): the owner that returned, or
-- another cluster whose resource has the same spec, which then becomes the row's
-- source (its operator confirms it from now on).
-- resumed_at: the time held does not count as "active without a success".
UPDATE {schema}.schedules
SET owner_held_at = NULL, last_error = NULL, source = %(source)s, resumed_at = now(),
    updated_at = now()
WHERE name = %(name)s AND owner_held_at IS NOT NULL
RETURNING name;

-- name: schedule_add_backfill
-- Slots enqueued by hand (backfill) count as enqueued; the planning point is not moved.
UPDATE {schema}.schedules
SET enqueued_count = enqueued_count + %(enqueued)s,
    last_job_id = coalesce(%(last_job_id)s, last_job_id), updated_at = now()
WHERE name = %(name)s;

-- name: schedule_job_cancel
-- Overlap policy Replace, inside the runner's transaction: a pending run is cancelled
-- at once; a running one is asked to stop (its next heartbeat() raises JobCancelled).
UPDATE {schema}.jobs
SET status = (CASE WHEN status = 'pending' THEN 'cancelled' ELSE status END)::{schema}.job_status,
    cancel_requested = (status = 'processing'),
    finished_at = CASE WHEN status = 'pending' THEN now() ELSE finished_at END,
    last_error = CASE WHEN status = 'pending' THEN %(reason)s ELSE last_error END,
    updated_at = now()
WHERE id = %(id)s AND status IN ('pending', 'processing')
RETURNING status::text;

-- name: schedule_code_rows
-- Code-defined schedules that are active, for the start-up sync to suspend the ones
-- the code no longer defines.
SELECT name, origin FROM {schema}.schedules WHERE source = 'code' AND NOT suspended;

-- name: schedule_worker_check
-- A worker's schedule task asks this first (schedules/service.py): whether any
-- schedule is due (the runner's claim condition, fragment_schedule_runner_due, on
-- schedules_due_idx) and, until its start-up sync is done (%(sync)s), whether any
-- active code-defined schedule exists (schedule_code_rows: one the sync may have
-- to suspend). False: the worker skips that part without loading the runner or
-- the sync (docs/benchmarks.md, "Idle worker RSS").
SELECT EXISTS (SELECT 1 FROM {schema}.schedules
               WHERE NOT suspended AND owner_held_at IS NULL AND next_slot <= now()),
       %(sync)s::boolean AND EXISTS (SELECT 1 FROM {schema}.schedules
                                     WHERE source = 'code' AND NOT suspended);

-- name: schedule_mark_removed
UPDATE {schema}.schedules
SET suspended = true, suspended_by = 'removed', updated_at = now()
WHERE name = ANY(%(names)s::text[]) AND source = 'code' AND NOT suspended
RETURNING name;

-- name: schedule_health
-- Freshness per schedule on the database clock: seconds since the newest success
-- (or, when none ever succeeded, since creation) and how far the next slot is
-- behind now; the expression (its period, computed by the caller); and the seconds
-- the schedule has been active without a success: since the latest of its last
-- success, its creation and its last resume, 0 while suspended (what
-- JobwardenScheduleNoSuccess compares with its period). A schedule held while its
-- owner is absent (owner_held_at) counts as suspended.
SELECT s.name,
       extract(epoch FROM now() - coalesce(greatest(s.last_success_at, ok.finished_at),
                                           s.created_at))::double precision,
       CASE WHEN s.suspended OR s.owner_held_at IS NOT NULL THEN 0
            ELSE greatest(extract(epoch FROM now() - s.next_slot), 0) END::double precision,
       greatest(s.last_success_at, ok.finished_at) IS NOT NULL,
       s.suspended OR s.owner_held_at IS NOT NULL,
       s.expression,
       CASE WHEN s.suspended OR s.owner_held_at IS NOT NULL THEN 0
            ELSE extract(epoch FROM now() - greatest(s.last_success_at, ok.finished_at,
                                                     s.created_at, s.resumed_at))
       END::double precision
FROM {schema}.schedules AS s
LEFT JOIN LATERAL (
    SELECT c.finished_at FROM {schema}.jobs AS c
    WHERE c.schedule_name = s.name AND c.status = 'completed'
    ORDER BY c.id DESC LIMIT 1
) AS ok ON true
ORDER BY s.name;

-- name: schedule_active_jobs
-- The schedule's pending and processing jobs, newest first (status.active of a
-- JobSchedule; jobs_schedule_idx walks the schedule's jobs newest first).
SELECT id, status::text FROM {schema}.jobs
WHERE schedule_name = %(name)s AND status IN ('pending', 'processing')
ORDER BY id DESC
LIMIT %(limit)s;

-- name: schedule_active_jobs_many
-- schedule_active_jobs for every schedule of %(names)s: (name, id, status), each
-- schedule's newest %(limit)s at most.
SELECT n.name, a.id, a.status::text
FROM unnest(%(names)s::text[]) AS n(name)
CROSS JOIN LATERAL (
    SELECT id, status FROM {schema}.jobs
    WHERE schedule_name = n.name AND status IN ('pending', 'processing')
    ORDER BY id DESC
    LIMIT %(limit)s
) AS a
ORDER BY n.name, a.id DESC;

-- name: schedule_job_outcomes
-- The schedule's jobs from %(floor)s on, newest %(limit)s at most (the operator's
-- per-run Events, controller/runevents.py: the floor is the oldest job still active
-- at its previous pass), and the end of each one's error (the exception line).
-- jobs_schedule_idx walks the schedule's jobs newest first.
SELECT id, status::text, unique_key, right(last_error, 500) FROM {schema}.jobs
WHERE schedule_name = %(name)s AND id >= %(floor)s
ORDER BY id DESC
LIMIT %(limit)s;

-- name: schedule_job_outcomes_many
-- schedule_job_outcomes for every schedule of %(names)s from its own floor
-- (%(floors)s, element by element): (name, id, status, unique_key, error).
SELECT n.name, o.id, o.status::text, o.unique_key, right(o.last_error, 500)
FROM unnest(%(names)s::text[], %(floors)s::bigint[]) AS n(name, floor)
CROSS JOIN LATERAL (
    SELECT id, status, unique_key, last_error FROM {schema}.jobs
    WHERE schedule_name = n.name AND id >= n.floor
    ORDER BY id DESC
    LIMIT %(limit)s
) AS o
ORDER BY n.name, o.id DESC;

-- name: schedule_trim_history
-- Per-schedule retention (successfulJobsHistoryLimit / failedJobsHistoryLimit):
-- delete this schedule's finished jobs of the given statuses beyond the newest
-- `keep`, at most `batch` per call so one pass never holds a long transaction.
DELETE FROM {schema}.jobs
WHERE id IN (
    SELECT id FROM {schema}.jobs
    WHERE schedule_name = %(name)s AND status::text = ANY(%(statuses)s::text[])
    ORDER BY id DESC
    OFFSET %(keep)s
    LIMIT %(batch)s
);

-- name: schedule_set_history_limits
-- Record the schedule's history limits (0012_retention.sql): the database-wide
-- retention leaves the finished jobs of a limited status group to the limit.
-- Written only when they changed, so a reconcile that changes nothing writes nothing.
UPDATE {schema}.schedules
SET successful_history_limit = %(successful)s, failed_history_limit = %(failed)s
WHERE name = %(name)s
  AND (successful_history_limit IS DISTINCT FROM %(successful)s::integer
       OR failed_history_limit IS DISTINCT FROM %(failed)s::integer);

-- name: schedule_trim_history_many
-- schedule_trim_history for many schedules at once, each with its own `keep`
-- (%(names)s and %(keeps)s, element by element), at most `batch` per schedule;
-- the schedule of each job deleted.
DELETE FROM {schema}.jobs
WHERE id IN (
    SELECT t.id
    FROM unnest(%(names)s::text[], %(keeps)s::integer[]) AS n(name, keep)
    CROSS JOIN LATERAL (
        SELECT id FROM {schema}.jobs
        WHERE schedule_name = n.name AND status::text = ANY(%(statuses)s::text[])
        ORDER BY id DESC
        OFFSET n.keep
        LIMIT %(batch)s
    ) AS t
)
RETURNING schedule_name;

-- name: schedule_set_history_limits_many
-- schedule_set_history_limits for many schedules at once (%(names)s, %(successful)s
-- and %(failed)s, element by element); again only where they changed.
UPDATE {schema}.schedules AS s
SET successful_history_limit = l.successful, failed_history_limit = l.failed
FROM unnest(%(names)s::text[], %(successful)s::integer[], %(failed)s::integer[])
     AS l(name, successful, failed)
WHERE s.name = l.name
  AND (s.successful_history_limit IS DISTINCT FROM l.successful
       OR s.failed_history_limit IS DISTINCT FROM l.failed);

-- name: schedule_runner_record_slots
-- The runner's pass, in its transaction: the fate of each slot it decided (enqueued
-- with its job: the id the claim drew, or for a job that existed before the pass
-- the one its unique key finds; skipped; missed). A plain insert: a slot decided
-- now is after the schedule's planning point, so it has no row yet unless the
-- point moved back; then the unique violation rolls the pass back and the runner
-- redoes it with schedule_runner_merge_slots (the same as a COPY conflict). Half
-- the server time of INSERT ... ON CONFLICT, whose every row is a speculative
-- insertion (an index probe first, a confirmation record in the WAL after).
INSERT INTO {schema}.schedule_slots (schedule_name, slot, fate, job_id)
{fragment_schedule_runner_slots};

-- name: schedule_runner_merge_slots
-- The redo's history: a slot that already has a row takes the newer decision.
INSERT INTO {schema}.schedule_slots AS h (schedule_name, slot, fate, job_id)
{fragment_schedule_runner_slots}
ON CONFLICT (schedule_name, slot) DO UPDATE
SET fate = excluded.fate, job_id = coalesce(excluded.job_id, h.job_id), recorded_at = now();

-- name: fragment_schedule_runner_slots
SELECT r.name, r.slot, r.fate,
       coalesce(r.job_id,
                (SELECT j.id FROM {schema}.jobs AS j WHERE j.unique_key = r.unique_key))
FROM unnest(%(names)s::text[], %(slots)s::timestamptz[], %(fates)s::text[],
            %(job_ids)s::bigint[], %(unique_keys)s::text[])
     AS r(name, slot, fate, job_id, unique_key)

-- name: schedule_runner_prune_slots
-- Keep each named schedule's newest %(keep)s slots (same transaction as the record
-- above, a later statement, so it sees the rows just written). Only the schedules
-- whose slot_rows passed the bound plus a margin are named (the runner decides from
-- the count the claim read), so a schedule's history holds at most bound + margin +
-- one pass's slots, and readers show the newest bound of them. Driven by the names: one
-- walk down each schedule's primary-key entries to its keep-th newest slot (none
-- for a schedule with fewer rows: nothing to join), then its older entries, so the
-- cost follows the schedules of the pass, not the table (OFFSET 0 keeps that
-- subquery whole; pulled up, its walk ran once per history row of every name).
DELETE FROM {schema}.schedule_slots AS h
USING (SELECT n.name, b.oldest_kept
       FROM unnest(%(names)s::text[]) AS n(name)
       CROSS JOIN LATERAL (
           SELECT x.slot AS oldest_kept FROM {schema}.schedule_slots AS x
           WHERE x.schedule_name = n.name
           ORDER BY x.slot DESC OFFSET %(keep)s - 1 LIMIT 1) AS b
       OFFSET 0) AS b
WHERE h.schedule_name = b.name AND h.slot < b.oldest_kept;

-- name: schedule_slot_replaced
-- Overlap policy Replace, in the runner's transaction: the previous run's slot is
-- now "replaced" (its job was cancelled or asked to stop).
UPDATE {schema}.schedule_slots SET fate = 'replaced', recorded_at = now()
WHERE schedule_name = %(name)s AND job_id = %(job_id)s;

-- name: schedule_slot_list
-- A schedule's last slots with their fate, newest first, and the run's status now:
-- at most the history's bound (%(keep)s), whatever the rows kept until the next prune.
SELECT h.slot, h.fate, h.job_id, j.status::text, h.recorded_at
FROM {schema}.schedule_slots AS h
LEFT JOIN {schema}.jobs AS j ON j.id = h.job_id
WHERE h.schedule_name = %(name)s
ORDER BY h.slot DESC
LIMIT least(%(limit)s, %(keep)s);

-- name: schedule_fate_counts
-- Every schedule's slot fates, counted (jobwarden_schedule_slots_total, exported
-- once per database by the gauge-lease holder).
SELECT name, enqueued_count, skipped_count, missed_count, replaced_count, dropped_count,
       deferred_count
FROM {schema}.schedules
ORDER BY name;

-- name: schedule_status_fingerprints
-- One digest per schedule of %(names)s: what a JobSchedule's status pass reads of the
-- row, its last job and its class's newest import failure. The operator's resync loop
-- passes a JobSchedule only when its digest changed (controller/kube/kinds.py), so the
-- columns a runner pass writes without changing the status (planned_until,
-- updated_at) are left out.
SELECT s.name, md5(row(s.suspended, s.suspended_by, s.spec_suspended, s.owner_held_at,
       s.source, s.spec_hash,
       s.last_slot, s.next_slot, s.enqueued_count, s.skipped_count, s.missed_count,
       s.replaced_count, s.dropped_count, s.deferred_count, s.last_job_id, s.last_success_at,
       s.last_error, s.pod_run, j.status, j.finished_at, f.error, f.host, f.failed_at)::text)
FROM {schema}.schedules AS s
LEFT JOIN {schema}.jobs AS j ON j.id = s.last_job_id
LEFT JOIN {schema}.job_class_failures AS f ON f.job_class = s.job_class
WHERE s.name = ANY(%(names)s::text[]);

-- name: schedule_names_of_source
-- The names of the schedules one source (cluster) wrote: what the operator's sweep
-- compares with the JobSchedules it sees, every minute (names only, not records).
SELECT name FROM {schema}.schedules WHERE source = %(source)s ORDER BY name;

-- name: schedule_next_slot_in
-- Seconds until the earliest slot of any schedule a runner would plan (NULL: none), not
-- counting slots due more than %(recent)s seconds ago: the operator's schedule loop wakes
-- then, not a check interval later. A slot that came due while the loop's last pass ran
-- (after that pass's snapshot) gives a negative figure: pass again now. One that was due
-- before the pass began is one the pass could not enqueue (an error, counted there): it
-- waits for the check interval, or the loop would spin on it. The first row of
-- schedules_due_owned_idx past the cut.
SELECT extract(epoch FROM min(next_slot) - clock_timestamp())::float8
FROM {schema}.schedules
WHERE NOT suspended AND owner_held_at IS NULL
  AND next_slot > clock_timestamp() - make_interval(secs => %(recent)s::float8);
