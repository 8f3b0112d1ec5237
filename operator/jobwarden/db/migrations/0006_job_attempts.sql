-- Attempt history: one row per finished attempt of a job (its start, end, host,
-- outcome, error and traceback), kept for the last 25 attempts of each job.
--
-- Why a ring and not an append-only log: a job retried by hand again and again (or
-- a schedule's flaky job) must not grow without bound, and trimming an append-only
-- log needs a DELETE on the hot path. Here each attempt upserts slot
-- `mod(attempt, 25)`, so the table holds at most 25 rows per job with one index
-- insertion (or update) per attempt and no extra statement: the row is written by
-- the same statement that records the outcome on the jobs row (jobs.sql).
-- The start is the claim's `claimed_at` (already on the jobs row), so the claim
-- statement itself writes nothing more.
CREATE TABLE {schema}.job_attempts (
    job_id       bigint NOT NULL REFERENCES {schema}.jobs (id) ON DELETE CASCADE,
    slot         smallint NOT NULL,
    attempt      integer NOT NULL,
    started_at   timestamptz,
    finished_at  timestamptz NOT NULL DEFAULT now(),
    host         text,
    -- completed | failed | cancelled | reaped
    outcome      text NOT NULL,
    -- The job's status right after this attempt (pending = it will be retried).
    status_after text NOT NULL,
    error        text,
    traceback    text,
    PRIMARY KEY (job_id, slot),
    CONSTRAINT job_attempts_outcome_known CHECK (outcome IN ('completed', 'failed', 'cancelled', 'reaped'))
);
