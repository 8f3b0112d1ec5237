-- Paused queues: a row here means workers claim nothing from that queue; jobs
-- already running finish normally. Resume deletes the row.
--
-- Why a table of paused queues and not a `queues` catalogue: queues exist
-- implicitly (any enqueue names one), so there is nothing to keep in sync; the
-- claim's anti-join against this (normally empty, always tiny) table is a hash
-- lookup per candidate row.
CREATE TABLE {schema}.queue_pauses (
    queue      text PRIMARY KEY,
    paused_at  timestamptz NOT NULL DEFAULT now(),
    paused_by  text,
    CONSTRAINT queue_pauses_queue_length CHECK (length(queue) BETWEEN 1 AND 128)
);
