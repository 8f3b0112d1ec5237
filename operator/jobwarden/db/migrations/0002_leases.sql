-- Leases: cluster-wide exclusivity (docs/leases.md).
-- One row per (name, slot). Slot 0 is a plain lease; a semaphore of N holders
-- uses slots 0..N-1. Rows are kept after release (owner NULL) so the fencing
-- token of a name never goes backwards; a free row costs ~100 bytes.

-- Fencing tokens. One sequence for every lease: nextval is taken inside the
-- statement that holds the row lock, so on any one (name, slot) each holder's
-- token is larger than every earlier holder's. Tokens are also unique across names.
CREATE SEQUENCE {schema}.lease_tokens AS bigint;

CREATE TABLE {schema}.leases (
    name         text NOT NULL,
    slot         integer NOT NULL DEFAULT 0,
    -- NULL while free. The standalone API uses a fresh UUID per acquisition;
    -- exclusive jobs use the attempt's claim token.
    owner        text,
    holder_host  text,
    -- The token handed to the current (or last) holder; 0 = never held.
    token        bigint NOT NULL DEFAULT 0,
    acquired_at  timestamptz,
    expires_at   timestamptz,
    released_at  timestamptz,
    -- Someone blocks in wait() for this name until then: only then does a release
    -- NOTIFY. (A NOTIFY serialises the commits of all notifying transactions in
    -- the cluster, so an uncontended release must not pay for it.)
    waiting_until timestamptz,
    PRIMARY KEY (name, slot),
    CONSTRAINT leases_name_length CHECK (length(name) BETWEEN 1 AND 200),
    CONSTRAINT leases_slot_range CHECK (slot >= 0),
    CONSTRAINT leases_held_has_expiry CHECK (owner IS NULL OR expires_at IS NOT NULL)
);

-- `jobwarden leases list` and the held-leases gauge read only held rows.
CREATE INDEX leases_held_idx ON {schema}.leases (expires_at) WHERE owner IS NOT NULL;

-- Jobs deferred on a busy lease, so its release can hand it to the next one
-- (lease_release, wake_jobs) without scanning the jobs table.
CREATE INDEX jobs_lease_waiting_idx ON {schema}.jobs (lease_name, priority DESC, id)
    WHERE status = 'pending' AND lease_name IS NOT NULL;
