-- The workers' claim indexes hold pool runs only (issue 18).
--
-- Every worker claim says `pod_run IS NULL` (0011): a pod run is the operator's. The
-- claim indexes of 0001 held every pending row, so pending pod runs -- a pod-run
-- schedule's slots piling up while no operator runs, at the front of the index by
-- their old run_at or high priority -- were walked past and filtered out by every
-- worker claim: one index entry and heap check each, per claim. Partial on
-- `pod_run IS NULL` as well, they never enter a worker's index walk; the operator's
-- claim has its own index (jobs_pod_run_claim_idx).
--
-- The pending-job gauges (job_oldest_pending, job_scheduled_counts, queue_overview)
-- count pool and pod runs alike; they read each half from its own partial index
-- (jobs.sql, queues.sql: UNION ALL of `pod_run IS NULL` and `IS NOT NULL`).
--
-- Built inside the migration's transaction like every index here (0001, 0011): a
-- migration is all or nothing. The new indexes are built before the old ones go, so
-- claims never lack an index.
CREATE INDEX jobs_claim_pool_queue_idx ON {schema}.jobs (queue, priority DESC, run_at, id)
    WHERE status = 'pending' AND pod_run IS NULL;
CREATE INDEX jobs_claim_pool_any_idx ON {schema}.jobs (priority DESC, run_at, id)
    WHERE status = 'pending' AND pod_run IS NULL;
DROP INDEX {schema}.jobs_claim_queue_idx;
DROP INDEX {schema}.jobs_claim_any_idx;
