-- The Jobwarden schema after every migration (0001 to 0025), for readers.
-- GENERATED from operator/jobwarden/db/migrations: do not edit; the migrations
-- are the truth. Regenerate: python -m tests.support.schemadump
-- (pg_dump --schema-only, normalized; schema name: jobwarden, the default).

--
-- Name: jobwarden; Type: SCHEMA; Schema: -
--

CREATE SCHEMA jobwarden;

--
-- Name: job_status; Type: TYPE; Schema: jobwarden
--

CREATE TYPE jobwarden.job_status AS ENUM (
    'pending',
    'processing',
    'completed',
    'failed',
    'interrupted',
    'cancelled'
);

--
-- Name: lease_name; Type: DOMAIN; Schema: jobwarden
--

CREATE DOMAIN jobwarden.lease_name AS text
	CONSTRAINT leases_name_length CHECK (((length(VALUE) >= 1) AND (length(VALUE) <= 200)));

--
-- Name: lease_slot; Type: DOMAIN; Schema: jobwarden
--

CREATE DOMAIN jobwarden.lease_slot AS integer
	CONSTRAINT leases_slot_range CHECK ((VALUE >= 0));

--
-- Name: flush_barrier(); Type: FUNCTION; Schema: jobwarden
--

CREATE FUNCTION jobwarden.flush_barrier() RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    -- PostgreSQL 17 added a fourth argument (flush, default false) to the function.
    emit regprocedure := coalesce(
        to_regprocedure('pg_catalog.pg_logical_emit_message(boolean, text, text, boolean)'),
        to_regprocedure('pg_catalog.pg_logical_emit_message(boolean, text, text)'));
    target pg_lsn;
BEGIN
    IF emit IS NOT NULL AND has_function_privilege(emit, 'EXECUTE') THEN
        PERFORM pg_logical_emit_message(true, 'jobwarden.flush', '');
        RETURN;
    END IF;
    target := pg_current_wal_insert_lsn();
    WHILE pg_current_wal_flush_lsn() < target LOOP
        PERFORM pg_sleep(0.001);
    END LOOP;
END;
$$;

--
-- Name: lease_acquire(text, integer, text, text, double precision, bigint, uuid); Type: FUNCTION; Schema: jobwarden
--

CREATE FUNCTION jobwarden.lease_acquire(p_name text, p_slot integer, p_owner text, p_host text, p_ttl double precision, p_job_id bigint, p_claim_token uuid) RETURNS TABLE(got boolean, got_slot integer, got_token bigint, got_expires_at timestamp with time zone, holder text, holder_host text, remaining double precision)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_slot integer;
    v_token bigint;
    v_expires timestamptz;
BEGIN
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    INSERT INTO "jobwarden".leases AS l (name, slot, owner, holder_host, token, acquired_at,
                                      expires_at, released_at)
    VALUES (p_name, p_slot, p_owner, p_host, nextval('"jobwarden".lease_tokens'), now(),
            now() + make_interval(secs => p_ttl), NULL)
    ON CONFLICT (name, slot) DO UPDATE
    SET owner = EXCLUDED.owner, holder_host = EXCLUDED.holder_host,
        token = nextval('"jobwarden".lease_tokens'), acquired_at = now(),
        expires_at = EXCLUDED.expires_at, released_at = NULL
    WHERE l.owner IS NULL OR l.expires_at <= now()
    RETURNING l.slot, l.token, l.expires_at INTO v_slot, v_token, v_expires;
    IF p_job_id IS NOT NULL THEN
        UPDATE "jobwarden".jobs AS j
        SET lease_name = p_name, lease_token = v_token, updated_at = now()
        WHERE j.id = p_job_id AND j.claim_token = p_claim_token AND j.status = 'processing';
        IF v_token IS NULL THEN
            UPDATE "jobwarden".leases AS l SET jobs_waiting = true
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
    FROM "jobwarden".leases AS l
    WHERE l.name = p_name AND l.slot = p_slot;
END
$$;

--
-- Name: lease_hand_over(text, text); Type: FUNCTION; Schema: jobwarden
--

CREATE FUNCTION jobwarden.lease_hand_over(p_name text, p_jobs_channel text) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_job bigint;
    v_queue text;
BEGIN
    SELECT w.id INTO v_job FROM "jobwarden".jobs AS w
    WHERE w.status = 'pending' AND w.lease_name = p_name AND w.run_at > now()
    ORDER BY w.priority DESC, w.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE "jobwarden".jobs AS j SET run_at = now(), updated_at = now()
    WHERE j.id = v_job
    RETURNING j.queue INTO v_queue;
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_notify(p_jobs_channel, v_queue);
    RETURN v_job;
