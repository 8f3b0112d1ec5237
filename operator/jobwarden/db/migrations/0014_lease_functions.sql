-- Lease acquire and release as PL/pgSQL functions (docs/leases.md, "Cost of a pair").
--
-- Why functions: without server-side prepared statements (a transaction-mode
-- pooler cannot carry them, docs/operations.md) every statement is parsed and
-- planned on each call, and these two statements touch the leases and the jobs
-- table (whose many indexes the planner opens every time): planning cost about
-- three times their execution, more server time per lease pair than everything
-- else. A PL/pgSQL function caches the plans of its statements in each server
-- process (plan cache, invalidated by DDL like any prepared statement), but
-- that cache is no session state a pooler must carry: any server connection
-- runs the same function, and the call itself is trivial to plan. Nothing else
-- changes: one statement per acquire or release, one transaction each, the same
-- fencing and the same durability rules as the statements they replace.

-- Every acquire and release changes expires_at and owner, the columns of this
-- partial index: none of them could be a HOT update (a new entry in every index
-- of the table, twice per lease pair, and index bloat on a busy name). Only the
-- operators' `jobwarden leases list` (and the console page) read by it; they scan
-- the table instead, which holds one small row per lease name.
DROP INDEX {schema}.leases_held_idx;

-- The name and slot rules as domains instead of table CHECK constraints: the
-- executor reads (stringToNode) and prepares a table's CHECK expressions afresh
-- for every statement that writes a row, the release's UPDATE included, which
-- cost more server time than the UPDATE itself. A domain's check lives in the
-- server process's type cache and runs only where a value is assigned to the
-- column (an insert; no statement renames a lease or moves its slot). Same rules,
-- same constraint names, same SQLSTATE (check_violation) on a bad value.
CREATE DOMAIN {schema}.lease_name AS text
    CONSTRAINT leases_name_length CHECK (length(VALUE) BETWEEN 1 AND 200);
CREATE DOMAIN {schema}.lease_slot AS integer
    CONSTRAINT leases_slot_range CHECK (VALUE >= 0);
ALTER TABLE {schema}.leases
    DROP CONSTRAINT leases_name_length,
    DROP CONSTRAINT leases_slot_range,
    ALTER COLUMN name TYPE {schema}.lease_name,
    ALTER COLUMN slot TYPE {schema}.lease_slot;

