-- Named queries on the leases table (docs/leases.md). Every time is the database
-- clock. Every change after the insert is fenced on the owner (and on the token
-- the holder was handed), so a holder whose lease lapsed and was taken over can
-- neither renew nor release its successor's lease.

-- name: lease_acquire
-- Take a plain lease (slot 0, or any one slot by number) in ONE statement:
-- insert the row, or take over a row that is free or whose holder's time ran out.
-- ON CONFLICT DO UPDATE locks the existing row and re-checks the WHERE against
-- its latest committed version, so of any number of concurrent callers exactly
-- one gets it. The token is drawn with nextval() inside that row lock, after the
-- previous holder's statement committed, so it is larger than every token this
-- (name, slot) handed out before. (The VALUES nextval is only kept when the row
-- is new; a busy or taken-over row burns it, which is harmless.)
-- When job_id/claim_token are given the lease is also recorded on the job row
-- fenced like every write after a claim (a data-modifying CTE always runs to
-- completion, referenced or not). When busy, the second branch reports
-- the holder; it reads the statement's snapshot, so a row inserted concurrently
-- may be missing from it (the caller then reads it afresh).
WITH acquired AS (
    INSERT INTO {schema}.leases AS l (name, slot, owner, holder_host, token, acquired_at,
                                      expires_at, released_at)
    VALUES (%(name)s, %(slot)s, %(owner)s, %(host)s, nextval('{schema}.lease_tokens'), now(),
            now() + make_interval(secs => %(ttl)s), NULL)
    ON CONFLICT (name, slot) DO UPDATE
    SET owner = EXCLUDED.owner, holder_host = EXCLUDED.holder_host,
        token = nextval('{schema}.lease_tokens'), acquired_at = now(),
        expires_at = EXCLUDED.expires_at, released_at = NULL
    WHERE l.owner IS NULL OR l.expires_at <= now()
    RETURNING l.slot, l.token, l.expires_at
),
attached AS (
    -- Busy or not: a deferred job keeps the name of the lease it waits for, so the
    -- release of that lease can hand it over (lease_release, wake_jobs).
    UPDATE {schema}.jobs AS j
    SET lease_name = %(name)s, lease_token = (SELECT token FROM acquired), updated_at = now()
    WHERE j.id = %(job_id)s::bigint AND j.claim_token = %(claim_token)s::uuid
      AND j.status = 'processing'
    RETURNING j.id
)
SELECT true, a.slot, a.token, a.expires_at, NULL::text, NULL::text,
       extract(epoch FROM a.expires_at - now())::float8
FROM acquired AS a
UNION ALL
SELECT false, l.slot, l.token, l.expires_at, l.owner, l.holder_host,
       greatest(extract(epoch FROM l.expires_at - now()), 0)::float8
FROM {schema}.leases AS l
WHERE l.name = %(name)s AND l.slot = %(slot)s AND NOT EXISTS (SELECT 1 FROM acquired);

-- name: lease_seed_slots
-- A semaphore's free rows, created on first use so lease_acquire_slot can pick
-- among existing rows. Returns one row per slot it created.
INSERT INTO {schema}.leases (name, slot)
SELECT %(name)s, s FROM generate_series(0, %(slots)s - 1) AS s
ON CONFLICT (name, slot) DO NOTHING
RETURNING slot;

