-- Which idle workers an enqueue wakes (issue 31). A single enqueue NOTIFYs one
-- idle worker on a channel of its own instead of every worker on the shared
-- `jobs` channel.
--
-- Why: every worker LISTENs on the shared channel and claims when it hears an
-- enqueue, so one job enqueued into an idle fleet of N workers cost N claims (a
-- transaction each, locking the host row): 10.5 claims per job at 10 workers,
-- 51 at 50, 161 at 200 (docs/benchmarks.md, "Machine or herd?").
--
-- An idle worker with a free slot marks itself here in each claim that leaves a
-- slot free (fragment_claim_rows): a row with the channel only it LISTENs on, the
-- queues it serves (NULL: all) and an `until` past its longest idle sleep. A
-- single enqueue (fragment_insert_one) deletes the newest live mark that serves
-- its queue (FOR UPDATE SKIP LOCKED: two enqueues never take the same one) and
-- NOTIFYs that channel; when it finds none it NOTIFYs the shared channel, as
-- before. The woken worker claims (up to its free slots) and marks itself again.
-- A mark whose worker went away without removing it (a crash, a lost LISTEN
-- connection) costs that one job a wait for a poll, never the job: every worker
-- still polls, and a mark expires at `until`.
--
-- Unlogged: marks are worth nothing after a crash (idle workers renew them), and
-- writing one needs no WAL flush.
--
-- Expand-only (docs/upgrades.md): a new table that 0.1.0 neither reads nor writes.
-- A 0.1.0 worker does not mark, so a single enqueue from this release that found
-- a marked 0.2.0 worker does not NOTIFY it: it claims the job at its next poll.
-- 0.1.0's enqueues NOTIFY the shared channel, on which 0.2.0 workers still claim.
CREATE UNLOGGED TABLE {schema}.job_wakeups (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The NOTIFY channel only this worker LISTENs on.
    channel  text NOT NULL,
    -- The queues the worker claims from; NULL: every queue.
    queues   text[],
    -- A mark older than this is a worker that went away (deleted by its next mark
    -- or anyone's).
    until    timestamptz NOT NULL
);
CREATE INDEX job_wakeups_channel ON {schema}.job_wakeups (channel);
