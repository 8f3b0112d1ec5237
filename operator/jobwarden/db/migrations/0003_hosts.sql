-- The host registry: one row per host (a pod, a VM), one row per worker process on
-- it, and per-pool defaults. `{schema}` is the configured schema; literal braces
-- are doubled.
--
-- What is NOT stored: how many jobs a host is running. That is derived from the
-- jobs table (status = 'processing' AND claimed_by = host, an indexed count), so
-- it can never drift from the truth when a process dies without cleaning up.

CREATE TABLE {schema}.hosts (
    name             text PRIMARY KEY,
    pool             text NOT NULL DEFAULT 'default',
    code_version     text NOT NULL DEFAULT '',
    -- Per-host cap on concurrent jobs across every process and runner on the host;
    -- NULL = the pool's default (host_pools.host_cap), and NULL there = no cap.
    host_cap         integer,
    started_at       timestamptz NOT NULL DEFAULT now(),
    last_seen_at     timestamptz NOT NULL DEFAULT now(),
    -- A drain is in force while draining AND (drain_expires_at IS NULL OR it is in
    -- the future): an expired drain lifts by itself, judged on the database clock.
    draining         boolean NOT NULL DEFAULT false,
    drain_reason     text,
    drain_started_at timestamptz,
    drain_expires_at timestamptz,
    -- Set once, by whoever first sees the draining host idle (drain duration metric).
    drain_idle_at    timestamptz,
    -- The tick route's per-host overlap guard: a short owner-fenced lease on the
    -- row, not a session advisory lock, so it works behind a transaction pooler.
    tick_owner       uuid,
    tick_expires_at  timestamptz,
    CONSTRAINT hosts_name_length CHECK (length(name) BETWEEN 1 AND 253),
    CONSTRAINT hosts_pool_length CHECK (length(pool) BETWEEN 1 AND 128),
    CONSTRAINT hosts_cap_positive CHECK (host_cap IS NULL OR host_cap >= 1),
    CONSTRAINT hosts_drain_started CHECK (NOT draining OR drain_started_at IS NOT NULL)
);

CREATE INDEX hosts_pool_idx ON {schema}.hosts (pool, name);
CREATE INDEX hosts_last_seen_idx ON {schema}.hosts (last_seen_at);

-- One row per live worker process. Several processes may share one host name
-- (the cap holds across them); each keeps its own row so a process that stops
-- (self-drain) does not stop its siblings, and a dead one is pruned alone.
CREATE TABLE {schema}.workers (
    id           uuid PRIMARY KEY,
    host         text NOT NULL REFERENCES {schema}.hosts (name) ON DELETE CASCADE,
    pid          integer NOT NULL,
    concurrency  integer NOT NULL,
    queues       text[] NOT NULL DEFAULT '{{}}',
    code_version text NOT NULL DEFAULT '',
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    -- The process received SIGTERM: it claims nothing and finishes what it runs.
    stopping     boolean NOT NULL DEFAULT false
);

CREATE INDEX workers_host_idx ON {schema}.workers (host);
CREATE INDEX workers_last_seen_idx ON {schema}.workers (last_seen_at);

-- Per-pool settings: the default per-host cap, and a pool-wide drain that also
-- applies to hosts that register while it is in force.
CREATE TABLE {schema}.host_pools (
    name             text PRIMARY KEY,
    host_cap         integer,
    draining         boolean NOT NULL DEFAULT false,
    drain_reason     text,
    drain_started_at timestamptz,
    drain_expires_at timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT host_pools_cap_positive CHECK (host_cap IS NULL OR host_cap >= 1)
);