-- name: lease_acquire_slot
-- Take any one free (or lapsed) slot of a semaphore in ONE statement. SKIP LOCKED
-- in the CTE: concurrent acquirers each lock a different candidate instead of
-- queueing on the same one, and FOR UPDATE re-checks "free or lapsed" against the
-- row's latest version once locked, so a slot is never handed to two holders.
-- When busy, the second branch reports the holder that expires first.
WITH picked AS (
    SELECT name, slot FROM {schema}.leases
    WHERE name = %(name)s AND slot < %(slots)s AND (owner IS NULL OR expires_at <= now())
    ORDER BY slot
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
acquired AS (
    UPDATE {schema}.leases AS l
    SET owner = %(owner)s, holder_host = %(host)s, token = nextval('{schema}.lease_tokens'),
        acquired_at = now(), expires_at = now() + make_interval(secs => %(ttl)s),
        released_at = NULL
    FROM picked
    WHERE l.name = picked.name AND l.slot = picked.slot
    RETURNING l.slot, l.token, l.expires_at
)
SELECT true, a.slot, a.token, a.expires_at, NULL::text, NULL::text,
       extract(epoch FROM a.expires_at - now())::float8
FROM acquired AS a
UNION ALL
SELECT false, h.slot, h.token, h.expires_at, h.owner, h.holder_host,
       greatest(extract(epoch FROM h.expires_at - now()), 0)::float8
FROM (
    SELECT slot, token, expires_at, owner, holder_host FROM {schema}.leases
    WHERE name = %(name)s AND slot < %(slots)s AND owner IS NOT NULL
    ORDER BY expires_at
    LIMIT 1
) AS h
WHERE NOT EXISTS (SELECT 1 FROM acquired);

-- name: lease_renew
-- Extend a held lease from now, owner- and token-fenced. A lease that lapsed but
-- was not taken over still carries this holder's token, so renewing it is safe.
UPDATE {schema}.leases
SET expires_at = now() + make_interval(secs => %(ttl)s)
WHERE name = %(name)s AND slot = %(slot)s AND owner = %(owner)s
  AND (%(token)s::bigint IS NULL OR token = %(token)s::bigint)
RETURNING expires_at, extract(epoch FROM expires_at - now())::float8;

-- name: lease_renew_many
-- The worker's batch renewal of every lease its live attempts hold, after each
-- batch heartbeat: one statement for any number of leases. Missing rows were lost.
UPDATE {schema}.leases AS l
SET expires_at = now() + make_interval(secs => r.ttl)
FROM unnest(%(names)s::text[], %(slots)s::integer[], %(owners)s::text[], %(tokens)s::bigint[],
            %(ttls)s::float8[]) AS r(name, slot, owner, token, ttl)
WHERE l.name = r.name AND l.slot = r.slot AND l.owner = r.owner AND l.token = r.token
RETURNING l.name, l.slot, l.token;

-- name: lease_release
-- Free a lease, owner- and token-fenced, and wake waiters (NOTIFY is delivered at
-- commit, i.e. when this statement ends). The row stays, keeping its token.
-- Only when a waiter announced itself (lease_mark_waiting): NOTIFY makes every
-- notifying commit in the cluster queue behind one lock, which would cap
-- uncontended releases near the rate of one fsync at a time. A waiter's mark and
-- this UPDATE lock the same row, so either the release sees the mark (and
-- notifies) or the waiter's next try, made after its mark, sees the release.
-- With wake_jobs, the next job deferred on this lease (highest priority, oldest)
-- is made due now and the workers of its queue are woken: a hand-over instead of
-- waiting out the defer delay, one job at a time so a crowd of deferred jobs on
-- one key does not stampede. The others still come back at their own run_at.
-- The commit does not wait for its WAL flush (synchronous_commit off for this
-- transaction only): a release a crash forgets leaves the lease to expire at
-- its ttl, which every holder's crash already does, and the token stays.
-- Acquisitions stay durable: the token they hand out must never be handed
-- out again after a crash.
WITH released AS (
    UPDATE {schema}.leases
    SET owner = NULL, holder_host = NULL, expires_at = NULL, released_at = now()
    WHERE name = %(name)s AND slot = %(slot)s AND owner = %(owner)s
      AND (%(token)s::bigint IS NULL OR token = %(token)s::bigint)
    RETURNING name, waiting_until
),
next_job AS (
    SELECT j.id FROM {schema}.jobs AS j, released
    WHERE %(wake_jobs)s AND j.status = 'pending' AND j.lease_name = released.name
      AND j.run_at > now()
    ORDER BY j.priority DESC, j.id
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED
),
woken AS (
    UPDATE {schema}.jobs AS j SET run_at = now(), updated_at = now()
    FROM next_job WHERE j.id = next_job.id
    RETURNING j.queue
)
SELECT (SELECT count(*) FROM released),
       (SELECT count(*) FROM (SELECT pg_notify(%(channel)s, name) FROM released
                              WHERE waiting_until > now()) AS n),
       (SELECT count(*) FROM (SELECT pg_notify(%(jobs_channel)s, queue) FROM woken) AS w),
       set_config('synchronous_commit', 'off', true) IS NOT NULL;

-- name: lease_mark_waiting
-- A caller is about to block in wait() on this name until `seconds` from now:
-- releases until then send a NOTIFY (see lease_release). Every slot of the name.
UPDATE {schema}.leases
SET waiting_until = greatest(coalesce(waiting_until, now()),
                             now() + make_interval(secs => %(seconds)s))
WHERE name = %(name)s;

-- name: lease_clear
-- Force-release (operators): every held slot of a name, or only lapsed ones
-- unless forced. Returns what was cleared; rows and tokens stay.
WITH old AS (
    SELECT name, slot, owner, holder_host, token, acquired_at, expires_at
    FROM {schema}.leases
    WHERE name = %(name)s AND owner IS NOT NULL
      AND (%(slot)s::integer IS NULL OR slot = %(slot)s::integer)
      AND (%(force)s OR expires_at <= now())
    FOR UPDATE
),
cleared AS (
    UPDATE {schema}.leases AS l
    SET owner = NULL, holder_host = NULL, expires_at = NULL, released_at = now()
    FROM old
    WHERE l.name = old.name AND l.slot = old.slot
    RETURNING old.name, old.slot, old.owner, old.holder_host, old.token, old.acquired_at,
              old.expires_at, extract(epoch FROM old.expires_at - now())::float8
),
notified AS (
    SELECT count(*) AS n FROM (SELECT pg_notify(%(channel)s, name) FROM cleared) AS c
)
SELECT cleared.*, (SELECT n FROM notified) FROM cleared ORDER BY slot;

-- name: lease_read
-- Every slot row of a name, free ones included (their token is the last handed out).
SELECT name, slot, owner, holder_host, token, acquired_at, expires_at,
       extract(epoch FROM expires_at - now())::float8
FROM {schema}.leases
WHERE name = %(name)s
ORDER BY slot;

-- name: lease_owner
-- The current holder of one slot: held and not lapsed.
SELECT owner FROM {schema}.leases
WHERE name = %(name)s AND slot = %(slot)s AND owner IS NOT NULL AND expires_at > now();

-- name: lease_list
-- Held leases (lapsed ones too when asked: they are still "held" until taken over
-- or cleared), soonest expiry first per name.
SELECT name, slot, owner, holder_host, token, acquired_at, expires_at,
       extract(epoch FROM expires_at - now())::float8
FROM {schema}.leases
WHERE owner IS NOT NULL AND (%(include_expired)s OR expires_at > now())
  AND (%(prefix)s::text IS NULL OR starts_with(name, %(prefix)s::text))
ORDER BY name, slot
LIMIT %(limit)s;