END
$$;

--
-- Name: host_pools; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.host_pools (
    name text NOT NULL,
    host_cap integer,
    draining boolean DEFAULT false NOT NULL,
    drain_reason text,
    drain_started_at timestamp with time zone,
    drain_expires_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT host_pools_cap_positive CHECK (((host_cap IS NULL) OR (host_cap >= 1)))
);

--
-- Name: hosts; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.hosts (
    name text NOT NULL,
    pool text DEFAULT 'default'::text NOT NULL,
    code_version text DEFAULT ''::text NOT NULL,
    host_cap integer,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    draining boolean DEFAULT false NOT NULL,
    drain_reason text,
    drain_started_at timestamp with time zone,
    drain_expires_at timestamp with time zone,
    drain_idle_at timestamp with time zone,
    tick_owner uuid,
    tick_expires_at timestamp with time zone,
    CONSTRAINT hosts_cap_positive CHECK (((host_cap IS NULL) OR (host_cap >= 1))),
    CONSTRAINT hosts_drain_started CHECK (((NOT draining) OR (drain_started_at IS NOT NULL))),
    CONSTRAINT hosts_name_length CHECK (((length(name) >= 1) AND (length(name) <= 253))),
    CONSTRAINT hosts_pool_length CHECK (((length(pool) >= 1) AND (length(pool) <= 128)))
)
WITH (autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='200');

--
-- Name: job_attempts; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.job_attempts (
    job_id bigint NOT NULL,
    slot smallint NOT NULL,
    attempt integer NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone DEFAULT now() NOT NULL,
    host text,
    outcome text NOT NULL,
    status_after text NOT NULL,
    error text,
    traceback text,
    CONSTRAINT job_attempts_outcome_known CHECK ((outcome = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text, 'reaped'::text])))
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_threshold='1000');

--
-- Name: job_class_failures; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.job_class_failures (
    job_class text NOT NULL,
    error text NOT NULL,
    host text NOT NULL,
    failed_at timestamp with time zone DEFAULT now() NOT NULL,
    failures bigint DEFAULT 1 NOT NULL
);

--
-- Name: job_waiters; Type: TABLE; Schema: jobwarden
--

CREATE UNLOGGED TABLE jobwarden.job_waiters (
    job_id bigint NOT NULL,
    until timestamp with time zone NOT NULL
);

--
-- Name: job_wakeups; Type: TABLE; Schema: jobwarden
--

CREATE UNLOGGED TABLE jobwarden.job_wakeups (
    id bigint NOT NULL,
    channel text NOT NULL,
    queues text[],
    until timestamp with time zone NOT NULL
);

--
-- Name: job_wakeups_id_seq; Type: SEQUENCE; Schema: jobwarden
--

