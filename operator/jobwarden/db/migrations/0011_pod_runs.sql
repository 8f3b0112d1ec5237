-- Pod-per-run (docs/podruns.md): a JobSchedule or ExclusiveJob with a pod template
-- runs each of its jobs in a pod of its own instead of on a WorkerPool.
--
-- `pod_run` names the resource whose pod template runs the job, as
-- `<Kind>/<namespace>/<name>` (e.g. `JobSchedule/team-a/nightly-export`); NULL is a
-- pool run that any worker may claim. On `schedules` it is the definition's value,
-- copied by the schedule runner onto every job it enqueues for the schedule.
-- Workers never claim a row whose pod_run is set (every worker claim says
-- `pod_run IS NULL`); the operator claims those rows for the resources it watches
-- (podruns.sql) and hands each claim to a pod running `jobwarden run-job`.
--
-- Adding nullable columns rewrites nothing. The length checks are added NOT VALID:
-- every existing row is NULL, so there is nothing to validate, and a big jobs
-- table is not scanned under an exclusive lock; new and updated rows are checked.
ALTER TABLE {schema}.jobs ADD COLUMN pod_run text;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_pod_run_length
    CHECK (pod_run IS NULL OR length(pod_run) BETWEEN 1 AND 400) NOT VALID;
ALTER TABLE {schema}.schedules ADD COLUMN pod_run text;
ALTER TABLE {schema}.schedules ADD CONSTRAINT schedules_pod_run_length
    CHECK (pod_run IS NULL OR length(pod_run) BETWEEN 1 AND 400) NOT VALID;

-- The operator's claim (pod_run_claim): due pending rows of the given resources in
-- priority order. Partial over pending pod runs only, so it stays tiny however many
-- pool jobs or finished rows the table holds, and pool rows never enter it.
CREATE INDEX jobs_pod_run_claim_idx ON {schema}.jobs (pod_run, priority DESC, run_at, id)
    WHERE status = 'pending' AND pod_run IS NOT NULL;
-- Running pod runs of given resources (pod_run_running: Replace, status, pod GC).
CREATE INDEX jobs_pod_run_running_idx ON {schema}.jobs (pod_run)
    WHERE status = 'processing' AND pod_run IS NOT NULL;
