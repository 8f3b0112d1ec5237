-- What a schedule-runner pass writes per schedule, made cheaper (docs/benchmarks.md,
-- "Schedule runner"). A pass updates every due schedule's row and adds one history
-- row per slot; both costs scale with the schedules due at once.
--
-- 1. The history's foreign key goes: its check ran one query per inserted slot row
--    (locking the schedule row the pass already holds), about a third of the history
--    insert. What it gave -- the history deleted with its schedule -- is now the
--    second statement of schedule deletion, in the same transaction (a later
--    statement, so it also sees slots a runner committed while the deletion waited
--    for that runner's row lock). Only the runner adds history rows, and only for
--    schedules whose rows it holds locked, so no row can name a missing schedule.
-- 2. schedules_source_idx goes: the update of next_slot can never be HOT (it is the
--    due index's key), so every pass inserted an entry into each of the table's
--    indexes for every schedule; this one served only the start-up sync of code
--    schedules (`schedule_code_rows`), a scan that a sequential read of the table
--    does as well.
ALTER TABLE {schema}.schedule_slots DROP CONSTRAINT schedule_slots_schedule_name_fkey;
DROP INDEX {schema}.schedules_source_idx;
