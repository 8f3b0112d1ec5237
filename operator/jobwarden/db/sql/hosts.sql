-- Named queries on the host registry (hosts, workers, host_pools). Every time is the
-- database clock. A drain is "in force" while
--     draining AND (drain_expires_at IS NULL OR drain_expires_at > now())
-- so an expired drain lifts by itself without anyone writing to the row.

-- name: host_upsert
-- A worker process registers its host. A self-drain ('shutdown') belonged to the
-- process generation that stopped, so a new process lifts it; a drain set by an
-- operator or an admin stays (a drained server stays drained across a restart
-- until it is resumed or the drain expires). A pool drain in force applies to a
-- host that was not draining.
WITH pool AS (
    SELECT p.drain_reason, p.drain_started_at, p.drain_expires_at
    FROM {schema}.host_pools AS p
    WHERE p.name = %(pool)s AND p.draining
      AND (p.drain_expires_at IS NULL OR p.drain_expires_at > now())
)
INSERT INTO {schema}.hosts AS h (name, pool, code_version, host_cap, draining, drain_reason,
                                 drain_started_at, drain_expires_at)
SELECT %(host)s, %(pool)s, %(version)s, %(cap)s, pool.drain_reason IS NOT NULL,
       pool.drain_reason, pool.drain_started_at, pool.drain_expires_at
FROM (SELECT 1) AS one LEFT JOIN pool ON true
ON CONFLICT (name) DO UPDATE SET
    pool = excluded.pool,
    code_version = excluded.code_version,
    host_cap = excluded.host_cap,
    started_at = CASE WHEN EXISTS (SELECT 1 FROM {schema}.workers AS w WHERE w.host = h.name)
                      THEN h.started_at ELSE now() END,
    last_seen_at = now(),
    draining = (CASE
        WHEN h.draining AND h.drain_reason IS DISTINCT FROM 'shutdown'
             AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now()) THEN true
        ELSE excluded.draining END),
    drain_reason = (CASE
        WHEN h.draining AND h.drain_reason IS DISTINCT FROM 'shutdown'
             AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now()) THEN h.drain_reason
        ELSE excluded.drain_reason END),
    drain_started_at = (CASE
        WHEN h.draining AND h.drain_reason IS DISTINCT FROM 'shutdown'
             AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now()) THEN h.drain_started_at
        ELSE excluded.drain_started_at END),
    drain_expires_at = (CASE
        WHEN h.draining AND h.drain_reason IS DISTINCT FROM 'shutdown'
             AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now()) THEN h.drain_expires_at
        ELSE excluded.drain_expires_at END),
    drain_idle_at = (CASE
        WHEN h.draining AND h.drain_reason IS DISTINCT FROM 'shutdown'
             AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now()) THEN h.drain_idle_at
        ELSE NULL END)
RETURNING h.name;

-- name: host_touch
-- A tick (no long-lived process) refreshes its host: created when missing, seen now.
-- The cap is left alone: it belongs to the worker processes' settings.
INSERT INTO {schema}.hosts AS h (name, pool, code_version)
VALUES (%(host)s, %(pool)s, %(version)s)
ON CONFLICT (name) DO UPDATE SET last_seen_at = now(), code_version = excluded.code_version
RETURNING h.name;

-- name: worker_insert
-- jobwarden_version and schema_needs: the release this process runs and the newest
-- migration its code needs (`jobwarden status` lists them; docs/upgrades.md).
INSERT INTO {schema}.workers (id, host, pid, concurrency, queues, code_version,
                              jobwarden_version, schema_needs)
VALUES (%(worker)s, %(host)s, %(pid)s, %(concurrency)s, %(queues)s::text[], %(version)s,
        %(release)s, %(schema_needs)s)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), stopping = false;