ALTER TABLE jobwarden.job_wakeups ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME jobwarden.job_wakeups_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: jobs; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.jobs (
    id bigint NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    job_class text NOT NULL,
    data jsonb DEFAULT 'null'::jsonb NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    status jobwarden.job_status DEFAULT 'pending'::jobwarden.job_status NOT NULL,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_retries integer DEFAULT 3 NOT NULL,
    timeout_seconds double precision DEFAULT 300 NOT NULL,
    idempotent boolean DEFAULT true NOT NULL,
    unique_key text,
    lease_name text,
    lease_token bigint,
    lease_lost boolean DEFAULT false NOT NULL,
    deferrals integer DEFAULT 0 NOT NULL,
    claim_token uuid,
    claimed_by text,
    claimed_at timestamp with time zone,
    heartbeat_at timestamp with time zone,
    claim_expires_at timestamp with time zone,
    cancel_requested boolean DEFAULT false NOT NULL,
    result jsonb,
    last_error text,
    schedule_name text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    on_busy text,
    lease_ttl_seconds double precision,
    trace_context text,
    pod_run text,
    CONSTRAINT jobs_attempts_nonnegative CHECK ((attempts >= 0)),
    CONSTRAINT jobs_class_length CHECK (((length(job_class) >= 1) AND (length(job_class) <= 512))),
    CONSTRAINT jobs_lease_ttl_positive CHECK ((lease_ttl_seconds > (0)::double precision)),
    CONSTRAINT jobs_max_retries_nonnegative CHECK ((max_retries >= 0)),
    CONSTRAINT jobs_on_busy_known CHECK ((on_busy = ANY (ARRAY['defer'::text, 'skip'::text, 'fail'::text]))),
    CONSTRAINT jobs_processing_is_claimed CHECK (((status <> 'processing'::jobwarden.job_status) OR ((claim_token IS NOT NULL) AND (claim_expires_at IS NOT NULL)))),
    CONSTRAINT jobs_queue_length CHECK (((length(queue) >= 1) AND (length(queue) <= 128))),
    CONSTRAINT jobs_timeout_positive CHECK ((timeout_seconds > (0)::double precision))
)
WITH (autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.05', autovacuum_analyze_scale_factor='0.02', autovacuum_vacuum_cost_limit='400');

--
-- Name: jobs_id_seq; Type: SEQUENCE; Schema: jobwarden
--

ALTER TABLE jobwarden.jobs ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME jobwarden.jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: lease_tokens; Type: SEQUENCE; Schema: jobwarden
--

CREATE SEQUENCE jobwarden.lease_tokens
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: leases; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.leases (
    name jobwarden.lease_name NOT NULL,
    slot jobwarden.lease_slot DEFAULT 0 NOT NULL,
    owner text,
    holder_host text,
    token bigint DEFAULT 0 NOT NULL,
    acquired_at timestamp with time zone,
    expires_at timestamp with time zone,
    released_at timestamp with time zone,
    waiting_until timestamp with time zone,
    jobs_waiting boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='500');

--
-- Name: migration_releases; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.migration_releases (
    version integer NOT NULL,
    applied_by text NOT NULL,
    serves_from text,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT migration_releases_applied_by CHECK ((applied_by ~ '^\d+\.\d+\.\d+$'::text)),
    CONSTRAINT migration_releases_serves_from CHECK ((serves_from ~ '^\d+\.\d+\.\d+$'::text))
);

--
-- Name: queue_pauses; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.queue_pauses (
    queue text NOT NULL,
    paused_at timestamp with time zone DEFAULT now() NOT NULL,
    paused_by text,
    CONSTRAINT queue_pauses_queue_length CHECK (((length(queue) >= 1) AND (length(queue) <= 128)))
);

--
-- Name: schedule_owners; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.schedule_owners (
    source text NOT NULL,
    namespace text NOT NULL,
    holder text NOT NULL,
    renewed_at timestamp with time zone DEFAULT now() NOT NULL,
    grace_seconds integer NOT NULL,
    CONSTRAINT schedule_owners_grace CHECK (((grace_seconds >= 5) AND (grace_seconds <= 86400)))
);

--
-- Name: schedule_slots; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.schedule_slots (
    schedule_name text NOT NULL,
    slot timestamp with time zone NOT NULL,
    fate text NOT NULL,
    job_id bigint,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedule_slots_fate CHECK ((fate = ANY (ARRAY['enqueued'::text, 'skipped'::text, 'missed'::text, 'replaced'::text, 'dropped'::text, 'deferred'::text])))
);

--
-- Name: schedules; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.schedules (
    name text NOT NULL,
    expression text NOT NULL,
    cron text,
    interval_seconds integer,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    job_class text NOT NULL,
    data jsonb DEFAULT 'null'::jsonb NOT NULL,
    queue text,
    priority integer,
    timeout_seconds double precision,
    max_retries integer,
    idempotent boolean,
    catch_up text DEFAULT 'latest'::text NOT NULL,
    catch_up_window_seconds integer DEFAULT 3600 NOT NULL,
    catch_up_max integer DEFAULT 10 NOT NULL,
    overlap text DEFAULT 'Allow'::text NOT NULL,
    suspended boolean DEFAULT false NOT NULL,
    suspended_by text,
    spec_suspended boolean DEFAULT false NOT NULL,
    source text DEFAULT 'code'::text NOT NULL,
    origin text,
    spec_hash text NOT NULL,
    planned_until timestamp with time zone DEFAULT now() NOT NULL,
    last_slot timestamp with time zone,
    last_enqueued_slot timestamp with time zone,
    next_slot timestamp with time zone NOT NULL,
    enqueued_count bigint DEFAULT 0 NOT NULL,
    skipped_count bigint DEFAULT 0 NOT NULL,
    missed_count bigint DEFAULT 0 NOT NULL,
    last_job_id bigint,
    last_success_at timestamp with time zone,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    pod_run text,
    successful_history_limit integer,
    failed_history_limit integer,
    replaced_count bigint DEFAULT 0 NOT NULL,
    dropped_count bigint DEFAULT 0 NOT NULL,
    deferred_count bigint DEFAULT 0 NOT NULL,
    slot_rows integer DEFAULT 0 NOT NULL,
    resumed_at timestamp with time zone,
    owner_held_at timestamp with time zone,
    CONSTRAINT schedules_catch_up CHECK ((catch_up = ANY (ARRAY['latest'::text, 'none'::text, 'all'::text]))),
    CONSTRAINT schedules_catch_up_max CHECK ((catch_up_max >= 1)),
    CONSTRAINT schedules_class_length CHECK (((length(job_class) >= 1) AND (length(job_class) <= 512))),
    CONSTRAINT schedules_counts_nonnegative CHECK (((enqueued_count >= 0) AND (skipped_count >= 0) AND (missed_count >= 0))),
    CONSTRAINT schedules_interval_positive CHECK (((interval_seconds IS NULL) OR (interval_seconds > 0))),
    CONSTRAINT schedules_later_fates_nonnegative CHECK (((replaced_count >= 0) AND (dropped_count >= 0) AND (deferred_count >= 0))),
    CONSTRAINT schedules_name_length CHECK (((length(name) >= 1) AND (length(name) <= 320))),
    CONSTRAINT schedules_one_kind CHECK (((cron IS NULL) <> (interval_seconds IS NULL))),
    CONSTRAINT schedules_overlap CHECK ((overlap = ANY (ARRAY['Allow'::text, 'Forbid'::text, 'Replace'::text]))),
    CONSTRAINT schedules_queue_length CHECK (((queue IS NULL) OR ((length(queue) >= 1) AND (length(queue) <= 128)))),
    CONSTRAINT schedules_retries_nonnegative CHECK (((max_retries IS NULL) OR (max_retries >= 0))),
    CONSTRAINT schedules_source_length CHECK (((length(source) >= 1) AND (length(source) <= 64))),
    CONSTRAINT schedules_suspended_by CHECK ((((NOT suspended) AND (suspended_by IS NULL)) OR (suspended AND (suspended_by = ANY (ARRAY['spec'::text, 'manual'::text, 'removed'::text]))))),
    CONSTRAINT schedules_timeout_positive CHECK (((timeout_seconds IS NULL) OR (timeout_seconds > (0)::double precision))),
    CONSTRAINT schedules_window_min CHECK ((catch_up_window_seconds >= 60))
)
WITH (fillfactor='50');

--
-- Name: schema_migrations; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: workers; Type: TABLE; Schema: jobwarden
--

CREATE TABLE jobwarden.workers (
    id uuid NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    concurrency integer NOT NULL,
    queues text[] DEFAULT '{}'::text[] NOT NULL,
    code_version text DEFAULT ''::text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    stopping boolean DEFAULT false NOT NULL,
    jobwarden_version text,
    schema_needs integer
)
WITH (autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='200');

--
-- Name: host_pools host_pools_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.host_pools
    ADD CONSTRAINT host_pools_pkey PRIMARY KEY (name);

--
-- Name: hosts hosts_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.hosts
    ADD CONSTRAINT hosts_pkey PRIMARY KEY (name);

--
-- Name: job_attempts job_attempts_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.job_attempts
    ADD CONSTRAINT job_attempts_pkey PRIMARY KEY (job_id, slot);

--
-- Name: job_class_failures job_class_failures_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.job_class_failures
    ADD CONSTRAINT job_class_failures_pkey PRIMARY KEY (job_class);

--
-- Name: job_waiters job_waiters_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.job_waiters
    ADD CONSTRAINT job_waiters_pkey PRIMARY KEY (job_id);

--
-- Name: job_wakeups job_wakeups_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.job_wakeups
    ADD CONSTRAINT job_wakeups_pkey PRIMARY KEY (id);

--
-- Name: jobs jobs_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);

