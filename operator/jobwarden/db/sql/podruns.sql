-- Named queries for pod runs (docs/podruns.md): jobs whose pod_run is set run in a
-- pod of their own. The operator claims them (pod_run_claim), hands the claim to a
-- pod, and reports a pod that ended without an outcome (pod_run_fail); the pod's
-- `jobwarden run-job` starts under the claim (pod_run_start) and then heartbeats and
-- records its outcome with the ordinary fenced statements of jobs.sql.
-- `{schema}` is the configured schema; literal braces are doubled.

-- name: fragment_pod_run_columns
-- What a pod-run claim returns: fragment_claim_rows' columns in its order (so one
-- row reader serves both), then the pod run's own.
j.id, j.queue, j.job_class, j.data, j.priority, j.attempts, j.max_retries,
j.timeout_seconds, j.idempotent, j.claim_token, j.lease_name, j.schedule_name,
greatest(extract(epoch FROM now() - j.run_at), 0)::double precision AS queue_wait,
j.on_busy, j.lease_ttl_seconds, j.trace_context, j.pod_run, j.unique_key, j.lease_token,
j.cancel_requested

-- name: pod_run_claim
-- The operator's claim: due pending rows of the given resources in priority order,
-- skipping rows another claimant (operator, cluster) locked, turned into processing
-- rows with a fresh token each, in one statement (jobs_pod_run_claim_idx). The
-- attempt is counted here, as a worker's claim counts it.
-- claim_expires_at = now + the start deadline: if no pod ever starts the job, the
-- reaper applies the dead-worker rules then. heartbeat_at stays NULL until
-- `jobwarden run-job` starts in the pod (pod_run_start): a NULL heartbeat means the
-- job's code never ran under this claim.
-- The token derives from a batch id the claimant chose, so a claim whose reply was
-- lost is found again (pod_run_claims_of_batch) instead of guessed. The claim
-- commits durably (unlike a pool claim of idempotent jobs): a pod is created for it.
WITH picked AS (
    SELECT id FROM {schema}.jobs
    WHERE status = 'pending' AND pod_run = ANY(%(pod_runs)s::text[]) AND run_at <= now()
      AND {fragment_queue_not_paused}
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs AS j
SET status = 'processing', attempts = j.attempts + 1,
    claim_token = md5(%(batch)s::text || ':' || j.id::text)::uuid,
    claimed_by = %(claimant)s, claimed_at = now(), heartbeat_at = NULL,
    claim_expires_at = now() + make_interval(secs => %(start_deadline)s), lease_token = NULL,
    lease_lost = false, updated_at = now()
FROM picked WHERE j.id = picked.id
RETURNING {fragment_pod_run_columns};

-- name: pod_run_claims_of_batch
-- After a claim whose reply was lost: the rows that claim did take (still
-- processing under its tokens and not started), unchanged.
SELECT {fragment_pod_run_columns}
FROM {schema}.jobs AS j
WHERE j.status = 'processing' AND j.claimed_by = %(claimant)s AND j.pod_run IS NOT NULL
  AND j.heartbeat_at IS NULL
  AND j.claim_token = md5(%(batch)s::text || ':' || j.id::text)::uuid;

-- name: pod_run_start
-- `jobwarden run-job` starting in its pod: fenced on the claim it was handed (a
-- claim that was reaped, re-claimed or cancelled matches nothing: the pod exits
-- without running). Records that the run started (heartbeat_at, which stays NULL
-- until now) and where (claimed_by = the pod, for the attempt history and the
-- reaper's message), and moves the reap deadline from the start deadline to the
-- heartbeat grace. Retried after a lost reply it matches again (same token, still
-- processing), so the start is never ambiguous. A lease token handed in must be the
-- one the claim recorded (a pod handed another claim's token never starts).
UPDATE {schema}.jobs AS j
SET claimed_by = %(host)s, heartbeat_at = now(),
    claim_expires_at = now() + make_interval(secs => %(grace)s), updated_at = now()
WHERE j.id = %(id)s AND j.claim_token = %(token)s AND j.status = 'processing'
  AND j.pod_run IS NOT NULL
  AND (%(lease_token)s::bigint IS NULL OR j.lease_token = %(lease_token)s::bigint)
RETURNING {fragment_pod_run_columns};

-- name: pod_run_fail
-- A pod run whose pod ended (or never started) without the job recording its
-- outcome, fenced on the claim. The dead-worker rules, as job_reap decides them:
-- a cancel request ends in cancelled; a run that never started (heartbeat_at NULL:
-- run-job never began, so the job's code never ran) goes back to pending whatever
-- its idempotency, or failed when its attempts are used up; a started idempotent
-- run likewise; a started non-idempotent run becomes interrupted (never run
-- twice). A retry waits %(retry_in)s seconds (the backoff). The cause is in
-- last_error and the attempt history; the lease the claim held is released in the
-- same statement, fenced on owner = claim token and the token it was handed.
WITH ended AS (
    UPDATE {schema}.jobs AS j
    SET status = (CASE
            WHEN j.cancel_requested THEN 'cancelled'
            WHEN NOT j.idempotent AND j.heartbeat_at IS NOT NULL THEN 'interrupted'
            WHEN j.attempts > j.max_retries THEN 'failed'
            ELSE 'pending' END)::{schema}.job_status,
        finished_at = CASE
            WHEN j.cancel_requested OR (NOT j.idempotent AND j.heartbeat_at IS NOT NULL)
                 OR j.attempts > j.max_retries THEN now()
            ELSE NULL END,
        run_at = CASE
            WHEN j.cancel_requested OR (NOT j.idempotent AND j.heartbeat_at IS NOT NULL)
                 OR j.attempts > j.max_retries THEN j.run_at
            ELSE now() + make_interval(secs => %(retry_in)s) END,
        last_error = %(error)s, claim_expires_at = NULL, updated_at = now()
    WHERE j.id = %(id)s AND j.claim_token = %(token)s AND j.status = 'processing'
      AND j.pod_run IS NOT NULL
    RETURNING j.id, j.queue, j.job_class, j.attempts, j.claimed_at, j.claimed_by,
              (CASE WHEN j.status = 'cancelled' THEN 'cancelled' ELSE 'failed' END) AS outcome,
              j.status::text AS status_after, j.last_error AS error,
              j.lease_name, j.lease_token, j.claim_token
),
recorded AS ({fragment_attempt_record}),
freed AS ({fragment_free_ended_claims_lease}),
{fragment_wake_deferred_on_freed},
done AS (SELECT id FROM ended WHERE status_after <> 'pending'),
{fragment_notify_done}
SELECT ended.status_after, ended.queue, ended.job_class, (SELECT count(*) FROM freed),
       (SELECT count(*) FROM (SELECT pg_notify(%(lease_channel)s, name) FROM freed
                              WHERE waiting_until > now()) AS n)
FROM ended, notified, woken_notified;

-- name: pod_run_attempt
-- The attempt a claim counted (for the backoff of pod_run_fail); fenced like it.
SELECT attempts FROM {schema}.jobs
WHERE id = %(id)s AND claim_token = %(token)s AND status = 'processing'
  AND pod_run IS NOT NULL;

-- name: pod_run_running
-- The processing pod runs of the given resources, oldest first
-- (jobs_pod_run_running_idx): for Replace (cancel_requested), status, pod GC, and
-- the re-creation of a pod its operator died before creating (claimed_by, lease_token).
SELECT j.id, j.pod_run, j.claim_token::text AS claim_token, j.attempts, j.schedule_name, j.unique_key,
       j.cancel_requested, j.claimed_at, j.heartbeat_at, j.claim_expires_at, j.claimed_by,
       j.lease_token
FROM {schema}.jobs AS j
WHERE j.status = 'processing' AND j.pod_run = ANY(%(pod_runs)s::text[])
ORDER BY j.id;