-- name: host_refresh
-- Every few seconds from each live process: it and its host were seen now. Returns
-- the host's state as the claim will judge it; no row means this process (or its
-- host) was pruned meanwhile and must register again.
-- Lock order: the hosts row first, then the workers row -- the order of
-- registration (host_upsert, then worker_insert) and of the capped claim
-- (host_claim_lock). Updating workers first deadlocked with a registration of
-- the same process running on another thread (the claim gate re-registers after
-- a prune while the refresh task does too). `seen` reads `touched`, so the
-- hosts row is locked before the workers row is.
WITH touched AS (
    UPDATE {schema}.hosts SET last_seen_at = now()
    WHERE name = %(host)s
      AND EXISTS (SELECT 1 FROM {schema}.workers AS w WHERE w.id = %(worker)s)
    RETURNING name, pool, host_cap, draining, drain_expires_at, drain_started_at, drain_idle_at
),
seen AS (
    UPDATE {schema}.workers SET last_seen_at = now()
    WHERE id = %(worker)s AND host IN (SELECT name FROM touched)
    RETURNING host
)
SELECT t.pool, coalesce(t.host_cap, p.host_cap) AS cap,
       (t.draining AND (t.drain_expires_at IS NULL OR t.drain_expires_at > now())) AS draining,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.status = 'processing' AND j.claimed_by = t.name) AS running,
       t.drain_idle_at IS NOT NULL AS idle_marked,
       -- How long the drain has lasted (jobwarden_host_draining_seconds), while draining.
       CASE WHEN t.draining AND (t.drain_expires_at IS NULL OR t.drain_expires_at > now())
            THEN greatest(extract(epoch FROM now() - coalesce(t.drain_started_at, now())), 0)
            ELSE 0 END::double precision AS draining_seconds
FROM touched AS t JOIN seen ON seen.host = t.name
LEFT JOIN {schema}.host_pools AS p ON p.name = t.pool;

-- name: host_claim_lock
-- First statement of a claim through the host registry. It takes the host row
-- FOR SHARE: a drain (an UPDATE of the row) waits for claims in flight and every
-- later claim sees it, yet sibling processes of an uncapped host claim side by
-- side. (FOR NO KEY UPDATE here made every process of a host take turns for every
-- claim, capped or not: bench.growth measured 0.03 ms per lock at one process and
-- 17-32 ms at eight, issue 16.) Only a capped host's claims must count what
-- siblings run, so only they also queue on a transaction-scoped advisory lock of
-- the host (pooler-safe: it ends with the transaction); the claim that follows
-- takes a fresh snapshot after it and counts every claim committed before. The
-- cap read here is kept for this transaction (set_config, local) so the claim
-- counts only when this lock was taken: a cap set on the pool between the two
-- statements makes this claim take nothing, and the next one queues.
WITH locked AS (
    SELECT h.name, h.pool, h.host_cap FROM {schema}.hosts AS h
    WHERE h.name = %(host)s
    FOR SHARE
)
SELECT set_config('jobwarden.claim_serialized',
                  (CASE WHEN coalesce(l.host_cap, p.host_cap) IS NULL THEN false
                        ELSE pg_advisory_xact_lock(
                                 hashtextextended('jobwarden:host-cap:' || l.name, 0))
                             IS NOT NULL END)::text, true)
FROM locked AS l LEFT JOIN {schema}.host_pools AS p ON p.name = l.pool;

-- name: host_mark_idle
-- A draining host with nothing running is idle: recorded once (the first observer
-- wins) so the drain duration is observed once per drain.
UPDATE {schema}.hosts AS h SET drain_idle_at = now()
WHERE h.name = %(host)s AND h.draining AND h.drain_idle_at IS NULL
  AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now())
  AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS j
                  WHERE j.status = 'processing' AND j.claimed_by = h.name)
RETURNING h.pool, greatest(extract(epoch FROM now() - h.drain_started_at), 0)::double precision;

-- name: worker_stop
-- SIGTERM: this process stops claiming. The host is marked draining ('shutdown',
-- expiring after the grace period) only when no other live process of the host is
-- still working, so one stopping process never stops its siblings.
-- Lock order: the hosts row first, then the workers row, as registration and
-- host_refresh do (the refresh task keeps running while a process stops).
WITH host AS (
    SELECT name FROM {schema}.hosts WHERE name = %(host)s FOR NO KEY UPDATE
),
me AS (
    UPDATE {schema}.workers SET stopping = true, last_seen_at = now()
    WHERE id = %(worker)s AND host IN (SELECT name FROM host)
    RETURNING host
)
UPDATE {schema}.hosts AS h
SET draining = true, drain_reason = 'shutdown', drain_started_at = now(),
    drain_expires_at = now() + make_interval(secs => %(grace)s), drain_idle_at = NULL