--
-- Name: jobs jobs_pod_run_length; Type: CHECK CONSTRAINT; Schema: jobwarden
--

ALTER TABLE jobwarden.jobs
    ADD CONSTRAINT jobs_pod_run_length CHECK (((pod_run IS NULL) OR ((length(pod_run) >= 1) AND (length(pod_run) <= 400)))) NOT VALID;

--
-- Name: leases leases_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (name, slot);

--
-- Name: migration_releases migration_releases_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.migration_releases
    ADD CONSTRAINT migration_releases_pkey PRIMARY KEY (version);

--
-- Name: queue_pauses queue_pauses_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.queue_pauses
    ADD CONSTRAINT queue_pauses_pkey PRIMARY KEY (queue);

--
-- Name: schedule_owners schedule_owners_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.schedule_owners
    ADD CONSTRAINT schedule_owners_pkey PRIMARY KEY (source, namespace);

--
-- Name: schedule_slots schedule_slots_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.schedule_slots
    ADD CONSTRAINT schedule_slots_pkey PRIMARY KEY (schedule_name, slot);

--
-- Name: schedules schedules_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (name);

--
-- Name: schedules schedules_pod_run_length; Type: CHECK CONSTRAINT; Schema: jobwarden
--

ALTER TABLE jobwarden.schedules
    ADD CONSTRAINT schedules_pod_run_length CHECK (((pod_run IS NULL) OR ((length(pod_run) >= 1) AND (length(pod_run) <= 400)))) NOT VALID;

