-- Job classes a worker could not import (issue 27: a JobSchedule of
-- `nosuch.module:Thing` said Ready=True while every run failed). The operator cannot
-- import application code; the workers that fail to are the ones who know, so they
-- record it here (at most once a minute per class and process), and the operator
-- reads it with the schedule's row: a failure newer than the schedule's last success
-- makes the JobSchedule Ready=False (JobClassNotImportable) with a Warning Event.
-- A later success of the schedule is what clears it (nothing is written on the
-- success path); a fixed image that has not run the schedule yet still shows it.
--
-- Expand-only (docs/upgrades.md): a new table that 0.1.0 neither reads nor writes.
CREATE TABLE {schema}.job_class_failures (
    job_class  text PRIMARY KEY,
    -- The import error as the worker saw it (first 1,000 characters).
    error      text NOT NULL,
    -- The host (pod) that failed last, and when (database clock).
    host       text NOT NULL,
    failed_at  timestamptz NOT NULL DEFAULT now(),
    failures   bigint NOT NULL DEFAULT 1
);
