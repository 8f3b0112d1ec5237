-- Who waits for a job (issue 31). A terminal write NOTIFYs the `done` channel only
-- for jobs marked here, instead of for every job.
--
-- Why: PostgreSQL (before 19) signals every backend that LISTENs on any channel
-- of the database at each notifying commit, whatever the channel, and each one
-- runs a transaction of its own to read the notification queue. Every worker
-- process holds a LISTEN connection (for enqueues), so a NOTIFY per completion
-- batch that nobody waited for cost the server one transaction per worker in the
-- fleet: 50 workers draining no-op jobs, 5.1 transactions per job instead of 0.4
-- (docs/benchmarks.md, "Worker fleet on one PostgreSQL").
--
-- Client.wait marks its job (an `until` some seconds ahead, renewed while it
-- waits) before its first read of the row; a terminal write notifies for the
-- jobs it finds marked and removes their marks. A wait still reads the row every
-- second, so a mark that a write did not see yet costs latency, never a result.
-- Unlogged: marks are worth nothing after a crash (waiters renew them), and
-- writing one needs no WAL flush.
--
-- Expand-only (docs/upgrades.md): a new table that 0.1.0 neither reads nor writes.
-- A 0.1.0 client's wait does not mark: against this release's workers it is woken
-- by its one-second read instead of a NOTIFY.
CREATE UNLOGGED TABLE {schema}.job_waiters (
    job_id bigint PRIMARY KEY,
    -- A mark older than this is a waiter that went away (deleted by the next mark).
    until  timestamptz NOT NULL
);
