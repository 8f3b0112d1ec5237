-- When a schedule last went from suspended to active (issue 27: JobwardenScheduleNoSuccess
-- paged on every resume of a long-suspended schedule, its last success being as old as
-- the suspension). schedule_health counts a schedule's time without a success from its
-- last success, its creation or this instant, whichever is latest.
--
-- Expand-only (docs/upgrades.md): a nullable column that 0.1.0 neither reads nor writes;
-- a resume done by a 0.1.0 process leaves it as it was (the alert may then fire after
-- that resume, as it did in 0.1.0).
ALTER TABLE {schema}.schedules ADD COLUMN resumed_at timestamptz;