WHERE h.name = %(host)s AND EXISTS (SELECT 1 FROM me)
  AND NOT (h.draining AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now()))
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.workers AS w
      WHERE w.host = h.name AND w.id <> %(worker)s AND NOT w.stopping
        AND w.last_seen_at > now() - make_interval(secs => %(stale)s))
RETURNING h.name;

-- name: worker_delete
DELETE FROM {schema}.workers WHERE id = %(worker)s RETURNING host;

-- name: host_delete_if_unused
-- After the last process of a host left: the row goes, unless an operator's or an
-- admin's drain is in force (kept so the host stays drained across a restart).
DELETE FROM {schema}.hosts AS h
WHERE h.name = %(host)s
  AND NOT EXISTS (SELECT 1 FROM {schema}.workers AS w WHERE w.host = h.name)
  AND NOT (h.draining AND h.drain_reason IS DISTINCT FROM 'shutdown'
           AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now()))
RETURNING h.name;

-- name: worker_prune
-- Processes not seen for the stale period are gone (crashed, killed, partitioned);
-- their running jobs are left to the reaper, which judges them by their heartbeats.
DELETE FROM {schema}.workers
WHERE last_seen_at < now() - make_interval(secs => %(stale)s)
RETURNING id, host;

-- name: host_prune
-- Hosts not seen for the stale period and without processes are gone, except while an
-- operator's or admin's drain is in force on them.
DELETE FROM {schema}.hosts AS h
WHERE h.last_seen_at < now() - make_interval(secs => %(stale)s)
  AND NOT EXISTS (SELECT 1 FROM {schema}.workers AS w WHERE w.host = h.name)
  AND NOT (h.draining AND h.drain_reason IS DISTINCT FROM 'shutdown'
           AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now()))
RETURNING h.name;

-- name: host_drain
-- Drain one host or every host of a pool. Draining a host already draining keeps its
-- start (the duration is measured from the first drain) and updates reason and
-- expiry; 0 seconds = until resumed.
UPDATE {schema}.hosts AS h SET
    drain_started_at = CASE
        WHEN h.draining AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now())
        THEN h.drain_started_at ELSE now() END,
    drain_idle_at = CASE
        WHEN h.draining AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now())
        THEN h.drain_idle_at ELSE NULL END,
    draining = true,
    drain_reason = %(reason)s,
    drain_expires_at = CASE WHEN %(expires)s > 0
                            THEN now() + make_interval(secs => %(expires)s) END
WHERE (%(host)s::text IS NULL OR h.name = %(host)s)
  AND (%(pool)s::text IS NULL OR h.pool = %(pool)s)
RETURNING h.name;

-- name: pool_drain
-- A pool-wide drain also applies to hosts registering while it is in force.
INSERT INTO {schema}.host_pools AS p (name, draining, drain_reason, drain_started_at,
                                      drain_expires_at)
VALUES (%(pool)s, true, %(reason)s, now(),
        CASE WHEN %(expires)s > 0 THEN now() + make_interval(secs => %(expires)s) END)
ON CONFLICT (name) DO UPDATE SET
    draining = true, drain_reason = excluded.drain_reason,
    drain_started_at = CASE
        WHEN p.draining AND (p.drain_expires_at IS NULL OR p.drain_expires_at > now())
        THEN p.drain_started_at ELSE now() END,
    drain_expires_at = excluded.drain_expires_at, updated_at = now();

-- name: host_resume
UPDATE {schema}.hosts AS h
SET draining = false, drain_reason = NULL, drain_started_at = NULL, drain_expires_at = NULL,
    drain_idle_at = NULL
WHERE (%(host)s::text IS NULL OR h.name = %(host)s)
  AND (%(pool)s::text IS NULL OR h.pool = %(pool)s)
RETURNING h.name;

-- name: pool_resume
UPDATE {schema}.host_pools
SET draining = false, drain_reason = NULL, drain_started_at = NULL, drain_expires_at = NULL,
    updated_at = now()
