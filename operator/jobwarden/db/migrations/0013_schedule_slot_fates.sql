-- Every schedule slot's fate, in one place (docs/schedules.md, "Slot fates").
--
-- The runner decides enqueued / skipped / missed; what happens later to an
-- enqueued slot's run is a fate too: replaced (a Replace slot cancelled it),
-- dropped (a Forbid run found the schedule's lease busy: on_busy = skip) or
-- deferred (it found a lease busy and waits: on_busy = defer; counted at its
-- first deferral only). The counts live on the schedule row (the operator
-- mirrors them into JobSchedule .status; the gauge-lease holder exports them
-- as jobwarden_schedule_slots_total{{schedule, fate}}), each moved by the same
-- statement or transaction that decided the fate.
ALTER TABLE {schema}.schedules
    ADD COLUMN replaced_count bigint NOT NULL DEFAULT 0,
    ADD COLUMN dropped_count bigint NOT NULL DEFAULT 0,
    ADD COLUMN deferred_count bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT schedules_later_fates_nonnegative CHECK (
        replaced_count >= 0 AND dropped_count >= 0 AND deferred_count >= 0);

-- The last slots of each schedule with their fate, bounded: the runner prunes a
-- schedule's rows beyond the newest few dozen in the transaction that adds them.
-- One row per slot; a later fate of an enqueued slot (replaced, dropped,
-- deferred) updates its row. Missed slots after a long outage are recorded only
-- as far back as the bound reaches (their full number is in missed_count).
-- Deleted with its schedule.
CREATE TABLE {schema}.schedule_slots (
    schedule_name  text NOT NULL REFERENCES {schema}.schedules (name) ON DELETE CASCADE,
    slot           timestamptz NOT NULL,
    fate           text NOT NULL,
    job_id         bigint,
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_name, slot),
    CONSTRAINT schedule_slots_fate CHECK (
        fate IN ('enqueued', 'skipped', 'missed', 'replaced', 'dropped', 'deferred'))
);
