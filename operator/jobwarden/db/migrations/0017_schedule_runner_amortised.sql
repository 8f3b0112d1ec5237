-- What a schedule-runner pass writes per schedule, made cheaper again
-- (docs/benchmarks.md, "Fifth round", "Schedule runner").
--
-- 1. slot_rows: how many history rows (schedule_slots) the schedule may hold, an
--    upper bound the runner keeps in the write-back it does anyway (only the runner
--    adds history rows, and only for schedules whose rows it holds locked). The
--    pass prunes a schedule's history only once this passes the bound plus a margin
--    (runner.SLOT_HISTORY + runner.PRUNE_MARGIN) and then back to the bound, instead
--    of walking every schedule's newest entries on every pass. Readers show at most
--    the bound's newest slots, so what they see does not change. Counted here from
--    the rows that exist; a pass of an older runner that adds rows after this
--    migration and before it stops still prunes them itself, so the bound holds.
-- 2. fillfactor 50: the write-back's update can never be HOT (next_slot is the due
--    index's key), but with room on the page the new version lands beside the old
--    one, so the WAL record carries only the changed middle of the row (the
--    definition's columns before planned_until and the ones after updated_at are
--    the same bytes): measured 580 -> 331 bytes of WAL per schedule per pass, and
--    one heap page dirtied instead of two. Pages written from now on keep the
--    room; the rows already stored move to such pages at their next update.
ALTER TABLE {schema}.schedules
    ADD COLUMN slot_rows integer NOT NULL DEFAULT 0,
    SET (fillfactor = 50);

UPDATE {schema}.schedules AS s
SET slot_rows = h.rows
FROM (SELECT schedule_name, count(*)::integer AS rows
      FROM {schema}.schedule_slots GROUP BY schedule_name) AS h
WHERE s.name = h.schedule_name;
