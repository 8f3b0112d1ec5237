-- Finding problem jobs among millions of completed ones (`jobs list --status
-- failed`, the console's jobs page, bulk retry): newest first by id within a
-- status. Partial, so completed rows -- nearly all of a busy table -- add nothing
-- to it and the hot path's writes are unchanged for them.
CREATE INDEX jobs_problem_idx ON {schema}.jobs (status, id)
    WHERE status IN ('failed', 'interrupted', 'cancelled');
