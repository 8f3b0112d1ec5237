-- Per-table autovacuum settings for the tables every job, lease and host
-- refresh rewrites (issue 16, docs/benchmarks.md "Dead tuples").
--
-- Why: a job row is inserted, updated at claim and updated again at its
-- outcome, so each job leaves two dead tuples behind, and the claim indexes
-- are partial indexes on `status` (never HOT-updated). With the server's
-- defaults (vacuum after 20% of the table is dead) a table of 1,000,000
-- finished rows waits for 200,000 dead tuples between vacuums, and the claim
-- indexes bloat meanwhile: measured here, 10,000 jobs beside 2,000,000 dead
-- tuples ran at 2,505 jobs/s against 8,414 after one VACUUM. These settings
-- vacuum the jobs table after 1% (+1,000 rows) is dead, analyze after 2%,
-- vacuum insert-only growth after 5%, and let the vacuum run at twice the
-- default cost budget. The small, hot tables (leases, hosts, workers) are
-- vacuumed after a fixed number of dead rows, whatever their size.
-- They only matter where autovacuum is on; `jobwarden status` warns when it
-- is off.
ALTER TABLE {schema}.jobs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 400
);
ALTER TABLE {schema}.job_attempts SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000
);
ALTER TABLE {schema}.leases SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 500
);
ALTER TABLE {schema}.hosts SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 200
);
ALTER TABLE {schema}.workers SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 200
);
