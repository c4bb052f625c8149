-- logbook_wait_claim waits up to p_ms milliseconds for a peer's liveness claim to be freed
-- (session.WatchPeers), and reports whether it was: a shared request, transaction-scoped (let go
-- when the statement's transaction ends), that conflicts only with the owner's exclusive hold.
--
-- The wait ends by lock_timeout while the peer lives, every second or so for each replica. A
-- lock timeout that reached the client would be an ERROR in the server's log each time; caught
-- here, it is a false answer and nothing is logged. The caller keeps p_ms below the server's
-- deadlock_timeout, so the deadlock detector (which locks the whole lock table) never runs for
-- these waits.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION logbook_wait_claim(p_key bigint, p_ms integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM set_config('lock_timeout', greatest(p_ms, 1)::text, true);
    PERFORM pg_advisory_xact_lock_shared(p_key);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION logbook_wait_claim(bigint, integer);
