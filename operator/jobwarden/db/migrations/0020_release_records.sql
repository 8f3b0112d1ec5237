-- Releases and the schema (docs/upgrades.md, issue 25). Expand-only: 0.1.0's
-- processes neither read nor write any of this, and its inserts into workers
-- still work (the new columns are nullable).
--
-- One row per migration applied by `jobwarden migrate` of 0.2.0 or later: the
-- release that applied it, and the oldest release whose processes the schema
-- still serves once it is applied (serves_from: the newest `stopped_using` of the
-- migration's contractions.toml entries; NULL when it only adds). A process of a
-- release older than any serves_from here refuses to start (exit 14) instead of
-- failing later on a statement whose object is gone. A release number is text
-- (MAJOR.MINOR.PATCH), compared as numbers by the code, not here.
CREATE TABLE {schema}.migration_releases (
    version     integer PRIMARY KEY,
    applied_by  text NOT NULL,
    serves_from text,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT migration_releases_applied_by CHECK (applied_by ~ '^\d+\.\d+\.\d+$'),
    CONSTRAINT migration_releases_serves_from CHECK (serves_from ~ '^\d+\.\d+\.\d+$')
);

-- What each worker process runs: its Jobwarden release and the newest migration
-- its code needs (it needs every migration it ships, and knows none newer).
-- NULL for a process of 0.1.0, which records neither.
ALTER TABLE {schema}.workers
    ADD COLUMN jobwarden_version text,
    ADD COLUMN schema_needs integer;