--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

--
-- Name: workers workers_pkey; Type: CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (id);

--
-- Name: hosts_last_seen_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX hosts_last_seen_idx ON jobwarden.hosts USING btree (last_seen_at);

--
-- Name: hosts_pool_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX hosts_pool_idx ON jobwarden.hosts USING btree (pool, name);

--
-- Name: job_wakeups_channel; Type: INDEX; Schema: jobwarden
--

CREATE INDEX job_wakeups_channel ON jobwarden.job_wakeups USING btree (channel);

--
-- Name: jobs_claim_pool_any_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX jobs_claim_pool_any_idx ON jobwarden.jobs USING btree (priority DESC, run_at, id) WHERE ((status = 'pending'::jobwarden.job_status) AND (pod_run IS NULL));

--
-- Name: jobs_claim_pool_queue_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX jobs_claim_pool_queue_idx ON jobwarden.jobs USING btree (queue, priority DESC, run_at, id) WHERE ((status = 'pending'::jobwarden.job_status) AND (pod_run IS NULL));

--
-- Name: jobs_claimed_by_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX jobs_claimed_by_idx ON jobwarden.jobs USING btree (claimed_by) WHERE (status = 'processing'::jobwarden.job_status);

--
-- Name: jobs_finished_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX jobs_finished_idx ON jobwarden.jobs USING btree (finished_at) WHERE (finished_at IS NOT NULL);

--
-- Name: jobs_lease_waiting_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX jobs_lease_waiting_idx ON jobwarden.jobs USING btree (lease_name, priority DESC, id) WHERE ((status = 'pending'::jobwarden.job_status) AND (lease_name IS NOT NULL));

--
-- Name: jobs_pod_run_claim_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX jobs_pod_run_claim_idx ON jobwarden.jobs USING btree (pod_run, priority DESC, run_at, id) WHERE ((status = 'pending'::jobwarden.job_status) AND (pod_run IS NOT NULL));

--
-- Name: jobs_pod_run_running_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX jobs_pod_run_running_idx ON jobwarden.jobs USING btree (pod_run) WHERE ((status = 'processing'::jobwarden.job_status) AND (pod_run IS NOT NULL));

--
-- Name: jobs_problem_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX jobs_problem_idx ON jobwarden.jobs USING btree (status, id) WHERE (status = ANY (ARRAY['failed'::jobwarden.job_status, 'interrupted'::jobwarden.job_status, 'cancelled'::jobwarden.job_status]));

--
-- Name: jobs_reap_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX jobs_reap_idx ON jobwarden.jobs USING btree (claim_expires_at) WHERE (status = 'processing'::jobwarden.job_status);

--
-- Name: jobs_schedule_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX jobs_schedule_idx ON jobwarden.jobs USING btree (schedule_name, id DESC) WHERE (schedule_name IS NOT NULL);

--
-- Name: jobs_unique_key_idx; Type: INDEX; Schema: jobwarden
--

CREATE UNIQUE INDEX jobs_unique_key_idx ON jobwarden.jobs USING btree (unique_key) WHERE (unique_key IS NOT NULL);

--
-- Name: schedules_due_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX schedules_due_idx ON jobwarden.schedules USING btree (next_slot, name) WHERE (NOT suspended);

--
-- Name: schedules_due_owned_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX schedules_due_owned_idx ON jobwarden.schedules USING btree (next_slot, name) WHERE ((NOT suspended) AND (owner_held_at IS NULL));

--
-- Name: workers_host_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX workers_host_idx ON jobwarden.workers USING btree (host);

--
-- Name: workers_last_seen_idx; Type: INDEX; Schema: jobwarden
--

CREATE INDEX workers_last_seen_idx ON jobwarden.workers USING btree (last_seen_at);

--
-- Name: job_attempts job_attempts_job_id_fkey; Type: FK CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.job_attempts
    ADD CONSTRAINT job_attempts_job_id_fkey FOREIGN KEY (job_id) REFERENCES jobwarden.jobs(id) ON DELETE CASCADE;

--
-- Name: workers workers_host_fkey; Type: FK CONSTRAINT; Schema: jobwarden
--

ALTER TABLE ONLY jobwarden.workers
    ADD CONSTRAINT workers_host_fkey FOREIGN KEY (host) REFERENCES jobwarden.hosts(name) ON DELETE CASCADE;