WHERE name = %(pool)s;

-- name: pool_set_cap
-- The default per-host cap of a pool (NULL = no cap); a host's own cap wins.
INSERT INTO {schema}.host_pools AS p (name, host_cap) VALUES (%(pool)s, %(cap)s)
ON CONFLICT (name) DO UPDATE SET host_cap = excluded.host_cap, updated_at = now();

-- name: host_status
-- Named as HostStatus's fields, in its order (db/hosts.py reads the row by name).
SELECT h.name, h.pool, h.code_version, coalesce(h.host_cap, p.host_cap) AS cap,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.status = 'processing' AND j.claimed_by = h.name) AS running,
       (h.draining AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now())) AS draining,
       h.drain_reason, h.drain_started_at, h.drain_expires_at, h.drain_idle_at,
       h.started_at, h.last_seen_at,
       greatest(extract(epoch FROM now() - h.last_seen_at), 0)::double precision
           AS seen_seconds_ago,
       (SELECT count(*) FROM {schema}.workers AS w WHERE w.host = h.name) AS processes,
       (SELECT count(*) FROM {schema}.workers AS w WHERE w.host = h.name AND w.stopping)
           AS stopping_processes,
       (SELECT coalesce(sum(w.concurrency), 0) FROM {schema}.workers AS w
        WHERE w.host = h.name) AS slots
FROM {schema}.hosts AS h LEFT JOIN {schema}.host_pools AS p ON p.name = h.pool
WHERE (%(host)s::text IS NULL OR h.name = %(host)s)
  AND (%(pool)s::text IS NULL OR h.pool = %(pool)s)
ORDER BY h.pool, h.name;

-- name: host_names
SELECT h.name FROM {schema}.hosts AS h
WHERE (%(host)s::text IS NULL OR h.name = %(host)s)
  AND (%(pool)s::text IS NULL OR h.pool = %(pool)s)
ORDER BY h.name;

-- name: host_running
-- Running jobs per host name, for any names (a drained host that already
-- deregistered counts its jobs left to the reaper until they are reaped).
SELECT n.name, count(j.id)
FROM unnest(%(hosts)s::text[]) AS n(name)
LEFT JOIN {schema}.jobs AS j ON j.status = 'processing' AND j.claimed_by = n.name
GROUP BY n.name
ORDER BY n.name;

-- name: host_counts
-- For the jobwarden_hosts gauge by pool and state (exported once, by the operator).
SELECT h.pool,
       CASE WHEN h.draining AND (h.drain_expires_at IS NULL OR h.drain_expires_at > now())
            THEN 'draining' ELSE 'active' END AS state,
       count(*)
FROM {schema}.hosts AS h
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: host_tick_acquire
-- The tick route's per-host overlap guard: take the row's tick lease if it is free
-- or expired (a crashed tick cannot block its host for longer than its ttl).
UPDATE {schema}.hosts
SET tick_owner = %(owner)s, tick_expires_at = now() + make_interval(secs => %(ttl)s)
WHERE name = %(host)s AND (tick_owner IS NULL OR tick_expires_at < now())
RETURNING name;

-- name: host_tick_release
UPDATE {schema}.hosts SET tick_owner = NULL, tick_expires_at = NULL
WHERE name = %(host)s AND tick_owner = %(owner)s;

-- name: host_slot_freed
-- A capped host's process wrote outcomes: a unit of the host's cap is free, so
-- its sibling processes (LISTENing on this channel) claim at once instead of at
-- their next poll. Speed only: the claim still judges the cap under the row
-- lock. A NOTIFY needs a transaction id, and so a commit; nothing here needs
-- to survive a crash, so that commit does not wait for its WAL flush.
SELECT set_config('synchronous_commit', 'off', true), pg_notify(%(channel)s, %(host)s);

-- name: worker_releases
-- `jobwarden status`: worker processes per Jobwarden release (NULL: 0.1.0, which
-- records none) and the newest migration each needs.
SELECT jobwarden_version, schema_needs, count(*)::integer
FROM {schema}.workers
GROUP BY jobwarden_version, schema_needs;
