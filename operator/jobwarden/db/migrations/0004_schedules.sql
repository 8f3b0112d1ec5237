-- Recurring schedules (docs/schedules.md). One row per schedule name, shared by every
-- runner of every cluster on this database: the row lock decides which runner plans a
-- schedule's due slots, and the jobs table's unique key `<name>:<slot UTC ISO 8601>`
-- is the last word on "one job per slot".
--
-- Slots: `planned_until` is the instant up to which every slot has a recorded
-- fate (enqueued, skipped by the overlap policy, or missed by the catch-up rule). A
-- slot at or before it never runs again. `last_slot` is the newest slot that got a
-- fate, `last_enqueued_slot` the newest that became a job, `next_slot` the first
-- slot after planned_until: a schedule is due when next_slot <= now().

CREATE TABLE {schema}.schedules (
    name                     text PRIMARY KEY,
    -- The stored spelling (Expression.canonical()): `CRON_TZ=<zone> <cron>` or
    -- `@every <interval>`; cron/interval/timezone are the same, split for people.
    expression               text NOT NULL,
    cron                     text,
    interval_seconds         integer,
    timezone                 text NOT NULL DEFAULT 'UTC',
    job_class                text NOT NULL,
    data                     jsonb NOT NULL DEFAULT 'null',
    -- NULL = the job defaults (Job.queue, priority, timeout, max_retries, idempotent).
    queue                    text,
    priority                 integer,
    timeout_seconds          double precision,
    max_retries              integer,
    idempotent               boolean,
    catch_up                 text NOT NULL DEFAULT 'latest',
    catch_up_window_seconds  integer NOT NULL DEFAULT 3600,
    catch_up_max             integer NOT NULL DEFAULT 10,
    overlap                  text NOT NULL DEFAULT 'Allow',
    -- suspended_by: 'spec' (the definition says so), 'manual' (suspend(): survives a
    -- re-apply of the definition until resume()), 'removed' (a code schedule no
    -- longer in the code). Slots passed while suspended are counted as missed.
    suspended                boolean NOT NULL DEFAULT false,
    suspended_by             text,
    spec_suspended           boolean NOT NULL DEFAULT false,
    -- Who wrote the definition ('code', 'cli', 'kubernetes', ...) and from where
    -- (a module, a cluster/namespace); spec_hash is a stable hash of the definition,
    -- so two writers with different definitions for one name can be told apart.
    source                   text NOT NULL DEFAULT 'code',
    origin                   text,
    spec_hash                text NOT NULL,
    planned_until            timestamptz NOT NULL DEFAULT now(),
    last_slot                timestamptz,
    last_enqueued_slot       timestamptz,
    next_slot                timestamptz NOT NULL,
    enqueued_count           bigint NOT NULL DEFAULT 0,
    skipped_count            bigint NOT NULL DEFAULT 0,
    missed_count             bigint NOT NULL DEFAULT 0,
    last_job_id              bigint,
    -- Kept here (not only derived from jobs) so a purge of old jobs does not make a
    -- healthy schedule look like it never succeeded.
    last_success_at          timestamptz,
    last_error               text,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_name_length CHECK (length(name) BETWEEN 1 AND 320),
    CONSTRAINT schedules_one_kind CHECK ((cron IS NULL) <> (interval_seconds IS NULL)),
    CONSTRAINT schedules_interval_positive CHECK (interval_seconds IS NULL OR interval_seconds > 0),
    CONSTRAINT schedules_class_length CHECK (length(job_class) BETWEEN 1 AND 512),
    CONSTRAINT schedules_queue_length CHECK (queue IS NULL OR length(queue) BETWEEN 1 AND 128),
    CONSTRAINT schedules_timeout_positive CHECK (timeout_seconds IS NULL OR timeout_seconds > 0),
    CONSTRAINT schedules_retries_nonnegative CHECK (max_retries IS NULL OR max_retries >= 0),
    CONSTRAINT schedules_catch_up CHECK (catch_up IN ('latest', 'none', 'all')),
    CONSTRAINT schedules_window_min CHECK (catch_up_window_seconds >= 60),
    CONSTRAINT schedules_catch_up_max CHECK (catch_up_max >= 1),
    CONSTRAINT schedules_overlap CHECK (overlap IN ('Allow', 'Forbid', 'Replace')),
    CONSTRAINT schedules_suspended_by CHECK (
        (NOT suspended AND suspended_by IS NULL)
        OR (suspended AND suspended_by IN ('spec', 'manual', 'removed'))
    ),
    CONSTRAINT schedules_source_length CHECK (length(source) BETWEEN 1 AND 64),
    CONSTRAINT schedules_counts_nonnegative CHECK (
        enqueued_count >= 0 AND skipped_count >= 0 AND missed_count >= 0
    )
);

-- Due lookups: the runner reads active schedules whose next slot has come, oldest
-- first, in pages keyed by (next_slot, name), so a pass costs O(due) however many
-- schedules exist and a later page never rescans an earlier one.
CREATE INDEX schedules_due_idx ON {schema}.schedules (next_slot, name) WHERE NOT suspended;
-- Code sync: the code schedules a process may have to suspend.
CREATE INDEX schedules_source_idx ON {schema}.schedules (source, origin);
