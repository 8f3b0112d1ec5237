-- Per-job lease options, for jobs whose lease is named by whoever enqueued them
-- (an ExclusiveJob resource, a schedule with concurrencyPolicy Forbid) rather than
-- by the job class: what a busy lease does to the run, and how long the lease
-- lives without renewal. NULL = the class's on_busy / the default window.
ALTER TABLE {schema}.jobs
    ADD COLUMN on_busy text,
    ADD COLUMN lease_ttl_seconds double precision,
    ADD CONSTRAINT jobs_on_busy_known CHECK (on_busy IN ('defer', 'skip', 'fail')),
    ADD CONSTRAINT jobs_lease_ttl_positive CHECK (lease_ttl_seconds > 0);
