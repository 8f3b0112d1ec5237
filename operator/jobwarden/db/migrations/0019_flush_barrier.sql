-- The single enqueue's flush barrier as a function (jobs.sql flush_barrier;
-- docs/architecture.md, "A single enqueue").
--
-- A single enqueue commits its row asynchronously (visible at once) and then
-- waits on the same connection for the WAL to be flushed past it, so that an
-- enqueue that returned is durable. The wait is a transaction that takes an
-- xid and writes one small WAL record (a transactional logical message): its
-- synchronous commit flushes everything before it. A server that does not let
-- this role run pg_logical_emit_message (EXECUTE revoked from PUBLIC, as a
-- managed service may) must not turn that wait into an error: the enqueue has
-- already committed, and an error would make its caller enqueue again. There
-- the function waits for the WAL writer's own flush to pass the position the
-- WAL had reached when it was called instead (at most wal_writer_delay, 200 ms
-- by default): slower, never wrong.
CREATE FUNCTION {schema}.flush_barrier() RETURNS void LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    -- PostgreSQL 17 added a fourth argument (flush, default false) to the function.
    emit regprocedure := coalesce(
        to_regprocedure('pg_catalog.pg_logical_emit_message(boolean, text, text, boolean)'),
        to_regprocedure('pg_catalog.pg_logical_emit_message(boolean, text, text)'));
    target pg_lsn;
BEGIN
    IF emit IS NOT NULL AND has_function_privilege(emit, 'EXECUTE') THEN
        PERFORM pg_logical_emit_message(true, 'jobwarden.flush', '');
        RETURN;
    END IF;
    target := pg_current_wal_insert_lsn();
    WHILE pg_current_wal_flush_lsn() < target LOOP
        PERFORM pg_sleep(0.001);
    END LOOP;
END;
$$;
