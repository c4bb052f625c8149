-- A liveness claim that needs no connection of its own (issue 53: fifty replicas through
-- PgBouncer). A replica's liveness claim was only ever a session-scoped advisory lock held on
-- its LISTEN connection to PostgreSQL itself, so a fleet behind PgBouncer still held one
-- direct connection per replica: fifty replicas, fifty connections beside PgBouncer's pool.
--
-- A replica that runs with LOGBOOK_LIVENESS=heartbeat holds its claim as a row instead: its
-- replica_peers row (it takes wakes over HTTP, LOGBOOK_PEER_ADDR, since it LISTENs for
-- nothing) with alive_until, which it moves forward through the pool, one statement a few
-- seconds, and which it stops trusting itself before the database would (it cancels its turns
-- when a renewal has not come back in time). A claim is free when neither form is held: no
-- unexpired row and no lock. Every check of a claim goes through logbook_claim_free, so
-- logbook_acquire_lease, the poll, the dead-owner scan and the routing of wakes read both.
--
-- alive_until is NULL for a replica whose claim is its lock (it records its address while
-- the lock is held, as before).

-- +goose Up
ALTER TABLE replica_peers ADD COLUMN alive_until timestamptz;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_claim_free(p_owner text) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT CASE
        WHEN EXISTS (SELECT 1 FROM replica_peers p
                     WHERE p.owner = p_owner AND p.alive_until > clock_timestamp()) THEN false
        ELSE pg_try_advisory_xact_lock_shared(hashtextextended(p_owner, 7461005))
    END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION logbook_claim_free(p_owner text) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT pg_try_advisory_xact_lock_shared(hashtextextended(p_owner, 7461005))
$$;
-- +goose StatementEnd
ALTER TABLE replica_peers DROP COLUMN alive_until;
