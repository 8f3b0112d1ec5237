-- The uncontended lease pair as two prepared single-row UPDATEs (docs/leases.md,
-- "What a pair costs"; leases.sql lease_take and lease_free).
--
-- Since the acquire and release are protocol-level prepared statements
-- (db/calls.py), a function no longer saves their planning; it only adds its own
-- cost per call (a function scan, an executor start per statement inside, a second
-- one for RETURN QUERY). The common case -- the row exists and is free or lapsed,
-- or is ours to release -- is now one UPDATE each; lease_acquire (below) stays the
-- path for everything else: the first use of a name (insert), busy (reporting the
-- holder), and a job's lease (recorded on its row).

-- A job deferred on this lease may be waiting: set by a job's busy acquire
-- (lease_acquire with p_job_id), read by every release. Without it every release
-- probed the jobs table for a deferred job to hand the lease to, which cost the
-- server as much as the release itself; standalone locks no job ever waited on
-- never look. Never cleared: a name jobs once waited on keeps probing (as every
-- release did before), so no deferred job can miss its hand-over.
ALTER TABLE {schema}.leases ADD COLUMN jobs_waiting boolean NOT NULL DEFAULT false;
UPDATE {schema}.leases AS l SET jobs_waiting = true
WHERE EXISTS (SELECT 1 FROM {schema}.jobs AS j
              WHERE j.status = 'pending' AND j.lease_name = l.name);

-- "A held lease has an expiry" is kept by the statements, not by a CHECK: the
-- executor reads and prepares a table's CHECK expressions afresh for every
-- statement that writes a row (stringToNode, ExecPrepareExpr), 28 k instructions
-- per lease pair, 7% of its server time. Every statement that writes `owner`
-- writes `expires_at` in the same SET (acquire, acquire_slot: both set; renew:
-- sets expires_at of a held row; release, clear: both NULL);
-- tests/leases/test_lease_table.py checks the rule after each of them.
ALTER TABLE {schema}.leases DROP CONSTRAINT leases_held_has_expiry;

-- The slow path of an acquire (see leases.sql lease_acquire for when): unchanged
-- but for two things. A job's busy acquire marks the row jobs_waiting, so the
-- holder's release hands the lease over. And its results are assigned rather than
-- returned by RETURN QUERY (a second executor start per call).
CREATE OR REPLACE FUNCTION {schema}.lease_acquire(
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
        IF v_token IS NULL THEN
            UPDATE {schema}.leases AS l SET jobs_waiting = true
            WHERE l.name = p_name AND l.slot = p_slot AND NOT l.jobs_waiting;
        END IF;
    END IF;
    IF v_token IS NOT NULL THEN
        got := true;
        got_slot := v_slot;
        got_token := v_token;
        got_expires_at := v_expires;
        holder := NULL;
        holder_host := NULL;
        remaining := extract(epoch FROM v_expires - now())::float8;
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT false, l.slot::integer, l.token, l.expires_at, l.owner, l.holder_host,
           greatest(extract(epoch FROM l.expires_at - now()), 0)::float8
    FROM {schema}.leases AS l
    WHERE l.name = p_name AND l.slot = p_slot;
END
$$;

-- The release is leases.sql lease_free (one UPDATE); this function was its only
-- implementation before and nothing calls it now.
DROP FUNCTION {schema}.lease_release(text, integer, text, bigint, boolean, text, text);

-- The hand-over after a release of a lease jobs wait on (lease_free returned
-- jobs_waiting): the next job deferred on it (highest priority, oldest) is made due
-- now and the workers of its queue are woken, instead of waiting out the defer
-- delay; one job at a time, so a crowd deferred on one key does not stampede. Its
-- own transaction, right after the release's: the woken job races for the lease
-- like anyone else (as it did when this ran inside the release), and a hand-over
-- a crash forgets only leaves the job to its defer delay. The id of the woken job,
-- or NULL.
CREATE FUNCTION {schema}.lease_hand_over(p_name text, p_jobs_channel text)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_job bigint;
    v_queue text;
BEGIN
    SELECT w.id INTO v_job FROM {schema}.jobs AS w
    WHERE w.status = 'pending' AND w.lease_name = p_name AND w.run_at > now()
    ORDER BY w.priority DESC, w.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE {schema}.jobs AS j SET run_at = now(), updated_at = now()
    WHERE j.id = v_job
    RETURNING j.queue INTO v_queue;
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_notify(p_jobs_channel, v_queue);
    RETURN v_job;
END
$$;