-- Take a plain lease (one slot by number) or take over a free or lapsed one.
-- INSERT ... ON CONFLICT DO UPDATE locks the existing row and re-checks the
-- WHERE against its latest committed version, so of any number of concurrent
-- callers exactly one gets it. The token is drawn with nextval() inside that row
-- lock, after the previous holder's statement committed, so it is larger than
-- every token this (name, slot) handed out before.
-- Durable: the commit must reach disk before the holder hears of its token, or
-- a crash could forget the token (and the sequence's advance) and hand the same
-- token out again. A server or role running synchronous_commit = off is raised
-- to local for this transaction only.
-- p_job_id/p_claim_token: the lease is also recorded on that claimed job row
-- (fenced like every write after a claim), busy or not: a deferred job keeps the
-- name of the lease it waits for, so its release can hand it over.
-- When busy, the holder is read with a fresh snapshot (each statement of a
-- function takes its own under read committed), so a row inserted concurrently
-- is seen; an empty answer still means "busy, read it again".
CREATE FUNCTION {schema}.lease_acquire(
    p_name text, p_slot integer, p_owner text, p_host text, p_ttl float8,
    p_job_id bigint, p_claim_token uuid
) RETURNS TABLE (
    got boolean, got_slot integer, got_token bigint, got_expires_at timestamptz,
    holder text, holder_host text, remaining float8
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_slot integer;
    v_token bigint;
    v_expires timestamptz;
BEGIN
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    INSERT INTO {schema}.leases AS l (name, slot, owner, holder_host, token, acquired_at,
                                      expires_at, released_at)
    VALUES (p_name, p_slot, p_owner, p_host, nextval('{schema}.lease_tokens'), now(),
            now() + make_interval(secs => p_ttl), NULL)
    ON CONFLICT (name, slot) DO UPDATE
    SET owner = EXCLUDED.owner, holder_host = EXCLUDED.holder_host,
        token = nextval('{schema}.lease_tokens'), acquired_at = now(),
        expires_at = EXCLUDED.expires_at, released_at = NULL
    WHERE l.owner IS NULL OR l.expires_at <= now()
    RETURNING l.slot, l.token, l.expires_at INTO v_slot, v_token, v_expires;
    IF p_job_id IS NOT NULL THEN
        UPDATE {schema}.jobs AS j
        SET lease_name = p_name, lease_token = v_token, updated_at = now()
        WHERE j.id = p_job_id AND j.claim_token = p_claim_token AND j.status = 'processing';
    END IF;
    IF v_token IS NOT NULL THEN
        RETURN QUERY SELECT true, v_slot, v_token, v_expires, NULL::text, NULL::text,
                            extract(epoch FROM v_expires - now())::float8;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT false, l.slot::integer, l.token, l.expires_at, l.owner, l.holder_host,
           greatest(extract(epoch FROM l.expires_at - now()), 0)::float8
    FROM {schema}.leases AS l
    WHERE l.name = p_name AND l.slot = p_slot;
END
$$;

-- Free a lease, owner- and token-fenced (NULL p_token: owner only); true when
-- it was ours. The row stays, keeping its token.
-- Not durable: the commit does not wait for its WAL flush (synchronous_commit
-- off for this transaction only). A release a crash forgets leaves the lease to
-- expire at its ttl, which every holder's crash already does, and the token the
-- next acquire draws is still larger (acquires are durable).
-- NOTIFY only when a waiter announced itself (lease_mark_waiting): NOTIFY makes
-- every notifying commit in the cluster queue behind one lock, which would cap
-- uncontended releases near the rate of one fsync at a time. A waiter's mark and
-- this UPDATE lock the same row, so either the release sees the mark (and
-- notifies) or the waiter's next try, made after its mark, sees the release.
-- p_wake_jobs: the next job deferred on this lease (highest priority, oldest) is
-- made due now and the workers of its queue are woken: a hand-over instead of
-- waiting out the defer delay, one job at a time so a crowd of deferred jobs on
-- one key does not stampede (an index probe on jobs_lease_waiting_idx).
CREATE FUNCTION {schema}.lease_release(
    p_name text, p_slot integer, p_owner text, p_token bigint, p_wake_jobs boolean,
    p_channel text, p_jobs_channel text
) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_waiting timestamptz;
    v_job bigint;
    v_queue text;
BEGIN
    UPDATE {schema}.leases AS l
    SET owner = NULL, holder_host = NULL, expires_at = NULL, released_at = now()
    WHERE l.name = p_name AND l.slot = p_slot AND l.owner = p_owner
      AND (p_token IS NULL OR l.token = p_token)
    RETURNING l.waiting_until INTO v_waiting;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    IF v_waiting > now() THEN
        PERFORM pg_notify(p_channel, p_name);
    END IF;
    IF p_wake_jobs THEN
        -- Probe first: an UPDATE of jobs opens every index of that table even when
        -- it changes nothing, and almost every release has no job waiting.
        SELECT w.id INTO v_job FROM {schema}.jobs AS w
        WHERE w.status = 'pending' AND w.lease_name = p_name AND w.run_at > now()
        ORDER BY w.priority DESC, w.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE {schema}.jobs AS j SET run_at = now(), updated_at = now()
            WHERE j.id = v_job
            RETURNING j.queue INTO v_queue;
            PERFORM pg_notify(p_jobs_channel, v_queue);
        END IF;
    END IF;
    RETURN true;
END
$$;
