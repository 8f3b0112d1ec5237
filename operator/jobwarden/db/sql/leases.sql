-- Named queries on the leases table (docs/leases.md). Every time is the database
-- clock. Every change after the insert is fenced on the owner (and on the token
-- the holder was handed), so a holder whose lease lapsed and was taken over can
-- neither renew nor release its successor's lease.

-- name: lease_take
-- The common acquire, ONE prepared single-row UPDATE: the row exists and is free or
-- lapsed. Nothing returned means "not that case" and the caller runs lease_acquire
-- (first use of the name, busy, or a job's lease: see there). Of any number of
-- concurrent callers exactly one gets it: a concurrent writer's lock makes the
-- UPDATE wait and re-check "free or lapsed" against the row's newest version
-- (EvalPlanQual), recomputing the SET, so the token is drawn after the previous
-- holder's statement committed and is larger than every token this (name, slot)
-- handed out before. Durable: a server or role running synchronous_commit = off
-- is raised to local for this transaction (the fencing token must survive a
-- crash; a commit to disk before the holder hears of it). The last column is that
-- raise (NULL when nothing was raised).
UPDATE {schema}.leases AS l
SET owner = %(owner)s, holder_host = %(host)s, token = nextval('{schema}.lease_tokens'),
    acquired_at = now(), expires_at = now() + make_interval(secs => %(ttl)s),
    released_at = NULL
WHERE l.name = %(name)s AND l.slot = %(slot)s AND (l.owner IS NULL OR l.expires_at <= now())
RETURNING true, l.slot, l.token, l.expires_at, NULL::text, NULL::text,
          extract(epoch FROM l.expires_at - now())::float8,
          CASE WHEN current_setting('synchronous_commit') = 'off'
               THEN set_config('synchronous_commit', 'local', true) END;

-- name: lease_acquire
-- Take a plain lease (slot 0, or any one slot by number) in ONE statement: insert
-- the row, or take over a row that is free or whose holder's time ran out; a
-- durable commit (the fencing token must survive a crash). The function
-- (migrations 0014, 0018) holds the statement and its reasoning. The path when
-- lease_take found nothing to take (first use, busy) and for a job's lease:
-- job_id/claim_token also record the lease on that claimed job row (and a busy
-- one marks the lease jobs_waiting for its release). Busy: the holder's row, or
-- nothing when it vanished meanwhile (the caller reads again).
SELECT * FROM {schema}.lease_acquire(%(name)s, %(slot)s, %(owner)s, %(host)s, %(ttl)s,
                                     %(job_id)s, %(claim_token)s);

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

-- name: lease_free
-- Free a lease, owner- and token-fenced, ONE prepared single-row UPDATE; no row
-- means it was no longer ours. The row stays, keeping its token. NOTIFY only when
-- a waiter announced itself (lease_mark_waiting): NOTIFY makes every notifying
-- commit in the cluster queue behind one lock, which would cap uncontended
-- releases near the rate of one fsync at a time. A waiter's mark and this UPDATE
-- lock the same row, so either the release sees the mark (RETURNING reads the
-- row's newest version) or the waiter's next try, made after its mark, sees the
-- release. Not durable (synchronous_commit off for this transaction): a release a
-- crash forgets leaves the lease to expire at its ttl, which every holder's crash
-- already does, and the next acquire still draws a larger token. The first column:
-- a job deferred on this lease may wait (the caller then runs lease_hand_over).
UPDATE {schema}.leases AS l
SET owner = NULL, holder_host = NULL, expires_at = NULL, released_at = now()
WHERE l.name = %(name)s AND l.slot = %(slot)s AND l.owner = %(owner)s
  AND (%(token)s::bigint IS NULL OR l.token = %(token)s::bigint)
RETURNING l.jobs_waiting,
          CASE WHEN l.waiting_until > now() THEN pg_notify(%(channel)s, l.name)::text END,
          set_config('synchronous_commit', 'off', true);

-- name: lease_hand_over
-- After a release of a lease jobs wait on: make the next job deferred on it due now
-- and wake its queue's workers (migration 0018). The woken job's id, or NULL.
SELECT {schema}.lease_hand_over(%(name)s, %(jobs_channel)s);

-- name: lease_mark_waiting
-- A caller is about to block in wait() on this name until `seconds` from now:
-- releases until then send a NOTIFY (see lease_free). Every slot of the name.
-- Not durable (synchronous_commit off for this transaction): a mark a crash
-- forgets only means no NOTIFY, and the waiter still wakes at the holder's
-- expiry and polls at least every second.
WITH marked AS (
    UPDATE {schema}.leases
    SET waiting_until = greatest(coalesce(waiting_until, now()),
                                 now() + make_interval(secs => %(seconds)s))
    WHERE name = %(name)s
    RETURNING 1
)
SELECT (SELECT count(*) FROM marked), set_config('synchronous_commit', 'off', true);

-- name: fragment_lease_clear_rows
-- Shared by the clears (it follows their `WITH old AS (... FOR UPDATE)`): free the
-- slots in `old`, NOTIFY their name once per slot (a waiter takes over), and return
-- what was cleared with its remaining time; rows and tokens stay, so the next
-- holder's token is larger.
,
cleared AS (
    UPDATE {schema}.leases AS l
    SET owner = NULL, holder_host = NULL, expires_at = NULL, released_at = now()
    FROM old
    WHERE l.name = old.name AND l.slot = old.slot
    RETURNING old.name, old.slot, old.owner, old.holder_host, old.token, old.acquired_at,
              old.expires_at,
              extract(epoch FROM old.expires_at - now())::float8 AS expires_in_seconds
),
notified AS (
    SELECT count(*) AS n FROM (SELECT pg_notify(%(channel)s, name) FROM cleared) AS c
)
SELECT cleared.*, (SELECT n FROM notified) FROM cleared ORDER BY slot

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
)
{fragment_lease_clear_rows};

-- name: lease_read
-- Every slot row of a name, free ones included (their token is the last handed out).
SELECT name, slot, owner, holder_host, token, acquired_at, expires_at,
       extract(epoch FROM expires_at - now())::float8 AS expires_in_seconds
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
       extract(epoch FROM expires_at - now())::float8 AS expires_in_seconds
FROM {schema}.leases
WHERE owner IS NOT NULL AND (%(include_expired)s OR expires_at > now())
  AND (%(prefix)s::text IS NULL OR starts_with(name, %(prefix)s::text))
ORDER BY name, slot
LIMIT %(limit)s;

-- name: lease_clear_holder
-- The console's clear: one slot, only while the holder the operator confirmed
-- (by its fencing token) still holds it. Nothing when the slot was released or
-- changed hands meanwhile. Row and token stay, so the next holder's is larger.
WITH old AS (
    SELECT name, slot, owner, holder_host, token, acquired_at, expires_at
    FROM {schema}.leases
    WHERE name = %(name)s AND slot = %(slot)s AND token = %(token)s AND owner IS NOT NULL
    FOR UPDATE
)
{fragment_lease_clear_rows};
