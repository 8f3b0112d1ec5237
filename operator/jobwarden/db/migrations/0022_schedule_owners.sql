-- A deleted JobSchedule stops firing even when no operator of its cluster comes back
-- (docs/schedules.md, "Rows whose owner is gone"; issue 27).
--
-- schedule_owners: one row per (cluster source, watched namespace) that a 0.2.0+
-- operator renews while it confirms its schedule rows against its API server
-- (namespace '' = every namespace: a cluster-wide operator). A runner that claims a
-- due schedule written by `source` in namespace N looks at the owner rows covering
-- it ((source, N) and (source, '')): when there is at least one and none was renewed
-- within its own grace, the owner is absent, and the runner holds the schedule
-- (owner_held_at = now()) instead of enqueuing. A held row is not due for 0.2.0's
-- runners (schedules_due_owned_idx). The returning operator lifts the hold for the
-- rows whose resource exists (catch-up rules apply to the slots that passed) and
-- deletes the others. A row that no owner row covers (written by 0.1.0's operator,
-- which never renews anything) fires as before.
--
-- Expand-only (docs/upgrades.md): a new table, a nullable column 0.1.0 neither reads
-- nor writes (0.1.0's runners still fire a held row: accepted for the previous
-- release, CHANGELOG "Upgrading"), and a new partial index beside schedules_due_idx,
-- which 0.1.0's claim keeps using.
CREATE TABLE {schema}.schedule_owners (
    source        text NOT NULL,
    namespace     text NOT NULL,
    -- The operator process that renewed it last (for people).
    holder        text NOT NULL,
    renewed_at    timestamptz NOT NULL DEFAULT now(),
    -- The owner's own grace: every runner uses the grace its owner declared, so only
    -- the operator is configured (JOBWARDEN_OWNER_GRACE_SECONDS).
    grace_seconds integer NOT NULL,
    CONSTRAINT schedule_owners_pkey PRIMARY KEY (source, namespace),
    CONSTRAINT schedule_owners_grace CHECK (grace_seconds BETWEEN 5 AND 86400)
);

-- When a runner held the schedule because its owner was absent; NULL = not held.
ALTER TABLE {schema}.schedules ADD COLUMN owner_held_at timestamptz;

-- The 0.2.0 runner's due lookups: as schedules_due_idx, without held rows, so a pass
-- never walks the rows of an absent cluster again and again.
CREATE INDEX schedules_due_owned_idx ON {schema}.schedules (next_slot, name)
    WHERE NOT suspended AND owner_held_at IS NULL;
